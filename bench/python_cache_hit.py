#!/usr/bin/env python3
"""From Python: a cucore cache hit against cuda.core's own cache hit, same machine, one run.

Usage: .venv/bin/python bench/python_cache_hit.py [--repeat N]
(after scripts/check-python.sh or `pip install .`: it measures the installed, Release build).

Three levels, each as the median of several timed loops:
  lookup   cache[key] with a ready key (cuda.core's protocol: bytes out);
  native   cucore's own cache[key] (an ObjectCode handle, no copy of the code);
  compile  Program.compile(..., cache=...) on a hit: key derivation plus lookup, as users call it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import timeit

from cuda.core import Program as CCProgram
from cuda.core import ProgramOptions as CCOptions
from cuda.core import utils as cc_utils

import cucore
from cucore import cuda_core as cc

SRC = r"""
template <class T> __global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void saxpy_f(float a, const float* x, float* y, int n) { saxpy(a, x, y, n); }
"""
ARCH = "sm_80"


def per_call_us(fn, number, repeat):
    times = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(times) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    r = args.repeat
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        key = cc_utils.make_program_cache_key(code=SRC, code_type="c++", options=CCOptions(arch=ARCH),
                                             target_type="cubin")
        cubin = CCProgram(SRC, "c++", CCOptions(arch=ARCH)).compile("cubin")
        pairs = [
            ("in-memory", cc_utils.InMemoryProgramCache(), cc.InMemoryProgramCache()),
            ("directory", cc_utils.FileStreamProgramCache(f"{tmp}/cc"), cc.FileStreamProgramCache(f"{tmp}/cucore")),
        ]
        for label, theirs, ours in pairs:
            theirs[key] = cubin
            ours[key] = cubin
            assert theirs[key] == ours[key] == bytes(cubin.code)
            n = 20000 if label == "in-memory" else 2000
            t_theirs = per_call_us(lambda: theirs[key], n, r)
            t_ours = per_call_us(lambda: ours[key], n, r)
            t_native = per_call_us(lambda: ours.native[key], n, r)
            rows.append((f"{label} lookup, cache[key] -> bytes", t_theirs, t_ours))
            rows.append((f"{label} lookup, cucore native -> ObjectCode", t_theirs, t_native))

            # Program.compile(cache=...) hits, as users call it: cuda.core with its own cache vs
            # cucore's Program with the same kind of cache.
            cc_prog = CCProgram(SRC, "c++", CCOptions(arch=ARCH))
            cc_prog.compile("cubin", cache=theirs)
            native = ours.native
            prog = cucore.Program(SRC, "c++", cucore.ProgramOptions(arch=ARCH))
            prog.compile("cubin", cache=native)
            assert prog.compile("cubin", cache=native).code == bytes(cubin.code)
            assert prog.last_cache_outcome == "hit"
            n = 2000 if label == "in-memory" else 1000
            t_cc = per_call_us(lambda: cc_prog.compile("cubin", cache=theirs), n, r)
            t_cu = per_call_us(lambda: prog.compile("cubin", cache=native), n, r)
            rows.append((f"{label} Program.compile hit", t_cc, t_cu))

    print(f"cuda.core {__import__('cuda.core').core.__version__}, cucore {cucore.__version__}; "
          f"median of {r} loops, microseconds per call")
    print(f"{'operation':46} {'cuda.core':>10} {'cucore':>10} {'speed-up':>9}")
    for name, theirs, ours in rows:
        print(f"{name:46} {theirs:10.2f} {ours:10.2f} {theirs / ours:8.1f}x")


if __name__ == "__main__":
    main()
