"""Tile code (NVRTC 13.1+) from Python: the "tile_ir" target, ObjectCode.tile_ir alongside a cubin,
cached together; the new ProgramOptions fields.

cucore loads one NVRTC per process, so the NVRTC 13.5 compiles run in a child Python pointed at
<source>/.cache/cuda-versions/13.5/root (scripts/fetch-cuda-versions.sh), or at
$CUCORE_CUDA_VERSIONS_DIR/13.5/root.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cucore
from conftest import ARCH, KERNEL

# One Tile kernel and one SIMT kernel, shared with tile_test and cli_test.
MIXED_TILE = Path(__file__).resolve().parents[1] / "data" / "mixed_tile.cu"


def cuda_13_5_root() -> Path:
    versions = os.environ.get("CUCORE_CUDA_VERSIONS_DIR")
    base = Path(versions) if versions else Path(__file__).resolve().parents[2] / ".cache" / "cuda-versions"
    root = base / "13.5" / "root"
    if not (root / "lib" / "libnvrtc.so.13").exists():
        pytest.fail(f"no NVRTC 13.5 toolkit root at {root}: run scripts/fetch-cuda-versions.sh "
                    "(or set CUCORE_CUDA_VERSIONS_DIR to a directory holding 13.5/root)")
    return root


CHILD = textwrap.dedent(r'''
    import sys
    import cucore

    MIXED = open(sys.argv[2]).read()
    tmp = sys.argv[1]
    options = cucore.ProgramOptions(name="mixed.cu", arch="sm_100", std="c++20", enable_tile=True)

    def compile(target, cache=None):
        program = cucore.Program(MIXED, "c++", options)
        return program, program.compile(target, cache=cache)

    _, plain = compile("cubin")
    _, plain_ir = compile("tile_ir")
    assert plain.tile_ir is not None, "no Tile IR alongside the cubin"
    assert plain.tile_ir.code_type == "tile_ir" and plain_ir.code_type == "tile_ir"
    assert plain.tile_ir.code == plain_ir.code
    assert plain_ir.code.startswith(b"\x7fTileIR") and b"tile_copy" in plain_ir.code
    assert b"tile_copy" not in plain.code and b"simt_scale" in plain.code
    assert plain_ir.tile_ir is None

    caches = [cucore.InMemoryProgramCache(), cucore.FileStreamProgramCache(tmp + "/d"),
              cucore.SQLiteProgramCache(tmp + "/c.db")]
    for cache in caches:
        with cache:
            for target, oracle in (("cubin", plain), ("tile_ir", plain_ir)):
                program, miss = compile(target, cache)
                assert program.last_cache_outcome == "miss", (cache, target)
                program, hit = compile(target, cache)
                assert program.last_cache_outcome == "hit", (cache, target)
                assert miss.code == hit.code == oracle.code, (cache, target)
                assert hit.code_type == target
                if target == "cubin":
                    assert hit.tile_ir is not None and hit.tile_ir.code == plain_ir.code, cache
    # Reopened from disk: the Tile IR comes back from the same entry.
    with cucore.FileStreamProgramCache(tmp + "/d") as cache:
        program, hit = compile("cubin", cache)
        assert program.last_cache_outcome == "hit"
        assert hit.tile_ir.code == plain_ir.code

    # simt_only: no Tile IR alongside; the tile_ir target says why.
    simt = cucore.ProgramOptions(name="mixed.cu", arch="sm_100", std="c++20", simt_only=True)
    assert cucore.Program(MIXED, "c++", simt).compile("cubin").tile_ir is None
    try:
        cucore.Program(MIXED, "c++", simt).compile("tile_ir")
        raise AssertionError("simt_only: Tile IR returned")
    except cucore.CompileError as e:
        assert "generated no Tile code" in str(e), str(e)
    print("ok")
''')


def test_tile_ir_with_nvrtc_13_5_cached_together(tmp_path):
    root = cuda_13_5_root()
    env = dict(os.environ, CUCORE_CUDA_HOME=str(root), CUCORE_CUDA_HOME_ONLY="1",
               PYTHONPATH=os.pathsep.join([str(Path(cucore.__file__).resolve().parents[1]),
                                           os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), str(MIXED_TILE)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_new_fields_reach_the_key_as_nvrtc_flags():
    base = dict(code=KERNEL, code_type="c++", target_type="cubin")
    plain = cucore.ProgramOptions(arch=ARCH)
    fields = dict(warning_as_error=["reorder", "conversion"], wreorder=True, enable_tile=True,
                  default_tile=True, diagnose_implicit_tile_var=True)
    explained = cucore.explain_program_cache_key(
        options=cucore.ProgramOptions(arch=ARCH, **fields), **base)
    options = [value for name, value in explained if name == "option"]
    for flag in ("--warning-as-error=reorder,conversion", "--Wreorder", "--enable-tile",
                 "-default-tile", "--diagnose-implicit-tile-var"):
        assert flag in options, (flag, options)
    assert ("tile_ir", "alongside") in explained
    for field, value in (("tile_only", True), ("simt_only", True), ("enable_tile", True),
                         ("wreorder", True), ("warning_as_error", ["all-warnings"])):
        changed = cucore.ProgramOptions(arch=ARCH, **{field: value})
        assert (cucore.make_program_cache_key(options=changed, **base)
                != cucore.make_program_cache_key(options=plain, **base)), field
    assert (cucore.make_program_cache_key(options=plain, **dict(base, target_type="tile_ir"))
            != cucore.make_program_cache_key(options=plain, **base))


def test_a_plain_compile_has_no_tile_ir(options):
    assert cucore.Program(KERNEL, "c++", options).compile("cubin").tile_ir is None
