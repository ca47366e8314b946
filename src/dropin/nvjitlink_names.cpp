// The plain names libnvJitLink.so.13 also exports (nvJitLinkCreate, ...): programs that dlsym them
// (cucore's own loader does) reach the same functions as the versioned entry points. A separate
// file, because nvJitLink.h defines these names as static inline functions.
#include <cstddef>
#include <cstdint>

extern "C" {
typedef struct nvJitLink* nvJitLinkHandle;
typedef int nvJitLinkResult;
typedef int nvJitLinkInputType;

nvJitLinkResult __nvJitLinkCreate_13_0(nvJitLinkHandle*, uint32_t, const char* const*);
nvJitLinkResult __nvJitLinkDestroy_13_0(nvJitLinkHandle*);
nvJitLinkResult __nvJitLinkAddData_13_0(nvJitLinkHandle, nvJitLinkInputType, const void*, size_t,
                                        const char*);
nvJitLinkResult __nvJitLinkAddFile_13_0(nvJitLinkHandle, nvJitLinkInputType, const char*);
nvJitLinkResult __nvJitLinkComplete_13_0(nvJitLinkHandle);
nvJitLinkResult __nvJitLinkGetLinkedCubinSize_13_0(nvJitLinkHandle, size_t*);
nvJitLinkResult __nvJitLinkGetLinkedCubin_13_0(nvJitLinkHandle, void*);
nvJitLinkResult __nvJitLinkGetLinkedPtxSize_13_0(nvJitLinkHandle, size_t*);
nvJitLinkResult __nvJitLinkGetLinkedPtx_13_0(nvJitLinkHandle, char*);
nvJitLinkResult __nvJitLinkGetErrorLogSize_13_0(nvJitLinkHandle, size_t*);
nvJitLinkResult __nvJitLinkGetErrorLog_13_0(nvJitLinkHandle, char*);
nvJitLinkResult __nvJitLinkGetInfoLogSize_13_0(nvJitLinkHandle, size_t*);
nvJitLinkResult __nvJitLinkGetInfoLog_13_0(nvJitLinkHandle, char*);

#define CUCORE_EXPORT __attribute__((visibility("default")))

CUCORE_EXPORT nvJitLinkResult nvJitLinkCreate(nvJitLinkHandle* handle, uint32_t num_options,
                                              const char** options) {
  return __nvJitLinkCreate_13_0(handle, num_options, options);
}
CUCORE_EXPORT nvJitLinkResult nvJitLinkDestroy(nvJitLinkHandle* handle) {
  return __nvJitLinkDestroy_13_0(handle);
}
CUCORE_EXPORT nvJitLinkResult nvJitLinkAddData(nvJitLinkHandle handle, nvJitLinkInputType type,
                                               const void* data, size_t size, const char* name) {
  return __nvJitLinkAddData_13_0(handle, type, data, size, name);
}
CUCORE_EXPORT nvJitLinkResult nvJitLinkAddFile(nvJitLinkHandle handle, nvJitLinkInputType type,
                                               const char* file_name) {
  return __nvJitLinkAddFile_13_0(handle, type, file_name);
}
CUCORE_EXPORT nvJitLinkResult nvJitLinkComplete(nvJitLinkHandle handle) {
  return __nvJitLinkComplete_13_0(handle);
}
CUCORE_EXPORT nvJitLinkResult nvJitLinkGetLinkedCubinSize(nvJitLinkHandle handle, size_t* size) {
  return __nvJitLinkGetLinkedCubinSize_13_0(handle, size);
}
CUCORE_EXPORT nvJitLinkResult nvJitLinkGetLinkedCubin(nvJitLinkHandle handle, void* cubin) {
  return __nvJitLinkGetLinkedCubin_13_0(handle, cubin);
}
CUCORE_EXPORT nvJitLinkResult nvJitLinkGetLinkedPtxSize(nvJitLinkHandle handle, size_t* size) {
  return __nvJitLinkGetLinkedPtxSize_13_0(handle, size);
}
CUCORE_EXPORT nvJitLinkResult nvJitLinkGetLinkedPtx(nvJitLinkHandle handle, char* ptx) {
  return __nvJitLinkGetLinkedPtx_13_0(handle, ptx);
}
CUCORE_EXPORT nvJitLinkResult nvJitLinkGetErrorLogSize(nvJitLinkHandle handle, size_t* size) {
  return __nvJitLinkGetErrorLogSize_13_0(handle, size);
}
CUCORE_EXPORT nvJitLinkResult nvJitLinkGetErrorLog(nvJitLinkHandle handle, char* log) {
  return __nvJitLinkGetErrorLog_13_0(handle, log);
}
CUCORE_EXPORT nvJitLinkResult nvJitLinkGetInfoLogSize(nvJitLinkHandle handle, size_t* size) {
  return __nvJitLinkGetInfoLogSize_13_0(handle, size);
}
CUCORE_EXPORT nvJitLinkResult nvJitLinkGetInfoLog(nvJitLinkHandle handle, char* log) {
  return __nvJitLinkGetInfoLog_13_0(handle, log);
}
}
