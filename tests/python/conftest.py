"""Shared fixtures of the Python tests.

They run against whichever `cucore` is importable: the build tree (ctest sets PYTHONPATH to
build/<preset>/python) or the installed wheel (.ci/run). Compiles are real NVRTC compiles, which
need no GPU; nothing here needs one.
"""

from __future__ import annotations

import pytest

import cucore

ARCH = "sm_80"

KERNEL = r"""
template <class T>
__global__ void scale(T* x, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
extern "C" __global__ void add_one(float* x) { x[threadIdx.x] += 1.0f; }
"""


def pytest_report_header(config):
    return f"cucore from {cucore.__file__}"


@pytest.fixture
def options():
    return cucore.ProgramOptions(arch=ARCH, std="c++17")


@pytest.fixture(params=["memory", "directory", "sqlite"])
def native_cache(request, tmp_path):
    """Each of cucore's native caches, fresh."""
    if request.param == "memory":
        cache = cucore.InMemoryProgramCache()
    elif request.param == "directory":
        cache = cucore.FileStreamProgramCache(tmp_path / "dir", fsync=False)
    else:
        cache = cucore.SQLiteProgramCache(tmp_path / "cache.db")
    with cache:
        yield cache
