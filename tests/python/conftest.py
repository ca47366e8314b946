"""Shared fixtures of the Python tests.

They run against whichever `cucore` is importable: the build tree (ctest sets PYTHONPATH to
build/<preset>/python) or the installed wheel (.ci/run). Compiles are real NVRTC compiles, which
need no GPU; nothing here needs one.
"""

from __future__ import annotations

import multiprocessing
import threading

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


def fresh_cache(module, kind, tmp_path, sqlite_name="cache.db"):
    """A fresh cache of `kind` ("memory", "directory", "sqlite") from `module` (cucore, or its
    cuda.core-compatible classes)."""
    if kind == "memory":
        return module.InMemoryProgramCache()
    if kind == "directory":
        return module.FileStreamProgramCache(tmp_path / "dir", fsync=False)
    return module.SQLiteProgramCache(tmp_path / sqlite_name)


@pytest.fixture(params=["memory", "directory", "sqlite"])
def native_cache(request, tmp_path):
    """Each of cucore's native caches, fresh."""
    with fresh_cache(cucore, request.param, tmp_path) as cache:
        yield cache


def run_in_threads(work, count):
    """work(i) for i in range(count), each in a thread of its own; the exceptions they raised."""
    errors = []

    def guarded(i):
        try:
            work(i)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def run_processes(target, args_list, timeout=120):
    """target(*args) for each args of args_list, each in a spawned process; their exit codes."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=target, args=args) for args in args_list]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    return [p.exitcode for p in procs]
