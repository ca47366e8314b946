"""An unmodified CuPy (cupy-cuda13x) program's NVRTC compile through CuPy's own NVRTC binding
(cupy_backends.cuda.libs.nvrtc, which finds NVRTC with cuda.pathfinder; RawKernel would need a GPU
to choose the arch). Prints the PTX's SHA-256; tests/dropin/run_python_twice.sh runs it under
`cucore run` twice.
"""

import hashlib

from cupy_backends.cuda.libs import nvrtc

SOURCE = 'extern "C" __global__ void add_one(float* p) { p[threadIdx.x] += 1.0f; }\n'

prog = nvrtc.createProgram(SOURCE, "cupy_kernel.cu", [], [])
nvrtc.compileProgram(prog, ["-arch=compute_90"])
ptx = nvrtc.getPTX(prog)
nvrtc.destroyProgram(prog)
print("ptx sha256", hashlib.sha256(ptx if isinstance(ptx, bytes) else ptx.encode()).hexdigest())
