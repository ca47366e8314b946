#!/bin/bash
# An unmodified cuda.core program (Program.compile, no cache=) in two processes under `cucore run`:
# the second one's compiles are all cache hits, and every output equals the first run's and a run
# without cucore. Usage: run_cuda_core.sh CUCORE PYTHON PROGRAM
set -u
cucore=$1 python=$2 program=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/cucore-run-cuda-core-XXXXXX")
trap 'rm -rf "$work"' EXIT
unset CUCORE_LOG CUCORE_RUN_CACHE CUCORE_REMOTE_CACHE
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAILED: $*"; fail=$((fail + 1)); }
expect() { if [ "$1" = "$2" ]; then ok "$3 ($1)"; else bad "$3: got $1, want $2"; fi; }

# The same compiles without cucore run: the reference.
if "$python" "$program" >"$work/plain.out" 2>"$work/plain.err"; then
  ok "without cucore run"
else
  bad "without cucore run"
  cat "$work/plain.err"
fi
# The drop-in forwards to the NVRTC the program loads by itself (a wheel's, or the system's).
nvrtc=$(sed -n 's/^nvrtc: //p' "$work/plain.out")
sed -i '/^nvrtc: /d' "$work/plain.out"
compiles=$(grep -c "^{" "$work/plain.out")
for run in 1 2; do
  if CUCORE_LOG=info "$cucore" run --nvrtc "$nvrtc" --cache "dir:$work/cache" -- "$python" \
    "$program" >"$work/run$run.out" 2>"$work/run$run.err"; then
    ok "run $run under cucore run"
  else
    bad "run $run under cucore run"
    cat "$work/run$run.err"
  fi
  loaded=$(sed -n 's/^nvrtc: //p' "$work/run$run.out")
  [ "$(basename "$(dirname "$loaded")")" = cucore-run ] && ok "run $run: cuda.core loaded the drop-in" ||
    bad "run $run: cuda.core loaded $loaded, not the drop-in"
  sed -i '/^nvrtc: /d' "$work/run$run.out"
  cmp -s "$work/plain.out" "$work/run$run.out" && ok "run $run: outputs equal the plain run's" ||
    bad "run $run: outputs differ from the plain run's"
done
expect "$(grep -c 'info: miss ' "$work/run1.err")" "$compiles" "run 1: misses"
expect "$(grep -c 'info: hit ' "$work/run2.err")" "$compiles" "run 2: hits"
expect "$(grep -c 'info: miss ' "$work/run2.err")" 0 "run 2: misses"
# The hits are counted where `cucore cache stats` reads them.
stats=$("$cucore" cache stats --cache "dir:$work/cache" 2>&1)
echo "$stats" | sed 's/^/  /'
expect "$(echo "$stats" | grep -c "lookups *$compiles hits, $compiles misses")" 1 \
  "cucore cache stats: $compiles hits and $compiles misses"
# Quiet without CUCORE_LOG: the program's own stderr only.
"$cucore" run --nvrtc "$nvrtc" --cache "dir:$work/cache" -- "$python" "$program" \
  >"$work/run3.out" 2>"$work/run3.err"
expect "$(wc -c <"$work/run3.err")" 0 "run 3 without CUCORE_LOG: bytes on stderr"
# Without LD_PRELOAD (cuda.pathfinder then loads NVRTC by soname: LD_LIBRARY_PATH finds the drop-in).
CUCORE_LOG=info "$cucore" run --nvrtc "$nvrtc" --no-preload --cache "dir:$work/cache" -- \
  "$python" "$program" >"$work/run4.out" 2>"$work/run4.err"
expect "$(grep -c 'info: hit ' "$work/run4.err")" "$compiles" "run 4, --no-preload: hits"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
