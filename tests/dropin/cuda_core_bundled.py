"""cuda.core with ProgramOptions(use_bundled_headers=True), which passes NVRTC 13.3+'s
--use-bundled-headers=DIR (tests/dropin/run_tile_bundled.sh): compiles a kernel that includes
<cuda/std/complex> from the headers NVRTC installs into DIR, and prints the cubin's digest (not PTX: cuda.core asks the driver whether it can load PTX)."""
import hashlib

from cuda.core import Program, ProgramOptions

source = r"""
#include <cuda/std/complex>
extern "C" __global__ void square_imag(float* out, const float* in) {
  cuda::std::complex<float> c(in[0], 2.0f);
  out[threadIdx.x] = (c * c).imag();
}
"""
options = ProgramOptions(arch="sm_90", use_bundled_headers=True)
cubin = Program(source, "c++", options).compile("cubin").code
print("cubin", len(cubin), hashlib.sha256(cubin).hexdigest()[:16])
