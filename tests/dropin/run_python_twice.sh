#!/bin/bash
# An unmodified Python program under `cucore run`, twice: the first run's compile misses, the
# second's hits, and each prints what a plain run prints (the output's SHA-256).
# Usage: run_python_twice.sh CUCORE PYTHON PROGRAM WHAT   (WHAT: the log's word for the compile,
# "NVVM compile" for libNVVM, "" for NVRTC)
set -u
cucore=$1 python=$2 program=$3 what=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/cucore-run-python-XXXXXX")
trap 'rm -rf "$work"' EXIT
unset CUCORE_RUN_CACHE CUCORE_REMOTE_CACHE
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAILED: $*"; fail=$((fail + 1)); }
"$python" "$program" >"$work/plain" 2>"$work/err" || { cat "$work/err"; exit 1; }
for run in 1 2; do
  CUCORE_LOG=info "$cucore" run --cache "dir:$work/cache" -- "$python" "$program" \
    >"$work/out" 2>"$work/err" || bad "run $run"
  cmp -s "$work/plain" "$work/out" && ok "run $run: the output equals a plain run's" ||
    bad "run $run: the output differs"
  want=miss
  [ "$run" -eq 2 ] && want=hit
  grep -q "info: $want $what" "$work/err" && ok "run $run: a $want" ||
    { bad "run $run: no $want"; cat "$work/err"; }
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
