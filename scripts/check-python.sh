#!/usr/bin/env bash
# Builds the Python wheel (scikit-build-core + nanobind, see pyproject.toml), installs it into
# .venv, and runs the Python tests against the installed package (not the build tree): the
# extension, the console script and cucore.cuda_core as a user gets them.
# Usage: scripts/check-python.sh   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache-env.sh
py=.venv/bin/python
wheelhouse=build/wheelhouse
rm -rf "$wheelhouse"
# No build isolation: the build uses setup.sh's pinned scikit-build-core and nanobind, and the
# incremental build directory in build/python-wheel.
"$py" -m pip wheel -q --no-build-isolation --no-deps -w "$wheelhouse" .
"$py" -m pip install -q --force-reinstall --no-deps "$wheelhouse"/cucore-*.whl
# From the repository root without PYTHONPATH, `import cucore` is the installed one (there is no
# ./cucore); pytest's report header says which file it loaded.
env -u PYTHONPATH "$py" -m pytest -q -p no:cacheprovider tests/python
