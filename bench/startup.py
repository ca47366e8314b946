#!/usr/bin/env python3
"""A fresh process that hits the cache vs a fresh process that only starts (`cucore --version`).

Usage: bench/startup.py [path/to/cucore] [runs] [saxpy|cub]
Both are run alternately, `runs` times each, after one priming compile; prints the medians and the
ratio. `cub`: a CUB block reduction that includes a header of its own beside it and 630 toolkit
headers (include tracking: the hit stats every header and reads none, from the digest memo). The hit must load no compiler library (see docs/cache-keys.md, the compiler version memo), so it should cost little more
than process start-up.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

cucore = sys.argv[1] if len(sys.argv) > 1 else "build/release/bin/cucore"
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 200
kernel = sys.argv[3] if len(sys.argv) > 3 else "saxpy"

SAXPY = ('extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {\n'
         '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
         '  if (i < n) y[i] = a * x[i] + y[i];\n}\n')
CUB = ('#include "tuning.cuh"\n#include <cub/block/block_reduce.cuh>\n'
       'extern "C" __global__ void block_sum(const int* in, int* out) {\n'
       '  using reduce = cub::BlockReduce<int, BLOCK>;\n'
       '  __shared__ typename reduce::TempStorage storage;\n'
       '  int v = reduce(storage).Sum(in[threadIdx.x]);\n'
       '  if (threadIdx.x == 0) *out = v;\n}\n')

with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, kernel + ".cu")
    with open(src, "w") as f:
        f.write(CUB if kernel == "cub" else SAXPY)
    if kernel == "cub":
        with open(os.path.join(tmp, "tuning.cuh"), "w") as f:
            f.write("#pragma once\n#define BLOCK 128\n")
        # Headers changed in the last 2 s are hashed on every key, never memoised: let it settle.
        time.sleep(2.2)
    env = dict(os.environ, CUCORE_CACHE_DIR=os.path.join(tmp, "cache"))
    out = os.path.join(tmp, kernel + ".cubin")
    hit = [cucore, "compile", src, "--arch", "sm_90", "-o", out]
    start = [cucore, "--version"]
    cold = subprocess.run(hit + ["--json"], env=env, check=True, capture_output=True, text=True)
    assert '"cache":"miss"' in cold.stdout, cold.stdout
    check = subprocess.run(hit + ["--json"], env=env, check=True, capture_output=True, text=True)
    assert '"cache":"hit"' in check.stdout, check.stdout
    if kernel == "cub":
        assert '"stat_fast_path":true' in check.stdout, check.stdout

    def timed(cmd):
        # A fresh output file each run: overwriting an existing file on ext4 forces its writeback
        # at close (auto_da_alloc), ~1.5 ms that any tool writing that file pays, cache or not.
        if os.path.exists(out):
            os.unlink(out)
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t0

    hits, starts = [], []
    for _ in range(runs):
        hits.append(timed(hit))
        starts.append(timed(start))
    h, s = statistics.median(hits), statistics.median(starts)
    print(f"cucore --version (start only)   {s * 1e3:7.2f} ms (median of {runs})")
    print(f"cucore compile, cache hit       {h * 1e3:7.2f} ms (median of {runs})")
    print(f"ratio                           {h / s:7.2f}x")
