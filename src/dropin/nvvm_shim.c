/* libnvvm.so.4 of `cucore run`: the thin front (shim.h) of the libNVVM drop-in (nvvm.cpp). */

#define CUCORE_ENGINE_FILE "libcucore_dropin_nvvm.so"
#define CUCORE_SHIM_LIBRARY "libNVVM"
#include "shim.h"

#include <stdbool.h>
#include <stddef.h>

typedef int nvvmResult;
typedef struct _nvvmProgram* nvvmProgram;
#define FAIL 5 /* NVVM_ERROR_INVALID_PROGRAM */

CUCORE_SHIM(const char*, "NVVM_ERROR_INVALID_PROGRAM", nvvmGetErrorString, (nvvmResult r), (r))
CUCORE_SHIM(nvvmResult, FAIL, nvvmVersion, (int* major, int* minor), (major, minor))
CUCORE_SHIM(nvvmResult, FAIL, nvvmIRVersion, (int* a, int* b, int* c, int* d), (a, b, c, d))
CUCORE_SHIM(nvvmResult, FAIL, nvvmCreateProgram, (nvvmProgram * prog), (prog))
CUCORE_SHIM(nvvmResult, FAIL, nvvmDestroyProgram, (nvvmProgram * prog), (prog))
CUCORE_SHIM(nvvmResult, FAIL, nvvmAddModuleToProgram,
            (nvvmProgram prog, const char* buffer, size_t size, const char* name),
            (prog, buffer, size, name))
CUCORE_SHIM(nvvmResult, FAIL, nvvmLazyAddModuleToProgram,
            (nvvmProgram prog, const char* buffer, size_t size, const char* name),
            (prog, buffer, size, name))
CUCORE_SHIM(nvvmResult, FAIL, nvvmCompileProgram, (nvvmProgram prog, int n, const char** options),
            (prog, n, options))
CUCORE_SHIM(nvvmResult, FAIL, nvvmVerifyProgram, (nvvmProgram prog, int n, const char** options),
            (prog, n, options))
CUCORE_SHIM(nvvmResult, FAIL, nvvmGetCompiledResultSize, (nvvmProgram prog, size_t* size),
            (prog, size))
CUCORE_SHIM(nvvmResult, FAIL, nvvmGetCompiledResult, (nvvmProgram prog, char* out), (prog, out))
CUCORE_SHIM(nvvmResult, FAIL, nvvmGetProgramLogSize, (nvvmProgram prog, size_t* size), (prog, size))
CUCORE_SHIM(nvvmResult, FAIL, nvvmGetProgramLog, (nvvmProgram prog, char* out), (prog, out))
CUCORE_SHIM(nvvmResult, FAIL, nvvmDisableConcurrentAPI, (void), ())
CUCORE_SHIM(void*, NULL, __nvvmHandle, (int id), (id))
CUCORE_SHIM(void*, NULL, __nvvmHandleTarget, (int id, bool flag), (id, flag))
