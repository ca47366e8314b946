#!/bin/bash
# The NVRTC drop-in's harness (run_harness.sh: every getter against the real library, fresh
# processes, threads, misuse, an edited header) with its misses compiled by one compile server
# (docs/compile-server.md), once per real NVRTC given: every check passes as in-process, the
# server served them, and each library got a worker pool of its own that loads that very file.
# Usage: run_through_server.sh CLI HARNESS DROPIN_LIB REAL_LIB [REAL_LIB...]
set -u
cli=$1 harness=$2 dropin=$3
shift 3
if [ ! -x "$harness" ]; then
  echo "skipped: $harness is not built"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/cucore-server-dropin-XXXXXX")
dir=$work/server
cleanup() {
  "$cli" server stop --dir "$dir" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAILED: $*"; fail=$((fail + 1)); }
status() { "$cli" server status --dir "$dir" --json; }
# The requests the server served; with a library: its pool's workers' requests.
served() {
  status | python3 -c '
import json, sys
s = json.load(sys.stdin)
lib = sys.argv[1] if len(sys.argv) > 1 else None
print(s["requests"] if lib is None else sum(w["requests"] for w in s["workers"] if w["nvrtc"] == lib))
' "$@"
}

"$cli" server start --dir "$dir" --workers 2 --idle-time 600 >/dev/null || {
  echo "FAILED: cucore server start"
  exit 1
}
export CUCORE_SERVER_DIR=$dir CUCORE_COMPILE_SERVER=on
for real in "$@"; do
  lib=$(readlink -f "$real")
  if [ ! -f "$lib" ]; then
    bad "$real: no such library (scripts/fetch-cuda-versions.sh installs the version roots)"
    continue
  fi
  before=$(served)
  if out=$(bash "$here/run_harness.sh" "$harness" "$real" "$dropin" 2>&1); then
    ok "the harness through the server, $lib: $(tail -n 1 <<<"$out")"
  else
    bad "the harness through the server, $lib"
    echo "$out" | grep -v '^ok'
  fi
  after=$(served)
  # Every miss of the harness's cacheable cases, its threads and its edited header (dozens).
  if [ "$after" -gt $((before + 20)) ]; then
    ok "$lib: the server compiled $((after - before)) of its misses"
  else
    bad "$lib: the server compiled $((after - before)) of its misses (expected dozens)"
  fi
  mine=$(served "$lib")
  if [ "$mine" -gt 20 ]; then
    ok "$lib: its own pool compiled $mine"
  else
    bad "$lib: its own pool compiled $mine"
  fi
done
"$cli" server stop --dir "$dir" >/dev/null
if [ -e "$dir" ]; then bad "the server left $dir"; else ok "the server stopped and left no files"; fi

# Never worse than no server: a stopped server (the drop-in gives up after
# CUCORE_SERVER_TIMEOUT_MS of silence) and a killed one (nothing answers the socket it left): every
# case still equals the real library's, each miss compiled in the program.
real=$1
"$cli" server start --dir "$dir" --workers 1 --idle-time 600 >/dev/null || bad "server start"
pid=$(status | python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])')
fault_run() {
  local label=$1
  mkdir -p "$work/src-$label"
  if env CUCORE_RUN_NVRTC="$real" CUCORE_RUN_CACHE="dir:$work/cache-$label" CUDA_CACHE_DISABLE=1 \
    CUCORE_SERVER_TIMEOUT_MS=300 CUCORE_LOG=info \
    "$harness" "$real" "$dropin" "$work/src-$label" cases >"$work/out" 2>"$work/err"; then
    ok "$label: $(tail -n 1 "$work/out")"
  else
    bad "$label"
    grep -v '^ok' "$work/out"
  fi
  local misses served
  misses=$(grep -c 'info: miss ' "$work/err")
  served=$(grep -c 'compiled in the compile server' "$work/err")
  if [ "$misses" -gt 0 ] && [ "$served" -eq 0 ]; then
    ok "$label: $misses misses, all compiled in the program"
  else
    bad "$label: $misses misses, $served through the server"
  fi
}
kill -STOP "$pid"
fault_run "stopped server"
kill -CONT "$pid"
kill -KILL "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
fault_run "killed server"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
