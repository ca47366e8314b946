"""An unmodified numba-cuda program: cuda.compile_ptx (numba-cuda reaches libNVVM through
cuda.bindings and cuda.pathfinder). Prints the PTX's SHA-256; tests/dropin/run_numba.sh runs it
under `cucore run` twice (the second compile is a hit, the PTX the same).
"""

import hashlib

from numba import cuda, float32


def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]


ptx, _ = cuda.compile_ptx(axpy, (float32[:], float32, float32[:], float32[:]), cc=(9, 0))
print("ptx sha256", hashlib.sha256(ptx.encode()).hexdigest())
