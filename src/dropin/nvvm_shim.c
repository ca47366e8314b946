/* libnvvm.so.4 of `cucore run`: the thin front (shim.h) of the libNVVM drop-in, exporting the API
 * that scripts/gen-dropin-api.py generated (generated/nvvm.inc, generated/nvvm.map). */

#define CUCORE_ENGINE_FILE "libcucore_dropin_nvvm.so"
#define CUCORE_SHIM_LIBRARY "libNVVM"
#include "shim.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int nvvmResult;
#define FAIL 5 /* NVVM_ERROR_INVALID_PROGRAM, also for a function the real library lacks */

#include "generated/nvvm.inc"
