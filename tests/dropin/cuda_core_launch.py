"""An unmodified cuda.core program that compiles a kernel (no cache= argument), launches it and
checks the result on the host. tests/dropin/run_gpu_cuda_core.sh runs it twice under `cucore run`:
the second run's compile is a cache hit, and its kernel must compute the same.

Exit status: 0 when the results are right, 1 when not, 77 without a GPU (ctest: skipped).
"""

import ctypes
import sys

import numpy as np

CODE = r"""
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


def host_array(buffer, n):
    return np.ctypeslib.as_array((ctypes.c_float * n).from_address(int(buffer.handle)))


def main() -> int:
    try:
        from cuda.core import (Device, LaunchConfig, LegacyPinnedMemoryResource, Program,
                               ProgramOptions, launch)
        device = Device()
        device.set_current()
    except Exception as e:  # no driver, no GPU
        print(f"no GPU: {e}")
        return 77
    major, minor = device.compute_capability
    program = Program(CODE, "c++", ProgramOptions(arch=f"sm_{major}{minor}", std="c++17"))
    module = program.compile("cubin", name_expressions=["saxpy<float>"])
    kernel = module.get_kernel("saxpy<float>")

    n = 1 << 16
    stream = device.create_stream()
    pinned = LegacyPinnedMemoryResource()
    x_host, y_host = pinned.allocate(n * 4), pinned.allocate(n * 4)
    x, y = host_array(x_host, n), host_array(y_host, n)
    x[:] = np.arange(n, dtype=np.float32)
    y[:] = 1.0
    x_dev, y_dev = device.allocate(n * 4, stream=stream), device.allocate(n * 4, stream=stream)
    x_dev.copy_from(x_host, stream=stream)
    y_dev.copy_from(y_host, stream=stream)
    launch(stream, LaunchConfig(grid=(n + 255) // 256, block=256), kernel, np.float32(2.0), x_dev,
           y_dev, np.int32(n))
    y_dev.copy_to(y_host, stream=stream)
    stream.sync()
    expected = 2.0 * np.arange(n, dtype=np.float32) + 1.0
    if not np.array_equal(y, expected):
        bad = int(np.argmax(y != expected))
        print(f"wrong result at {bad}: {y[bad]} != {expected[bad]}")
        return 1
    print(f"ok: saxpy<float> over {n} elements")
    return 0


if __name__ == "__main__":
    sys.exit(main())
