/* libnvrtc.so.13 of `cucore run`: the thin front (shim.h) of the NVRTC drop-in, exporting the API
 * that scripts/gen-dropin-api.py generated (generated/nvrtc13.inc, generated/nvrtc13.map). */

#define CUCORE_ENGINE_FILE "libcucore_dropin_nvrtc.so"
#define CUCORE_SHIM_LIBRARY "NVRTC"
#include "shim.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int nvrtcResult;
#define FAIL 11 /* NVRTC_ERROR_INTERNAL_ERROR, also for a function the real library lacks */

#include "generated/nvrtc13.inc"
