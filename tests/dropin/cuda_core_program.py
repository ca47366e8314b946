"""An unmodified cuda.core program: compiles kernels with Program.compile and no cache= argument.

Prints one line per compile: its label, the SHA-256 of the code and the symbol mapping (name
expressions), so that two runs' outputs can be compared; then the NVRTC file that compiled them. tests/dropin/run_cuda_core.sh runs it
under `cucore run` twice (the second run's compiles are all cache hits) and once without.
"""

import hashlib
import json
import os
import sys

from cuda.core import Program, ProgramOptions

KERNELS = [
    ("saxpy", 'extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {'
              " int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }",
     "cubin", [], {}),
    # PTX is left out: cuda.core asks the driver whether it can load the PTX (no GPU in CI).
    ("fill", 'extern "C" __global__ void fill(int* p, int v) { p[threadIdx.x] = v; }',
     "cubin", [], {"ftz": True}),
    ("templates", "template <typename T> __global__ void scale(T* p, T s) { p[threadIdx.x] *= s; }",
     "cubin", ["scale<float>", "scale<double>"], {}),
    ("lto", 'extern "C" __device__ int add_one(int x) { return x + 1; }', "ltoir", [],
     {"link_time_optimization": True}),
    ("fast math", 'extern "C" __global__ void rs(float* p) { p[0] = rsqrtf(p[0]); }', "cubin", [],
     {"use_fast_math": True, "std": "c++17"}),
]


def main() -> int:
    arch = sys.argv[1] if len(sys.argv) > 1 else "sm_90"
    # The NVRTC this program loads (cuda.pathfinder's choice): under `cucore run`, the drop-in.
    from cuda.pathfinder import load_nvidia_dynamic_lib
    print("nvrtc:", load_nvidia_dynamic_lib("nvrtc").abs_path, flush=True)
    for label, code, target, names, extra in KERNELS:
        options = ProgramOptions(arch=arch, **extra)
        program = Program(code, "c++", options)
        obj = program.compile(target, name_expressions=names) if names else program.compile(target)
        data = bytes(obj.code)
        mapping = {n: obj.symbol_mapping[n] for n in names} if names else {}
        line = {"label": label, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                "symbols": {k: v.decode() if isinstance(v, bytes) else v for k, v in mapping.items()}}
        print(json.dumps(line, sort_keys=True))
        program.close()
    # The NVRTC file that did the compiling: under `cucore run`, the one the drop-in forwarded to.
    print("real nvrtc:", " ".join(real_nvrtc_files()), flush=True)
    return 0


def real_nvrtc_files() -> list[str]:
    """The libnvrtc.so.13 and .so.12 files mapped into this process, but for cucore's drop-ins."""
    files = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)
            path = fields[5].strip() if len(fields) == 6 else ""
            in_dropin_dir = os.path.basename(os.path.dirname(path)) == "cucore-run"
            name = os.path.basename(path)
            if name.startswith(("libnvrtc.so.13", "libnvrtc.so.12")) and not in_dropin_dir:
                files.add(path)
    return sorted(files)


if __name__ == "__main__":
    sys.exit(main())
