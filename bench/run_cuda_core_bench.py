"""`cucore run` on an unmodified cuda.core program: 20 kernels, no cache= argument (docs/transparent-cache.md).

Usage: python bench/run_cuda_core_bench.py CUCORE [--rounds N]

Runs the program (bench/run_cuda_core_program.py: it times Program() + compile() of each kernel
itself and prints the total) in fresh processes:
  plain   without cucore run (NVRTC itself)
  miss    under cucore run with an empty cache (every compile misses and is stored)
  hit     under cucore run again (every compile hits)
and the start-up of `python -c pass` with and without cucore run. Prints the medians and the
ratios the issue asks for: hit ≥ 50× less compile time than plain, miss ≤ 3 % over plain, start-up
≤ 5 ms more.
"""

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "run_cuda_core_program.py")


def compile_seconds(command, env):
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("compile seconds: "):
            return float(line.split(": ")[1])
    raise RuntimeError("no timing in the program's output:\n" + out)


def wall_ms(command, env, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def cpu_ms(command, env):
    """CPU time (user + system) of the command and its children: what start-up costs on a
    machine with a core to spare, unlike wall time on a loaded one."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cucore")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    env = dict(os.environ)
    for name in ("CUCORE_LOG", "CUCORE_RUN_CACHE", "CUCORE_REMOTE_CACHE"):
        env.pop(name, None)
    python = [sys.executable, PROGRAM]
    work = tempfile.mkdtemp(prefix="cucore-run-bench-")
    try:
        plain, miss, hit = [], [], []
        for _ in range(args.rounds):
            cache = os.path.join(work, "cache")
            shutil.rmtree(cache, ignore_errors=True)
            run = [args.cucore, "run", "--cache", "dir:" + cache, "--"]
            plain.append(compile_seconds(python, env))
            miss.append(compile_seconds(run + python, env))
            hit.append(compile_seconds(run + python, env))
        p, m, h = (statistics.median(x) for x in (plain, miss, hit))
        print(f"20 kernels through cuda.core, Program() + compile(), median of {args.rounds}:")
        print(f"  plain NVRTC            {p * 1000:9.1f} ms")
        print(f"  cucore run, miss       {m * 1000:9.1f} ms  ({(m / p - 1) * 100:+.1f} % over plain)")
        print(f"  cucore run, hit        {h * 1000:9.1f} ms  ({p / h:.0f}x less than plain)")
        startup = [sys.executable, "-c", "pass"]
        cache = os.path.join(work, "cache")
        run = [args.cucore, "run", "--cache", "dir:" + cache, "--"]
        no_preload = [args.cucore, "run", "--no-preload", "--cache", "dir:" + cache, "--"]
        # Interleaved, so that the machine's load falls on all three alike.
        samples = {"plain": [], "run": [], "no-preload": []}
        cpu = {"plain": [], "run": [], "no-preload": []}
        for _ in range(40):
            for name, prefix in (("plain", []), ("run", run), ("no-preload", no_preload)):
                samples[name].append(wall_ms(prefix + startup, env, 1))
                cpu[name].append(cpu_ms(prefix + startup, env))
        print("start-up of `python -c pass`, median of 40 (interleaved), wall and CPU time:")
        base, base_cpu = statistics.median(samples["plain"]), statistics.median(cpu["plain"])
        for label, key in (("plain", "plain"), ("cucore run", "run"),
                           ("cucore run --no-preload", "no-preload")):
            w, c = statistics.median(samples[key]), statistics.median(cpu[key])
            print(f"  {label:24s}{w:7.1f} ms ({w - base:+5.1f})   CPU {c:6.1f} ms ({c - base_cpu:+5.1f})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
