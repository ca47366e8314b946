#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh), then configures and builds one CMake preset
# (default: "default"). Usage: scripts/build.sh [default|release|asan|tsan]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache-env.sh
preset=${1:-default}
bash scripts/setup.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
