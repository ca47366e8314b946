/* libnvrtc.so.13 of `cucore run`: the thin front (shim.h) of the NVRTC drop-in (nvrtc.cpp). */

#define CUCORE_ENGINE_FILE "libcucore_dropin_nvrtc.so"
#define CUCORE_SHIM_LIBRARY "NVRTC"
#include "shim.h"

#include <stddef.h>
#include <stdint.h>

typedef int nvrtcResult;
typedef struct _nvrtcProgram* nvrtcProgram;
#define FAIL 11 /* NVRTC_ERROR_INTERNAL_ERROR */

CUCORE_SHIM(const char*, "NVRTC_ERROR_INTERNAL_ERROR", nvrtcGetErrorString, (nvrtcResult r), (r))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcVersion, (int* major, int* minor), (major, minor))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetNumSupportedArchs, (int* n), (n))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetSupportedArchs, (int* archs), (archs))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcCreateProgram,
            (nvrtcProgram * prog, const char* src, const char* name, int num_headers,
             const char* const* headers, const char* const* include_names),
            (prog, src, name, num_headers, headers, include_names))
CUCORE_SHIM(nvrtcResult, FAIL, __nvrtcCPEx,
            (nvrtcProgram * prog, const char* src, const char* name, int num_headers,
             const char* const* headers, const char* const* include_names, uintptr_t a, uintptr_t b,
             uintptr_t c),
            (prog, src, name, num_headers, headers, include_names, a, b, c))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcDestroyProgram, (nvrtcProgram * prog), (prog))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcCompileProgram,
            (nvrtcProgram prog, int num_options, const char* const* options),
            (prog, num_options, options))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetPTXSize, (nvrtcProgram prog, size_t* size), (prog, size))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetPTX, (nvrtcProgram prog, char* out), (prog, out))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetCUBINSize, (nvrtcProgram prog, size_t* size), (prog, size))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetCUBIN, (nvrtcProgram prog, char* out), (prog, out))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetLTOIRSize, (nvrtcProgram prog, size_t* size), (prog, size))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetLTOIR, (nvrtcProgram prog, char* out), (prog, out))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetOptiXIRSize, (nvrtcProgram prog, size_t* size), (prog, size))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetOptiXIR, (nvrtcProgram prog, char* out), (prog, out))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetProgramLogSize, (nvrtcProgram prog, size_t* size),
            (prog, size))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetProgramLog, (nvrtcProgram prog, char* out), (prog, out))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcAddNameExpression,
            (nvrtcProgram prog, const char* const expression), (prog, expression))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetLoweredName,
            (nvrtcProgram prog, const char* const expression, const char** lowered),
            (prog, expression, lowered))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetPCHHeapSize, (size_t * size), (size))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcSetPCHHeapSize, (size_t size), (size))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetPCHCreateStatus, (nvrtcProgram prog), (prog))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcGetPCHHeapSizeRequired, (nvrtcProgram prog, size_t* size),
            (prog, size))
CUCORE_SHIM(nvrtcResult, FAIL, nvrtcSetFlowCallback,
            (nvrtcProgram prog, int (*callback)(void*, void*), void* payload),
            (prog, callback, payload))
