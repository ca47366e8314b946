#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh), then configures and builds one CMake preset
# (default: "default"). Usage: scripts/build.sh [default|release|cli|asan|tsan|fuzz|wheel]
# cli builds the command line and the drop-ins of `cucore run` alone (the README's first command),
# after setting up only what that build needs (scripts/setup.sh cli).
# wheel builds the portable Python wheel (scripts/build-wheel.sh: static dependencies, repaired and
# checked with auditwheel) into build/wheelhouse/ and prints its path last.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache-env.sh
preset=${1:-default}
profile=all
[ "$preset" != cli ] || profile=cli
bash scripts/setup.sh "$profile"
if [ "$preset" = wheel ]; then exec bash scripts/build-wheel.sh; fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
