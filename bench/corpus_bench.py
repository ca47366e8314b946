#!/usr/bin/env python3
"""The corpus kernels (tests/data/corpus: CUTLASS/CuTe, CuPy, CCCL) through `cucore compile`, each in
a fresh process: uncached (--cache none); a miss in a warm cache (a cache that has compiled the
kernel before, so its header digest and compiler version memos know the files: the miss of an edited
kernel, here a new -D each run); a miss in an empty cache (a fresh directory each run: every header
read and hashed, NVRTC's version probed); and a hit, against `cucore --version` (process start
only). Runs alternate between the kinds; medians.

Usage: bench/corpus_bench.py [path/to/cucore] [cold_runs] [hit_runs] [kernel ...]
Needs the header corpus (scripts/fetch-corpus.sh). Prints one row per kernel with the ratios the
issue's goals are stated in: miss / uncached (goal <= 1.05) and hit / --version (goal <= 3 for
the CuTe kernel).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
cucore = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build/release/bin/cucore")
cold_runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
hit_runs = int(sys.argv[3]) if len(sys.argv) > 3 else 40
only = set(sys.argv[4:])
corpus = os.environ.get("CUCORE_CORPUS_DIR", os.path.join(root, ".cache/corpus"))
spec_dir = os.path.join(root, "tests/data/corpus")
spec = json.load(open(os.path.join(spec_dir, "corpus.json")))


def cuda_root():
    out = subprocess.run([cucore, "info", "--json"], capture_output=True, text=True)
    try:
        for d in json.loads(out.stdout).get("include_directories", []):
            if d.endswith("/include"):
                return d[: -len("/include")]
    except json.JSONDecodeError:
        pass
    return "/usr/local/cuda"


placeholders = {"${CUTLASS}": os.path.join(corpus, "cutlass/include"),
                "${CUPY}": os.path.join(corpus, "cupy"), "${CUDA}": cuda_root()}


def sub(text):
    for k, v in placeholders.items():
        text = text.replace(k, v)
    return text


def flags_of(kernel):
    o = kernel["options"]
    flags = ["--arch", kernel["arch"], "--target", kernel["target"]]
    for d in o.get("include_path", []):
        flags += ["-I", sub(d)]
    if not o.get("toolkit_include_path", True):
        flags.append("--no-toolkit-include")
    if "std" in o:
        flags += ["--std", o["std"]]
    if o.get("device_as_default_execution_space"):
        flags.append("--default-device")
    if o.get("ftz"):
        flags += ["--ftz", "true"]
    for d in o.get("define_macro", []):
        flags += ["-D", d]
    for e in kernel.get("name_expressions", []):
        flags += ["--name-expression", e]
    return flags


def timed(cmd, env):
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stdout}{done.stderr}")
    return elapsed, done.stdout


rows = []
with tempfile.TemporaryDirectory() as tmp:
    for kernel in spec["kernels"]:
        if only and kernel["name"] not in only:
            continue
        src = os.path.join(spec_dir, kernel["file"])
        out = os.path.join(tmp, kernel["name"] + ".bin")
        base = [cucore, "compile", src, "-o", out] + flags_of(kernel)
        env = dict(os.environ)
        hit_cache = os.path.join(tmp, kernel["name"] + "-hit")
        cold, miss, empty, hit, version = [], [], [], [], []
        timed(base + ["--cache", hit_cache], env)  # fills the warm cache and its memos
        for r in range(cold_runs):
            t, _ = timed(base + ["--cache", "none"], env)
            cold.append(t)
            t, said = timed(base + ["--cache", hit_cache, "--json", "-D",
                                    f"CUCORE_BENCH_RUN={r}"], env)
            assert '"cache":"miss"' in said.replace(" ", ""), said
            miss.append(t)
            fresh = os.path.join(tmp, f"{kernel['name']}-miss-{r}")
            t, said = timed(base + ["--cache", fresh, "--json"], env)
            assert '"cache":"miss"' in said.replace(" ", ""), said
            empty.append(t)
        _, said = timed(base + ["--cache", hit_cache, "--json"], env)
        said = json.loads(said)
        assert said["cache"] == "hit", said
        for _ in range(hit_runs):
            version.append(timed([cucore, "--version"], env)[0])
            hit.append(timed(base + ["--cache", hit_cache], env)[0])
        rows.append((kernel["name"], statistics.median(cold), statistics.median(miss),
                     statistics.median(empty), statistics.median(hit),
                     statistics.median(version), said.get("headers", {})))

print(f"{'kernel':22} {'uncached s':>10} {'miss s':>7} {'miss/unc':>8} {'empty s':>7} "
      f"{'empty/unc':>9} {'hit ms':>7} {'--version ms':>12} {'hit/ver':>7} {'headers':>8}")
for name, cold, miss, empty, hit, version, headers in rows:
    print(f"{name:22} {cold:10.3f} {miss:7.3f} {miss / cold:8.3f} {empty:7.3f} "
          f"{empty / cold:9.3f} {hit * 1e3:7.2f} {version * 1e3:12.2f} {hit / version:7.2f} "
          f"{headers.get('tracked', 0):8}")
