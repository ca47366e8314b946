"""The command-line tool shipped inside the package: `python -m cucore` and the console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import cucore
from conftest import ARCH, KERNEL


def run(args, **kw):
    return subprocess.run([sys.executable, "-m", "cucore", *args], capture_output=True, text=True,
                          timeout=120, **kw)


def test_version():
    proc = run(["--version"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"cucore {cucore.__version__}"


def test_cli_and_python_share_a_cache(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    cache_dir = tmp_path / "cache"
    args = ["compile", str(src), "--arch", ARCH, "--cache", f"dir:{cache_dir}", "-o",
            str(tmp_path / "k.cubin")]
    first = run(args)
    assert first.returncode == 0, first.stderr
    assert "cache miss" in first.stdout
    assert "cache hit" in run(args).stdout
    # The CLI's entry is readable from Python, and its bytes are what it wrote out.
    with cucore.FileStreamProgramCache(cache_dir) as cache:
        assert len(cache) == 1
        assert cache.verify()["ok"] == 1
    assert (tmp_path / "k.cubin").read_bytes() == cucore.Program(
        KERNEL, "c++", cucore.ProgramOptions(arch=ARCH, name=str(src))).compile("cubin").code


def test_exit_status_passes_through():
    proc = run(["compile", "/nonexistent/k.cu", "--arch", ARCH])
    assert proc.returncode != 0
    assert "/nonexistent/k.cu" in proc.stderr


def test_console_script():
    installed = Path(cucore.__file__).resolve().parent.parent.name == "site-packages"
    script = Path(sys.executable).parent / "cucore"
    if not installed or not script.exists():
        pytest.skip("cucore runs from the build tree: the console script comes with `pip install`")
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == f"cucore {cucore.__version__}"
