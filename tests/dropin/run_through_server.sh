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
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
