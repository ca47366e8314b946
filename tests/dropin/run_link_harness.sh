#!/bin/bash
# The nvJitLink and libNVVM drop-ins against the real libraries (tests/dropin/link_harness.c), in
# two fresh processes over one cache, then quietly.
# Usage: run_link_harness.sh HARNESS nvjitlink REAL DROPIN REAL_NVRTC
#        run_link_harness.sh HARNESS nvvm REAL DROPIN DATA_DIR
set -u
harness=$1 mode=$2 real=$3 dropin=$4 extra=$5
# A build that made the drop-ins but not the harness (a subset of targets): skipped.
if [ ! -x "$harness" ]; then
  echo "skipped: $harness is not built"
  exit 77
fi
. "$(dirname "$0")/checks.sh"
work_dir cucore-dropin-link
unset CUCORE_LOG CUCORE_RUN_CACHE CUCORE_REMOTE_CACHE
if [ "$mode" = nvjitlink ]; then
  export CUCORE_RUN_NVJITLINK=$real
  harness_args=("$mode" "$real" "$dropin" "$extra" "$work")
else
  export CUCORE_RUN_NVVM=$real
  harness_args=("$mode" "$real" "$dropin" "$extra")
fi
cache="CUCORE_RUN_CACHE=dir:$work/cache"

harness_run "first process" "$cache" CUCORE_LOG=info
cacheable=$(sed -n 's/^cacheable cases: //p' "$work/out")
expect "$(count 'info: miss ')" "$cacheable" "first process: misses"
expect "$(count 'info: hit ')" "$cacheable" "first process: hits"
harness_run "second process" "$cache" CUCORE_LOG=info
expect "$(count 'info: miss ')" 0 "second process: misses"
expect "$(count 'info: hit ')" $((2 * cacheable)) "second process: hits"
harness_run "third process, quiet" "$cache"
expect "$(wc -c <"$work/err")" 0 "third process: bytes on stderr"
touch "$work/not-a-directory"
harness_run "unusable cache" "CUCORE_RUN_CACHE=dir:$work/not-a-directory/cache"
expect "$(wc -c <"$work/err")" 0 "unusable cache: bytes on stderr"

finish
