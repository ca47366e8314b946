#!/bin/bash
# `cucore run` and `cucore env`: the environment they set, exit statuses, the command line.
# Usage: run_cli.sh CUCORE DROPIN_DIR
set -u
cucore=$1 dir=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/cucore-run-cli-XXXXXX")
trap 'rm -rf "$work"' EXIT
unset CUCORE_RUN_CACHE CUCORE_RUN_LD_LIBRARY_PATH CUCORE_RUN_NVRTC CUCORE_RUN_LIBS CUCORE_COMPILE_SERVER
# A sanitizer build's cucore started under an outer `cucore run` has the (C, uninstrumented) shims
# preloaded before its ASan runtime: allowed.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAILED: $*"; fail=$((fail + 1)); }
expect() { if [ "$1" = "$2" ]; then ok "$3"; else bad "$3: got \"$1\", want \"$2\""; fi; }

# The drop-ins' directory the program gets: the build's, or (where the real libraries export
# fewer names than the drop-ins) a directory of copies and links to it under the runtime directory.
rdir=$(LD_LIBRARY_PATH=/opt/a:/opt/b "$cucore" run -- bash -c 'echo "${LD_LIBRARY_PATH%%:*}"')
if [ "$rdir" = "$dir" ] || { [ "$(basename "$rdir")" = cucore-run ] &&
  [ "$(readlink -f "$rdir/libcucore_dropin_nvrtc.so")" = "$(readlink -f "$dir/libcucore_dropin_nvrtc.so")" ]; }; then
  ok "run: the drop-ins' directory $rdir serves the build's drop-ins"
else
  bad "run: the drop-ins' directory $rdir is neither $dir nor one of links to it"
fi

# What the program sees.
show='echo "$LD_LIBRARY_PATH|$LD_PRELOAD|$CUCORE_RUN_LD_LIBRARY_PATH|${CUCORE_RUN_CACHE-unset}"'
out=$(LD_LIBRARY_PATH=/opt/a:/opt/b LD_PRELOAD= "$cucore" run --cache "dir:$work/c" -- bash -c "$show")
expect "$out" "$rdir:/opt/a:/opt/b|$rdir/libnvrtc.so.13:$rdir/libnvJitLink.so.13:$rdir/libnvvm.so.4|/opt/a:/opt/b|dir:$work/c" \
  "run: drop-ins first on LD_LIBRARY_PATH and LD_PRELOAD, the original path kept, the cache named"
out=$(LD_LIBRARY_PATH= "$cucore" run --no-preload --cache "dir:$work/c" -- bash -c "$show")
expect "$(echo "$out" | cut -d'|' -f2)" "" "run --no-preload: LD_PRELOAD empty"
# Nested: an inner cucore run keeps the outer original path and lists each drop-in once.
out=$(LD_LIBRARY_PATH=/opt/a "$cucore" run --cache "dir:$work/c" -- "$cucore" run --cache "dir:$work/c" -- bash -c "$show")
expect "$out" "$rdir:/opt/a|$rdir/libnvrtc.so.13:$rdir/libnvJitLink.so.13:$rdir/libnvvm.so.4|/opt/a|dir:$work/c" \
  "nested run: each drop-in once, the outer original path"
# The program's arguments, "--" included, reach it untouched; its exit status is cucore run's.
out=$("$cucore" run --cache "dir:$work/c" -- bash -c 'echo "$@"; exit 3' prog -x -- --cache y)
expect "$?|$out" "3|-x -- --cache y" "arguments after -- reach the program; its exit status"
"$cucore" run --cache "dir:$work/c" -- "$work/no-such-program" 2>"$work/err"
expect "$?" 127 "a program that does not exist: exit 127"
"$cucore" run --cache "dir:$work/c" 2>/dev/null
expect "$?" 2 "no -- PROGRAM: usage error"
"$cucore" run --cache "dir:$work/c" -- 2>/dev/null
expect "$?" 2 "nothing after --: usage error"
"$cucore" run --cache "bogus://x" -- true 2>/dev/null
expect "$?" 2 "a malformed --cache: usage error before the program runs"
"$cucore" run --nvrtc "$work/none.so" -- true 2>/dev/null
expect "$?" 2 "--nvrtc naming no file: usage error"
CUCORE_RUN_LIBS=$work "$cucore" run -- true 2>/dev/null
expect "$?" 1 "CUCORE_RUN_LIBS without drop-ins: error"
# cucore env: the same variables as export lines a shell can eval.
env_out=$(LD_LIBRARY_PATH=/opt/a "$cucore" env --cache "dir:$work/c")
expect "$(echo "$env_out" | grep -c '^export ')" 6 "env: six export lines"
out=$(eval "$env_out"; echo "$LD_LIBRARY_PATH|$CUCORE_RUN_CACHE|$CUCORE_SERVER_PROGRAM")
expect "$out" "$rdir:/opt/a|dir:$work/c|$(readlink -f "$cucore")" "env: eval gives the run environment"
# --server / --no-server: the drop-ins' compile server mode (default: on, unless the user set one).
expect "$("$cucore" env --server | grep -c '^export CUCORE_COMPILE_SERVER=.*on')" 1 "env --server"
expect "$("$cucore" env --no-server | grep -c '^export CUCORE_COMPILE_SERVER=.*off')" 1 \
  "env --no-server"
expect "$("$cucore" env | grep -c "^export CUCORE_COMPILE_SERVER='on'")" 1 "env: the server on by default"
expect "$(CUCORE_COMPILE_SERVER=auto "$cucore" env | grep -c CUCORE_COMPILE_SERVER)" 0 \
  "env: the user's CUCORE_COMPILE_SERVER kept"
expect "$(CUCORE_COMPILE_SERVER=off "$cucore" run -- sh -c 'echo "$CUCORE_COMPILE_SERVER"')" off \
  "run: the user's CUCORE_COMPILE_SERVER=off kept"
"$cucore" run --server --no-server -- true 2>/dev/null
expect "$?" 2 "--server with --no-server: usage error"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
