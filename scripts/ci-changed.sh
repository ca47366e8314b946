#!/usr/bin/env bash
# Runs only the CI stages (.ci/run) that the files changed since BASE can affect: the changes of
# the commits since BASE, the working tree's uncommitted changes and its untracked files.
# Usage: scripts/ci-changed.sh [-n] [BASE]   (BASE: a commit, default HEAD, i.e. uncommitted work)
#   -n   print the changed files' stages and why, run nothing
# A path that matches no rule below runs every stage. docs/development.md, "CI", lists the rules.
set -euo pipefail
cd "$(dirname "$0")/.."

dry_run=0
if [ "${1:-}" = "-n" ]; then
  dry_run=1
  shift
fi
base=${1:-HEAD}
git rev-parse --verify -q "$base^{commit}" >/dev/null || {
  echo "ci-changed: \"$base\" is not a commit: name one (default HEAD)" >&2
  exit 2
}

all="setup layers default package python wheels asan tsan fuzz oracle"
# The C++ library and what builds it: everything but setup (setup.sh is only what is installed).
library="layers default package python wheels asan tsan fuzz oracle"

# The stages one path affects (first match wins; unmatched: all).
stages_of() {
  case $1 in
    *.md | docs/* | LICENSE* | .clang-format | .gitignore) echo "" ;;
    scripts/ci-changed.sh) echo "" ;;
    scripts/setup.sh | scripts/ccache-env.sh | .ci/* | CMakePresets.json | CMakeLists.txt) echo "$all" ;;
    scripts/fetch-corpus.sh) echo "setup default asan tsan oracle" ;;
    scripts/fetch-cuda-wheels.sh | scripts/cuda-wheels.txt | scripts/check-wheels-toolkit.sh) echo "wheels" ;;
    scripts/check-package.sh | tests/package/* | cmake/cucore_install.cmake | cmake/*.in) echo "package" ;;
    scripts/check-python.sh | pyproject.toml) echo "python" ;;
    scripts/build.sh | cmake/*) echo "$library" ;;
    scripts/corpus-check.py | bench/*.py) echo "" ;;
    src/* | include/*) echo "$library" ;;
    tools/*) echo "layers default package python wheels asan tsan" ;;
    python/*) echo "layers default python wheels" ;;
    tests/python/*) echo "default python wheels" ;;
    tests/fuzz/*) echo "fuzz" ;;
    tests/oracle/* | tests/data/corpus/*) echo "default asan tsan oracle" ;;
    tests/gpu/*) echo "default asan tsan" ;;
    tests/lsan.supp) echo "asan" ;;
    tests/stress/*) echo "default asan tsan" ;;
    # tests/unit: the wheels stage's test programs, the oracle's helpers, the fuzzers' seeds.
    tests/unit/* | tests/data/* | tests/CMakeLists.txt) echo "default wheels asan tsan fuzz oracle" ;;
    examples/* | bench/* | tests/*) echo "default asan tsan" ;;
    *) echo "$all" ;;
  esac
}

changed=$( (git diff --name-only --no-renames "$base"; git ls-files --others --exclude-standard) |
  sort -u)
declare -A wanted=()
while IFS= read -r path; do
  [ -n "$path" ] || continue
  stages=$(stages_of "$path")
  ((dry_run)) && printf '  %-60s %s\n' "$path" "${stages:-(no stage)}"
  for s in $stages; do wanted[$s]=1; done
done <<<"$changed"

run=()
for s in $all; do
  [ -n "${wanted[$s]:-}" ] && run+=("$s")
done
if ((${#run[@]} == 0)); then
  echo "ci-changed: no stage is affected by the changes since $base"
  exit 0
fi
echo "ci-changed: stages ${run[*]} (changes since $base)"
((dry_run)) && exit 0
exec .ci/run "${run[@]}"
