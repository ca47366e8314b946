#!/bin/bash
# numba-cuda's cuda.compile_ptx (libNVVM) under `cucore run`, twice: the second compile hits and
# the PTX equals a plain run's. Usage: run_numba.sh CUCORE PYTHON PROGRAM
set -u
cucore=$1 python=$2 program=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/cucore-run-numba-XXXXXX")
trap 'rm -rf "$work"' EXIT
unset CUCORE_RUN_CACHE CUCORE_REMOTE_CACHE
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAILED: $*"; fail=$((fail + 1)); }
"$python" "$program" >"$work/plain" 2>"$work/err" || { cat "$work/err"; exit 1; }
for run in 1 2; do
  CUCORE_LOG=info "$cucore" run --cache "dir:$work/cache" -- "$python" "$program" \
    >"$work/out" 2>"$work/err" || bad "run $run"
  cmp -s "$work/plain" "$work/out" && ok "run $run: the PTX equals a plain run's" ||
    bad "run $run: the PTX differs"
  want=miss
  [ "$run" -eq 2 ] && want=hit
  grep -q "info: $want NVVM compile" "$work/err" && ok "run $run: an NVVM $want" ||
    { bad "run $run: no NVVM $want"; cat "$work/err"; }
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
