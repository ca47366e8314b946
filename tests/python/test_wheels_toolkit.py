"""NVIDIA's CUDA 13 wheels as cucore's toolkit: found through the interpreter's sys.path.

A fake site-packages whose nvidia/cu13 links to a real toolkit's files (the wheels' own, or
/usr/local/cuda's) stands in for `pip install "cucore[cu13]"`; with CUCORE_CUDA_SEARCH=wheels
nothing else is searched, so a compile that works proves the sys.path registration found it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _pins(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_the_cu13_extra_has_the_setup_pins():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["cu13"] == _pins((REPO / "scripts" / "cuda-wheels.txt").read_text())


def test_the_wheel_pins_are_the_version_matrix_13_5():
    # The wheels stage's 13.5 and the version matrix's 13.5 are one set of pins.
    wheels = _pins((REPO / "scripts" / "cuda-wheels.txt").read_text())
    matrix = _pins((REPO / "scripts" / "cuda-versions" / "13.5.txt").read_text())
    assert wheels == matrix


def _real_toolkit() -> dict[str, Path] | None:
    """lib (NVRTC, nvJitLink), nvvm (libnvvm.so.4), include and libdevice of a real toolkit."""
    for site in [s for s in os.environ.get("CUCORE_CUDA_WHEELS", "").split(":") if s]:
        cu13 = Path(site) / "nvidia" / "cu13"
        if (cu13 / "lib" / "libnvrtc.so.13").is_file():
            return {"lib": cu13 / "lib", "nvvm": cu13 / "lib", "include": cu13 / "include",
                    "libdevice": cu13 / "nvvm" / "libdevice"}
    cuda = Path("/usr/local/cuda")
    if (cuda / "lib64" / "libnvrtc.so.13").is_file():
        nvvm = next((d for d in (cuda / "nvvm" / "lib64", cuda / "lib64") if (d / "libnvvm.so.4").is_file()),
                    None)
        if nvvm is not None:
            return {"lib": cuda / "lib64", "nvvm": nvvm, "include": cuda / "include",
                    "libdevice": cuda / "nvvm" / "libdevice"}
    return None


@pytest.fixture
def fake_site_packages(tmp_path) -> Path:
    real = _real_toolkit()
    if real is None:
        pytest.skip("no CUDA 13 toolkit or wheels to link the fake wheels to")
    site = tmp_path / "site-packages"
    cu13 = site / "nvidia" / "cu13"
    (cu13 / "lib").mkdir(parents=True)
    (cu13 / "nvvm").mkdir()
    for f in real["lib"].iterdir():
        if f.name.startswith(("libnvrtc.so.13", "libnvrtc-builtins.so.13", "libnvJitLink.so.13")):
            (cu13 / "lib" / f.name).symlink_to(f)
    (cu13 / "lib" / "libnvvm.so.4").symlink_to(real["nvvm"] / "libnvvm.so.4")
    (cu13 / "include").symlink_to(real["include"])
    (cu13 / "nvvm" / "libdevice").symlink_to(real["libdevice"])
    return site


def _wheels_only_env(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUCORE_CUDA_HOME", "CUCORE_CUDA_HOME_ONLY", "CUDA_HOME", "CUDA_PATH",
                        "CUCORE_CUDA_WHEELS", "VIRTUAL_ENV", "CONDA_PREFIX")}
    env["CUCORE_CUDA_SEARCH"] = "wheels"
    env["PYTHONPATH"] = os.pathsep.join([p for p in [env.get("PYTHONPATH", ""), str(site)] if p])
    return env


# CCCL through the toolkit include path: the include directories come from the wheel too.
COMPILE = r"""
import cucore
code = cucore.Program('#include <cuda/std/cstdint>\n'
                      'extern "C" __global__ void k(cuda::std::uint32_t* x) { *x = 1; }',
                      "c++", cucore.ProgramOptions(arch="sm_80")).compile("ptx")
print(len(bytes(code.code)) > 0)
"""


def test_the_module_finds_wheels_on_sys_path(fake_site_packages):
    env = _wheels_only_env(fake_site_packages)
    r = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"


def test_the_console_script_hands_the_wheels_to_the_tool(fake_site_packages):
    env = _wheels_only_env(fake_site_packages)
    r = subprocess.run([sys.executable, "-m", "cucore", "info", "--json"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    source = f"pip wheel in {fake_site_packages}"
    for lib in ("nvrtc", "nvjitlink", "nvvm"):
        assert report[lib]["found"], (lib, report[lib])
        assert report[lib]["source"] == source, report[lib]
    assert report["include_source"] == source
    assert report["include_directories"][-1] == f"{fake_site_packages}/nvidia/cu13/include"
    assert report["libdevice"] is not None

