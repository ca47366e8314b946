#!/usr/bin/env python3
"""Runs the cache benchmarks once and prints each figure beside its floor, measured in the same run.

Usage: bench/run.py [path/to/cache_bench] [extra google-benchmark flags...]
Build first: cmake --preset release && cmake --build --preset release --target cache_bench
"""
import json
import subprocess
import sys

binary = sys.argv[1] if len(sys.argv) > 1 else "build/release/bin/cache_bench"
extra = sys.argv[2:]
out = subprocess.run([binary, "--benchmark_format=json", "--benchmark_min_time=0.5", *extra],
                     check=True, capture_output=True, text=True).stdout
results = {b["name"]: b for b in json.loads(out)["benchmarks"]}


def ns(name):
    b = results[name]
    scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b["time_unit"]]
    return b["real_time"] * scale


def human(t):
    for unit, div in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if t >= div:
            return f"{t / div:.3g} {unit}"
    return f"{t:.3g} ns"


rows = [
    ("key derivation, 1 KiB source", "BM_KeyDerivation/1024", "SHA-256 of the source", "BM_Sha256Floor/1024", "ratio"),
    ("key derivation, 4 KiB source", "BM_KeyDerivation/4096", "SHA-256 of the source", "BM_Sha256Floor/4096", "ratio"),
    ("key derivation, 16 KiB source", "BM_KeyDerivation/16384", "SHA-256 of the source", "BM_Sha256Floor/16384", "ratio"),
    ("key derivation, 64 KiB source", "BM_KeyDerivation/65536", "SHA-256 of the source", "BM_Sha256Floor/65536", "ratio"),
    ("key derivation, 1 KiB code with an #include", "BM_KeyDerivationIncluding/1024", "SHA-256 of the source", "BM_Sha256Floor/1024", "ratio"),
    ("key derivation, 64 KiB code with an #include", "BM_KeyDerivationIncluding/65536", "SHA-256 of the source", "BM_Sha256Floor/65536", "ratio"),
    ("in-memory hit", "BM_InMemoryHit", "unordered_map + mutex", "BM_UnorderedMapFloor", "ratio"),
    ("directory hit, 4 KiB", "BM_DirectoryHit/4096", "open/read/close", "BM_OpenReadCloseFloor/4096", "ratio"),
    ("directory hit, 256 KiB", "BM_DirectoryHit/262144", "open/read/close", "BM_OpenReadCloseFloor/262144", "ratio"),
    ("directory hit, 4 KiB", "BM_DirectoryHit/4096", "open/read/close, aligned unzeroed buffer", "BM_OpenReadCloseAlignedFloor/4096", "ratio"),
    ("directory hit, 256 KiB", "BM_DirectoryHit/262144", "open/read/close, aligned unzeroed buffer", "BM_OpenReadCloseAlignedFloor/262144", "ratio"),
    ("SQLite hit, 4 KiB", "BM_SqliteHit/4096", "raw prepared SELECT", "BM_SqliteSelectFloor/4096", "ratio"),
    ("SQLite hit, 256 KiB", "BM_SqliteHit/262144", "raw prepared SELECT", "BM_SqliteSelectFloor/262144", "ratio"),
    ("compile hit, small kernel", "BM_CompileSmallHit", "cold compile", "BM_CompileSmallCold", "speedup"),
    ("compile hit, CCCL kernel", "BM_CompileCcclHit", "cold compile", "BM_CompileCcclCold/iterations:3", "speedup"),
    ("CUB + own header, in-memory hit", "BM_CubHitInMemory", "cold compile", "BM_CubCold/iterations:3", "speedup"),
    ("CUB + own header, directory hit", "BM_CubHitDirectory", "cold compile", "BM_CubCold/iterations:3", "speedup"),
    ("CUB + own header, key", "BM_CubKey", "SHA-256 of bytes read", "BM_CubSha256OfBytesRead", "ratio"),
]

print(f"{'operation':32} {'time':>10}   {'floor / baseline':24} {'time':>10}   {'ratio':>10}")
for label, ours, floor_label, floor, kind in rows:
    if ours not in results or floor not in results:
        continue
    a, b = ns(ours), ns(floor)
    ratio = f"{b / a:,.0f}x faster" if kind == "speedup" else f"{a / b:.2f}x"
    print(f"{label:32} {human(a):>10}   {floor_label:24} {human(b):>10}   {ratio:>10}")
