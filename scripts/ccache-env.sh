# Sourced (not run) by .ci/run and the build scripts: compile-cache entries that do not depend on
# where the checkout is, so a fresh clone at another path hits what an earlier clone compiled
# (CMakeLists.txt puts ccache in front of the compiler when it is installed; docs/development.md,
# "CI"). Absolute paths under the checkout become relative on ccache's command lines (base_dir)
# and the working directory is left out of the key (hash_dir off; debug information then names
# the directory of the clone that first compiled the object). Where the cache is (CCACHE_DIR) and
# its size stay the user's settings (scripts/setup.sh sizes it only where nobody did).
if command -v ccache >/dev/null 2>&1; then
  CCACHE_BASEDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
  export CCACHE_BASEDIR
  export CCACHE_NOHASHDIR=1
fi
