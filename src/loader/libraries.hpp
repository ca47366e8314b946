// One loader table per CUDA library: function pointers fetched once per process, plus what the
// search found. Include only from cucore's sources (it pulls in the CUDA headers).
#pragma once

#include <cuda.h>
#include <nvJitLink.h>
#include <nvrtc.h>
#include <nvvm.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>

#include "cucore/toolkit.hpp"
#include "loader/shared_library.hpp"

namespace cucore::detail {

// One loader table entry per X(...).
// clang-format off
#define CUCORE_NVRTC_FUNCTIONS(X) \
  X(nvrtcGetErrorString)          \
  X(nvrtcVersion)                 \
  X(nvrtcCreateProgram)           \
  X(nvrtcDestroyProgram)          \
  X(nvrtcCompileProgram)          \
  X(nvrtcGetPTXSize)              \
  X(nvrtcGetPTX)                  \
  X(nvrtcGetCUBINSize)            \
  X(nvrtcGetCUBIN)                \
  X(nvrtcGetLTOIRSize)            \
  X(nvrtcGetLTOIR)                \
  X(nvrtcGetProgramLogSize)       \
  X(nvrtcGetProgramLog)           \
  X(nvrtcAddNameExpression)       \
  X(nvrtcGetLoweredName)          \
  X(nvrtcGetPCHHeapSize)          \
  X(nvrtcSetPCHHeapSize)          \
  X(nvrtcGetPCHCreateStatus)      \
  X(nvrtcGetPCHHeapSizeRequired)  \
  X(nvrtcGetNumSupportedArchs)    \
  X(nvrtcGetSupportedArchs)

#define CUCORE_NVJITLINK_FUNCTIONS(X) \
  X(nvJitLinkCreate)                  \
  X(nvJitLinkDestroy)                 \
  X(nvJitLinkAddData)                 \
  X(nvJitLinkComplete)                \
  X(nvJitLinkGetLinkedCubinSize)      \
  X(nvJitLinkGetLinkedCubin)          \
  X(nvJitLinkGetLinkedPtxSize)        \
  X(nvJitLinkGetLinkedPtx)            \
  X(nvJitLinkGetErrorLogSize)         \
  X(nvJitLinkGetErrorLog)             \
  X(nvJitLinkGetInfoLogSize)          \
  X(nvJitLinkGetInfoLog)              \
  X(nvJitLinkVersion)

#define CUCORE_NVVM_FUNCTIONS(X) \
  X(nvvmGetErrorString)          \
  X(nvvmVersion)                 \
  X(nvvmIRVersion)               \
  X(nvvmCreateProgram)           \
  X(nvvmDestroyProgram)          \
  X(nvvmAddModuleToProgram)      \
  X(nvvmLazyAddModuleToProgram)  \
  X(nvvmCompileProgram)          \
  X(nvvmVerifyProgram)           \
  X(nvvmGetCompiledResultSize)   \
  X(nvvmGetCompiledResult)       \
  X(nvvmGetProgramLogSize)       \
  X(nvvmGetProgramLog)

// Driver entry points by their un-versioned names; cuGetProcAddress returns the version that
// matches the macros of the cuda.h we were built with (CUDA_VERSION).
#define CUCORE_DRIVER_FUNCTIONS(X)     \
  X(cuInit)                            \
  X(cuDriverGetVersion)                \
  X(cuGetErrorName)                    \
  X(cuGetErrorString)                  \
  X(cuDeviceGetCount)                  \
  X(cuDeviceGet)                       \
  X(cuDeviceGetName)                   \
  X(cuDeviceGetAttribute)              \
  X(cuDeviceTotalMem)                  \
  X(cuDeviceCanAccessPeer)             \
  X(cuCtxEnablePeerAccess)             \
  X(cuCtxGetDevice)                    \
  X(cuCtxGetCurrent)                   \
  X(cuDevicePrimaryCtxRetain)          \
  X(cuDevicePrimaryCtxRelease)         \
  X(cuCtxPushCurrent)                  \
  X(cuCtxPopCurrent)                   \
  X(cuLinkCreate)                      \
  X(cuLinkAddData)                     \
  X(cuLinkComplete)                    \
  X(cuLinkDestroy)                     \
  X(cuCtxSetCurrent)                   \
  X(cuCtxSynchronize)                  \
  X(cuCtxGetStreamPriorityRange)       \
  X(cuMemGetInfo)                      \
  X(cuStreamCreateWithPriority)        \
  X(cuStreamDestroy)                   \
  X(cuStreamSynchronize)               \
  X(cuStreamQuery)                     \
  X(cuStreamWaitEvent)                 \
  X(cuStreamGetPriority)               \
  X(cuStreamGetFlags)                  \
  X(cuEventCreate)                     \
  X(cuEventDestroy)                    \
  X(cuEventRecord)                     \
  X(cuEventSynchronize)                \
  X(cuEventQuery)                      \
  X(cuEventElapsedTime)                \
  X(cuDeviceGetDefaultMemPool)         \
  X(cuMemPoolCreate)                   \
  X(cuMemPoolDestroy)                  \
  X(cuMemPoolSetAttribute)             \
  X(cuMemPoolGetAttribute)             \
  X(cuMemPoolTrimTo)                   \
  X(cuMemPoolSetAccess)                \
  X(cuMemPoolGetAccess)                \
  X(cuMemAllocFromPoolAsync)           \
  X(cuMemFreeAsync)                    \
  X(cuMemcpyAsync)                     \
  X(cuMemcpyPeerAsync)                 \
  X(cuPointerGetAttribute)             \
  X(cuMemsetD8Async)                   \
  X(cuMemsetD16Async)                  \
  X(cuMemsetD32Async)                  \
  X(cuMemHostAlloc)                    \
  X(cuMemFreeHost)                     \
  X(cuLibraryLoadData)                 \
  X(cuLibraryUnload)                   \
  X(cuLibraryGetKernel)                \
  X(cuKernelGetAttribute)              \
  X(cuKernelSetAttribute)              \
  X(cuKernelGetParamInfo)              \
  X(cuKernelGetFunction)               \
  X(cuFuncGetParamInfo)                \
  X(cuLaunchKernelEx)                  \
  X(cuLaunchHostFunc)                  \
  X(cuGraphCreate)                     \
  X(cuGraphDestroy)                    \
  X(cuGraphClone)                      \
  X(cuGraphAddKernelNode)              \
  X(cuGraphAddMemcpyNode)              \
  X(cuGraphAddMemsetNode)              \
  X(cuGraphAddHostNode)                \
  X(cuGraphAddChildGraphNode)          \
  X(cuGraphAddEmptyNode)               \
  X(cuGraphAddEventRecordNode)         \
  X(cuGraphAddEventWaitNode)           \
  X(cuGraphAddMemAllocNode)            \
  X(cuGraphAddMemFreeNode)             \
  X(cuGraphAddNode)                    \
  X(cuGraphDestroyNode)                \
  X(cuGraphNodeGetType)                \
  X(cuGraphGetNodes)                   \
  X(cuGraphGetEdges)                   \
  X(cuGraphNodeGetDependencies)        \
  X(cuGraphNodeGetDependentNodes)      \
  X(cuGraphAddDependencies)            \
  X(cuGraphRemoveDependencies)         \
  X(cuGraphKernelNodeGetParams)        \
  X(cuGraphKernelNodeSetAttribute)     \
  X(cuGraphMemcpyNodeGetParams)        \
  X(cuGraphMemsetNodeGetParams)        \
  X(cuGraphMemAllocNodeGetParams)      \
  X(cuGraphMemFreeNodeGetParams)       \
  X(cuGraphEventRecordNodeGetEvent)    \
  X(cuGraphEventWaitNodeGetEvent)      \
  X(cuGraphChildGraphNodeGetGraph)     \
  X(cuGraphNodeFindInClone)            \
  X(cuGraphConditionalHandleCreate)    \
  X(cuGraphInstantiateWithParams)      \
  X(cuGraphExecDestroy)                \
  X(cuGraphLaunch)                     \
  X(cuGraphUpload)                     \
  X(cuGraphExecUpdate)                 \
  X(cuGraphDebugDotPrint)              \
  X(cuUserObjectCreate)                \
  X(cuUserObjectRelease)               \
  X(cuGraphRetainUserObject)           \
  X(cuGraphReleaseUserObject)          \
  X(cuStreamBeginCapture)              \
  X(cuStreamBeginCaptureToGraph)       \
  X(cuStreamEndCapture)                \
  X(cuStreamGetCaptureInfo)            \
  X(cuStreamUpdateCaptureDependencies) \
  X(cuThreadExchangeStreamCaptureMode)
// clang-format on

#define CUCORE_DECLARE_POINTER(name) decltype(&::name) name = nullptr;

// Entry points of later releases, resolved when the library has them and null otherwise (their
// absence never makes a library unusable). The headers cucore builds with (CUDA 13.0) do not
// declare them: the types are those of CUDA 13.5's nvrtc.h, nvJitLink.h and nvvm.h.
struct nvrtc_bundled_headers_info {  // nvrtcBundledHeadersInfo (NVRTC 13.3+)
  int available;
  std::size_t compressed_size;
  std::size_t uncompressed_size;
  int cuda_version_major;
  int cuda_version_minor;
  unsigned num_files;
};
using nvrtc_install_bundled_headers_fn = nvrtcResult (*)(const char* install_path, unsigned flags,
                                                         const char** error_log);
using nvrtc_get_bundled_headers_info_fn = nvrtcResult (*)(nvrtc_bundled_headers_info* info,
                                                          const char** error_log);
using nvjitlink_get_linked_ltoir_size_fn = nvJitLinkResult (*)(nvJitLinkHandle, std::size_t*);
using nvjitlink_get_linked_ltoir_fn = nvJitLinkResult (*)(nvJitLinkHandle, void*);
using nvvm_llvm_version_fn = nvvmResult (*)(const char* arch, int* major);

struct nvrtc_api {
  CUCORE_NVRTC_FUNCTIONS(CUCORE_DECLARE_POINTER)
  nvrtc_install_bundled_headers_fn nvrtcInstallBundledHeaders = nullptr;   // 13.3+
  nvrtc_get_bundled_headers_info_fn nvrtcGetBundledHeadersInfo = nullptr;  // 13.3+
  // NVRTC 13.1+ (Tile code; declared here, since the nvrtc.h cucore builds with may predate them):
  // null where the loaded NVRTC lacks them.
  nvrtcResult (*nvrtcGetTileIRSize)(nvrtcProgram, std::size_t*) = nullptr;
  nvrtcResult (*nvrtcGetTileIR)(nvrtcProgram, char*) = nullptr;
  std::optional<shared_library> library;  // always engaged once the table is built
  // NVRTC's builtins library (libnvrtc-builtins.so.MAJOR.MINOR beside it), opened by path right
  // after NVRTC: NVRTC dlopens it by soname through its $ORIGIN rpath, which a dlopen interceptor
  // (ASan's, TSan's) hides, so that a NVRTC outside the loader's search could not compile under
  // one; opened first, NVRTC's dlopen finds it loaded. Empty where there is no such file.
  std::optional<shared_library> builtins;
  version nvrtc_version;
};

struct nvjitlink_api {
  CUCORE_NVJITLINK_FUNCTIONS(CUCORE_DECLARE_POINTER)
  nvjitlink_get_linked_ltoir_size_fn nvJitLinkGetLinkedLTOIRSize = nullptr;  // 13.3+
  nvjitlink_get_linked_ltoir_fn nvJitLinkGetLinkedLTOIR = nullptr;           // 13.3+
  std::optional<shared_library> library;  // always engaged once the table is built
  version nvjitlink_version;
};

struct nvvm_api {
  CUCORE_NVVM_FUNCTIONS(CUCORE_DECLARE_POINTER)
  nvvm_llvm_version_fn nvvmLLVMVersion = nullptr;  // libNVVM 13.1+
  std::optional<shared_library> library;           // always engaged once the table is built
  toolkit::nvvm_version_info versions;
};

struct driver_api {
  CUCORE_DRIVER_FUNCTIONS(CUCORE_DECLARE_POINTER)
  std::optional<shared_library> library;              // always engaged once the table is built
  int driver_version = 0;                             // 13000 → 13.0
  CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;  // cuInit(0), called once
};

#undef CUCORE_DECLARE_POINTER

// A library's table (null when it is unusable) and the search report. Built once per process on
// first use, thread-safe, never destroyed (so nothing is unloaded while another static destructor
// might still call into it).
template <class Api>
struct library_table {
  std::unique_ptr<Api> api;
  toolkit::library_status status;
};

// What each library is searched as (sonames, sub-directories of the CUDA roots).
const library_spec& library_spec_of(toolkit::library lib);

const library_table<nvrtc_api>& nvrtc_table();
const library_table<nvjitlink_api>& nvjitlink_table();
const library_table<nvvm_api>& nvvm_table();
const library_table<driver_api>& driver_table();
// The table when this process has already loaded (or tried to load) the library, else null;
// never loads it.
const library_table<nvrtc_api>* nvrtc_table_if_loaded() noexcept;
const library_table<nvjitlink_api>* nvjitlink_table_if_loaded() noexcept;
const library_table<nvvm_api>* nvvm_table_if_loaded() noexcept;

// The table, or library_not_found naming `feature` (what the caller was doing).
const nvrtc_api& nvrtc(std::string_view feature);
const nvjitlink_api& nvjitlink(std::string_view feature);
const nvvm_api& nvvm(std::string_view feature);
// The driver with cuInit done; throws library_not_found without a driver and cuda_error when
// cuInit failed (no GPU).
const driver_api& driver(std::string_view feature);

// Throws cuda_error when `result` is not CUDA_SUCCESS, naming `call`; a non-empty `detail` replaces
// the driver's generic description of the result (for errors whose cause cucore knows better).
void check_driver(CUresult result, const char* call, std::string_view detail = {});

}  // namespace cucore::detail
