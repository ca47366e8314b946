#!/bin/bash
# On a GPU: an unmodified cuda.core program (tests/dropin/cuda_core_launch.py) run twice under
# `cucore run`; the second run's compile is a hit and its kernel computes the same result.
# Exit 77 (skipped) without a GPU. Usage: run_gpu_cuda_core.sh CUCORE PYTHON PROGRAM
set -u
cucore=$1 python=$2 program=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/cucore-run-gpu-XXXXXX")
trap 'rm -rf "$work"' EXIT
unset CUCORE_RUN_CACHE CUCORE_REMOTE_CACHE
for run in 1 2; do
  CUCORE_LOG=info "$cucore" run --cache "dir:$work/cache" -- "$python" "$program" \
    >"$work/out" 2>"$work/err"
  rc=$?
  cat "$work/out"
  if [ "$rc" -eq 77 ]; then exit 77; fi
  if [ "$rc" -ne 0 ]; then
    cat "$work/err"
    echo "FAILED: run $run exited $rc"
    exit 1
  fi
  want=miss
  [ "$run" -eq 2 ] && want=hit
  if ! grep -q "info: $want " "$work/err"; then
    cat "$work/err"
    echo "FAILED: run $run: no cache $want"
    exit 1
  fi
  echo "ok: run $run: a cache $want, the kernel's result checked"
done
echo "2 passed, 0 failed"
