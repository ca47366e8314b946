#!/usr/bin/env bash
# Runs one preset's tests (ctest --preset PRESET, default: "default") on every core, longest
# first: as an earlier run on this machine measured them (kept in CUCORE_TEST_STATE, default
# ~/.cache/cucore-ci, between clones), else as .ci/test-costs/PRESET.txt says (the tests of 3 s
# or more in a measured run; without it a fresh clone would start the corpus last and end on it
# alone). Labels and skips are the preset's (GPU tests skip themselves without a GPU). Extra
# arguments go to ctest (-L unit, -R NAME, ...). CUCORE_TEST_JOBS: parallel tests (default: nproc).
# Usage: scripts/test.sh [PRESET] [CTEST ARGS...]   (after scripts/build.sh PRESET)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-default}
shift $(($# > 0 ? 1 : 0))
jobs=${CUCORE_TEST_JOBS:-$(nproc)}
state=${CUCORE_TEST_STATE:-${XDG_CACHE_HOME:-$HOME/.cache}/cucore-ci}
costs=build/$preset/Testing/Temporary/CTestCostData.txt
saved=$state/ctest-costs-$preset.txt
shipped=.ci/test-costs/$preset.txt
if [ ! -f "$costs" ]; then
  mkdir -p "$(dirname "$costs")"
  if [ -f "$saved" ]; then
    cp "$saved" "$costs"
  elif [ -f "$shipped" ]; then
    cp "$shipped" "$costs"
  fi
fi
# `cucore run` starts the user's compile server on a first miss: the tests' own, in a private
# directory, idle-stopped soon and stopped at the end, so none outlives the run or meets the
# user's.
server_home=""
if [ -z "${CUCORE_SERVER_DIR:-}" ]; then
  server_home=$(mktemp -d "${TMPDIR:-/tmp}/cucore-test-server-XXXXXX")
  export CUCORE_SERVER_DIR=$server_home/server
fi
export CUCORE_SERVER_IDLE_SECONDS=${CUCORE_SERVER_IDLE_SECONDS:-60}
stop_server() {
  if [ -x "build/$preset/bin/cucore" ]; then
    "build/$preset/bin/cucore" server stop --dir "$CUCORE_SERVER_DIR" >/dev/null 2>&1 || true
  fi
  if [ -n "$server_home" ]; then rm -rf "$server_home"; fi
}
trap stop_server EXIT
rc=0
ctest --preset "$preset" -j "$jobs" "$@" || rc=$?
# Only a whole run's durations are kept (a filtered run would forget the others').
if (($# == 0)) && [ -f "$costs" ] && mkdir -p "$state" 2>/dev/null; then
  cp "$costs" "$saved.$$" && mv "$saved.$$" "$saved"
fi
exit "$rc"
