"""20 different kernels compiled through cuda.core with no cache= argument, as a program that knows
nothing of cucore compiles them: 15 small ones and 5 that include libcu++ headers. Prints the time
spent in Program() + compile(), summed (bench/run_cuda_core_bench.py runs it under `cucore run`).
"""

import os
import time

from cuda.core import Program, ProgramOptions

CCCL = next((d for d in ("/usr/local/cuda/include/cccl", "/usr/local/cuda/include")
             if os.path.isdir(os.path.join(d, "cuda", "std"))), None)


def kernels():
    for i in range(15):
        yield (f'extern "C" __global__ void k{i}(float* p, float a, int n) {{'
               f" int t = blockIdx.x * blockDim.x + threadIdx.x;"
               f" if (t < n) p[t] = p[t] * a + {i}.0f; }}"), []
    headers = ["<cuda/std/complex>", "<cuda/std/array>", "<cuda/std/tuple>", "<cuda/std/span>",
               "<cuda/std/limits>"]
    for i, header in enumerate(headers):
        yield (f"#include {header}\n"
               f'extern "C" __global__ void h{i}(int* p) {{'
               f" p[threadIdx.x] = cuda::std::numeric_limits<int>::max() - {i}; }}"), [CCCL]


def main():
    total = 0.0
    for code, include in kernels():
        start = time.perf_counter()
        options = ProgramOptions(arch="sm_90", std="c++17",
                                 include_path=[d for d in include if d])
        program = Program(code, "c++", options)
        program.compile("cubin")
        spent = time.perf_counter() - start
        total += spent
        if os.environ.get("CUCORE_BENCH_EACH"):
            print(f"  {spent * 1000:8.1f} ms  {code[:40]!r}")
        program.close()
    print(f"compile seconds: {total:.6f}")


if __name__ == "__main__":
    main()
