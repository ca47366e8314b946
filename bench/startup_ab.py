#!/usr/bin/env python3
"""Two cucore binaries on the fresh-process cache hit of bench/startup.py, interleaved run by run
(on a shared machine, load drifts within seconds: blocks of runs of one binary then the other
compare the load, not the binaries). Prints the medians of wall time and of the child's CPU time
(user + sys, from wait4) and the ratios B/A.

Usage: bench/startup_ab.py A B [runs]   (A: the baseline, e.g. main's build/release/bin/cucore)
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

a, b = sys.argv[1], sys.argv[2]
assert os.path.realpath(a) != os.path.realpath(b), "A and B must be two binaries"
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 300
SAXPY = ('extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {\n'
         '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
         '  if (i < n) y[i] = a * x[i] + y[i];\n}\n')
with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, "saxpy.cu")
    with open(src, "w") as f:
        f.write(SAXPY)
    env = dict(os.environ, CUCORE_CACHE_DIR=os.path.join(tmp, "cache"))
    out = os.path.join(tmp, "saxpy.cubin")

    def hit(exe):
        return [exe, "compile", src, "--arch", "sm_90", "-o", out]

    # Prime: the first compile misses and fills the cache (and each binary's compiler memo).
    for exe in (a, b):
        subprocess.run(hit(exe) + ["--json"], env=env, check=True, capture_output=True, text=True)
    for exe in (a, b):
        r = subprocess.run(hit(exe) + ["--json"], env=env, check=True, capture_output=True, text=True)
        assert '"cache":"hit"' in r.stdout, r.stdout
    devnull = os.open(os.devnull, os.O_WRONLY)

    def timed(cmd):
        # A fresh output file each run, as bench/startup.py does (ext4 writeback on overwrite).
        if os.path.exists(out):
            os.unlink(out)
        t0 = time.perf_counter()
        pid = os.posix_spawn(cmd[0], cmd, env, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
        _, status, ru = os.wait4(pid, 0)
        t = time.perf_counter() - t0
        assert status == 0
        return t, ru.ru_utime + ru.ru_stime

    res = {a: ([], []), b: ([], [])}
    for i in range(runs):  # ABBA...: neither binary always runs first
        for exe in ((a, b) if i % 2 == 0 else (b, a)):
            w, c = timed(hit(exe))
            res[exe][0].append(w)
            res[exe][1].append(c)
    wa, ca = (statistics.median(x) * 1e3 for x in res[a])
    wb, cb = (statistics.median(x) * 1e3 for x in res[b])
    print(f"A {a}: wall {wa:.3f} ms  cpu {ca:.3f} ms")
    print(f"B {b}: wall {wb:.3f} ms  cpu {cb:.3f} ms")
    print(f"B/A: wall {wb/wa:.3f}  cpu {cb/ca:.3f}")
