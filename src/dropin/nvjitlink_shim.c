/* libnvJitLink.so.13 of `cucore run`: the thin front (shim.h) of the nvJitLink drop-in, exporting
 * the API that scripts/gen-dropin-api.py generated (generated/nvjitlink13.inc,
 * generated/nvjitlink13.map). */

#define CUCORE_ENGINE_FILE "libcucore_dropin_nvjitlink.so"
#define CUCORE_SHIM_LIBRARY "nvJitLink"
#include "shim.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int nvJitLinkResult;
#define FAIL 6 /* NVJITLINK_ERROR_INTERNAL, also for a function the real library lacks */

#include "generated/nvjitlink13.inc"
