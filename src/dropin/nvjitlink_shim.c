/* libnvJitLink.so.13 of `cucore run`: the thin front (shim.h) of the nvJitLink drop-in
 * (nvjitlink.cpp, nvjitlink_names.cpp). */

#define CUCORE_ENGINE_FILE "libcucore_dropin_nvjitlink.so"
#define CUCORE_SHIM_LIBRARY "nvJitLink"
#include "shim.h"

#include <stddef.h>
#include <stdint.h>

typedef int nvJitLinkResult;
typedef int nvJitLinkInputType;
typedef struct nvJitLink* nvJitLinkHandle;
#define FAIL 6 /* NVJITLINK_ERROR_INTERNAL */

#define CUCORE_SHIM_BOTH(suffix, params, args)                                 \
  CUCORE_SHIM(nvJitLinkResult, FAIL, __nvJitLink##suffix##_13_0, params, args) \
  CUCORE_SHIM(nvJitLinkResult, FAIL, nvJitLink##suffix, params, args)

CUCORE_SHIM(nvJitLinkResult, FAIL, __nvJitLinkCreate_13_0,
            (nvJitLinkHandle * handle, uint32_t n, const char* const* options),
            (handle, n, options))
CUCORE_SHIM(nvJitLinkResult, FAIL, nvJitLinkCreate,
            (nvJitLinkHandle * handle, uint32_t n, const char** options), (handle, n, options))
CUCORE_SHIM_BOTH(Destroy, (nvJitLinkHandle * handle), (handle))
CUCORE_SHIM_BOTH(AddData,
                 (nvJitLinkHandle handle, nvJitLinkInputType type, const void* data, size_t size,
                  const char* name),
                 (handle, type, data, size, name))
CUCORE_SHIM_BOTH(AddFile, (nvJitLinkHandle handle, nvJitLinkInputType type, const char* file),
                 (handle, type, file))
CUCORE_SHIM_BOTH(Complete, (nvJitLinkHandle handle), (handle))
CUCORE_SHIM_BOTH(GetLinkedCubinSize, (nvJitLinkHandle handle, size_t* size), (handle, size))
CUCORE_SHIM_BOTH(GetLinkedCubin, (nvJitLinkHandle handle, void* out), (handle, out))
CUCORE_SHIM_BOTH(GetLinkedPtxSize, (nvJitLinkHandle handle, size_t* size), (handle, size))
CUCORE_SHIM_BOTH(GetLinkedPtx, (nvJitLinkHandle handle, char* out), (handle, out))
CUCORE_SHIM_BOTH(GetErrorLogSize, (nvJitLinkHandle handle, size_t* size), (handle, size))
CUCORE_SHIM_BOTH(GetErrorLog, (nvJitLinkHandle handle, char* out), (handle, out))
CUCORE_SHIM_BOTH(GetInfoLogSize, (nvJitLinkHandle handle, size_t* size), (handle, size))
CUCORE_SHIM_BOTH(GetInfoLog, (nvJitLinkHandle handle, char* out), (handle, out))
CUCORE_SHIM(nvJitLinkResult, FAIL, nvJitLinkVersion, (unsigned int* major, unsigned int* minor),
            (major, minor))
CUCORE_SHIM(void*, NULL, __nvJitLinkAPI, (int magic), (magic))
