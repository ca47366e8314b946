"""The installed portable wheel, used as a user would, and every library it loads accounted for.

Run with the interpreter of a fresh virtual environment that has the wheel installed (with its
cu13 extra: NVRTC, nvJitLink and libNVVM from NVIDIA's wheels), normally inside
scripts/without-system-libs.sh (the build's dev libraries and /usr/local/cuda hidden); CI's
`python` stage does (scripts/check-python.sh). It checks, from /proc/PID/maps:

1. `import cucore` and compiles (PTX and CUBIN, a miss then a hit in a directory cache, an SQLite
   cache, a Redis and an HTTP tier on a closed loopback port, which are misses): every shared
   library mapped after the import that was not mapped before comes from the environment
   (site-packages: cucore itself, NVIDIA's wheels) or is glibc's, libstdc++ or libgcc_s.
2. The `cucore` console script: `--version`, `info` (NVRTC found in the environment's wheels).
3. `cucore run -- python -c 'pass'`, and `cucore run` of a program that compiles through NVRTC by
   ctypes (the drop-in's shim and engine load, from the package): the program's libraries, less
   those the interpreter loads by itself (the same program run plainly), are the environment's
   or glibc's/libstdc++/libgcc_s; the engine is among them; a second run is a cache hit.

Usage: VENV/bin/python scripts/wheel-smoke.py   (exit 1 with what failed)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

# The libraries any program may load: the C library's, the C++ runtime, the compiler's runtime.
SYSTEM_OK = ("libc.so.", "libm.so.", "libdl.so.", "libpthread.so.", "librt.so.", "ld-linux",
             "libstdc++.so.", "libgcc_s.so.", "libresolv.so.", "libnss_", "libanl.so.",
             "libutil.so.")
ENV = Path(sys.prefix).resolve()
SITE = Path(sysconfig.get_paths()["purelib"]).resolve()
BIN = Path(sys.executable).parent
# The interpreter's own extension modules (_typing, _opcode, ...: Python's, not cucore's).
STDLIB_MODULES = Path(sysconfig.get_config_var("DESTSHARED")).resolve()
failures: list[str] = []


def mapped_libraries(pid: str | int = "self") -> set[str]:
    libs = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/") and ".so" in Path(parts[5]).name:
            libs.add(parts[5].removesuffix(" (deleted)"))
    return libs


def judge(what: str, libs: set[str]) -> None:
    failed = len(failures)
    for lib in sorted(libs):
        path = Path(lib).resolve()
        if path.is_relative_to(ENV) or path.is_relative_to(SITE) or path.parent == STDLIB_MODULES:
            continue
        if Path(lib).name.startswith(SYSTEM_OK):
            continue
        failures.append(f"{what}: loaded {lib}, neither the environment's, the interpreter's nor glibc/libstdc++/libgcc_s")
    print(f"  {what}: {len(libs)} libraries loaded, all from {ENV}, the interpreter or glibc/libstdc++/libgcc_s"
          if len(failures) == failed else f"  {what}: see the failures below")


def check_import_and_compile(tmp: Path) -> None:
    before = mapped_libraries()
    import cucore

    options = cucore.ProgramOptions(arch="sm_80", std="c++17")
    source = "extern \"C\" __global__ void add_one(float* x) { x[threadIdx.x] += 1.0f; }"
    caches = [cucore.FileStreamProgramCache(tmp / "dir"), cucore.SQLiteProgramCache(tmp / "c.db"),
              cucore.open_program_cache(f"{tmp / 'tiered'}+redis://127.0.0.1:9/0"),
              cucore.open_program_cache(f"{tmp / 'http'}+http://127.0.0.1:9/cucore")]
    for cache in caches:
        for target in ("ptx", "cubin"):
            outcomes = []
            for _ in range(2):
                program = cucore.Program(source, "c++", options)
                code = program.compile(target, cache=cache).code
                outcomes.append(program.last_cache_outcome)
                assert code, (target, cache)
            if outcomes != ["miss", "hit"]:
                failures.append(f"import: {type(cache).__name__} {target}: {outcomes}, not a miss then a hit")
    for cache in caches:
        cache.close()
    print(f"  import cucore ({cucore.__file__}) and compiles through 4 caches: ok")
    judge("import and compile", mapped_libraries() - before)


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        failures.append(f"{' '.join(args)}: exit {result.returncode}\n{result.stdout}{result.stderr}")
    return result


PROBE = r"""
import ctypes, json, sys
def libs():
    out = set()
    for line in open("/proc/self/maps"):
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/") and ".so" in parts[5].rsplit("/", 1)[-1]:
            out.add(parts[5].strip())
    return out
if sys.argv[1] == "compile":
    nvrtc = ctypes.CDLL("libnvrtc.so.13")
    prog = ctypes.c_void_p()
    src = b'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }'
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"k.cu", 0, None, None) == 0
    opts = (ctypes.c_char_p * 1)(b"--gpu-architecture=compute_80")
    assert nvrtc.nvrtcCompileProgram(prog, 1, opts) == 0, "nvrtcCompileProgram failed"
    size = ctypes.c_size_t()
    assert nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size)) == 0 and size.value > 100
json.dump(sorted(libs()), sys.stdout)
"""


def check_cli_and_run(tmp: Path) -> None:
    cucore = str(BIN / "cucore")
    version = run([cucore, "--version"]).stdout.strip()
    info = run([cucore, "info", "--json"]).stdout
    if info:
        nvrtc = json.loads(info)["nvrtc"]
        if not (nvrtc.get("found") and Path(nvrtc["path"]).resolve().is_relative_to(SITE)):
            failures.append(f"cucore info: NVRTC not from the environment's wheels: {nvrtc}")
    print(f"  {version}; cucore info: NVRTC {json.loads(info)['nvrtc'].get('path') if info else '?'}")

    env = dict(os.environ, CUCORE_CACHE_DIR=str(tmp / "run-cache"))
    failed = len(failures)
    run([cucore, "run", "--", sys.executable, "-c", "pass"], env=env)
    print(f"  cucore run -- python -c 'pass': {'ok' if len(failures) == failed else 'failed'}")

    probe = tmp / "probe.py"
    probe.write_text(PROBE)
    plain = run([sys.executable, str(probe), "baseline"], env=env).stdout
    interpreter = set(json.loads(plain)) if plain else set()
    for attempt in range(2):
        out = run([cucore, "run", "--", sys.executable, str(probe), "compile"], env=env).stdout
        if not out:
            return
        libs = set(json.loads(out))
        if not any(Path(lib).name == "libcucore_dropin_nvrtc.so" for lib in libs):
            failures.append(f"cucore run: the NVRTC drop-in's engine was not loaded: {sorted(libs)}")
        judge(f"cucore run, NVRTC compile {attempt + 1}", libs - interpreter)
    stats = json.loads(run([cucore, "cache", "stats", "--json"], env=env).stdout or "{}")
    hits = stats.get("statistics", {}).get("compile_hits", 0)
    if hits < 1:
        failures.append(f"cucore run: the second compile was no cache hit: {stats.get('statistics')}")
    print(f"  cucore run of an NVRTC program, twice: drop-in engine loaded, {hits} cache hit(s)")


def main() -> int:
    print(f"wheel smoke test: {sys.executable} ({ENV})", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        check_import_and_compile(Path(tmp))
        check_cli_and_run(Path(tmp))
    sys.stdout.flush()
    for failure in failures:
        print(f"wheel-smoke: FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
