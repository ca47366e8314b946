#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh), then configures and builds one CMake preset
# (default: "default"). Usage: scripts/build.sh [default|release|cli|asan|tsan|fuzz]
# cli builds the command line and the drop-ins of `cucore run` alone (the README's first command),
# after setting up only what that build needs (scripts/setup.sh cli).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache-env.sh
preset=${1:-default}
profile=all
[ "$preset" != cli ] || profile=cli
bash scripts/setup.sh "$profile"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
