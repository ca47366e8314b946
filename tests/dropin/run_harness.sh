#!/bin/bash
# The NVRTC drop-in against the real library (tests/dropin/nvrtc_harness.c), in fresh processes
# over one cache, with faults injected. Usage: run_harness.sh HARNESS REAL_LIB DROPIN_LIB
set -u
harness=$1 real=$2 dropin=$3
# A build that made the drop-ins but not the harness (a subset of targets): skipped.
if [ ! -x "$harness" ]; then
  echo "skipped: $harness is not built"
  exit 77
fi
. "$(dirname "$0")/checks.sh"
work_dir cucore-dropin
mkdir -p "$work/src" "$work/cache"
export CUCORE_RUN_NVRTC=$real
# NVRTC's log is not a function of its inputs where a driver is installed: ptxas's results go to
# the driver's compute cache (~/.nv/ComputeCache), and a compile answered from it logs none of
# ptxas's warnings; a process sees the entries that existed when it first used it (measured on the
# GPU machine). The reference compiles here must be the ones the drop-in recorded: without it.
export CUDA_CACHE_DISABLE=1
unset CUCORE_LOG CUCORE_RUN_CACHE CUCORE_REMOTE_CACHE

# $1 label, $2 the harness's mode, then environment assignments (checks.sh's harness_run).
run_mode() {
  local label=$1
  harness_args=("$real" "$dropin" "$work/src" "$2")
  shift 2
  harness_run "$label" "$@"
}

cache="CUCORE_RUN_CACHE=dir:$work/cache"

# 1. A fresh cache: each cacheable case misses once, then hits (the alias spelling hits at once).
run_mode "first process" cases "$cache" CUCORE_LOG=info
cacheable=$(sed -n 's/^cacheable cases: //p' "$work/out")
expect "$(count 'info: miss ')" $((cacheable - 1)) "first process: misses"
expect "$(count 'info: hit ')" $((cacheable + 1)) "first process: hits"
# An option not in the table of NVRTC's options bypasses, with the reason, on every compile.
# (the harness compiles each case twice: through the drop-in and again for its hit).
expect "$(count 'bypass harness.cu: option "--no-such-option" is not an NVRTC option cucore knows')" \
  2 "first process: the unknown option's bypasses"
# 2. A second process over the same cache: every cacheable compile hits.
run_mode "second process" cases "$cache" CUCORE_LOG=info
expect "$(count 'info: miss ')" 0 "second process: misses"
expect "$(count 'info: hit ')" $((2 * cacheable)) "second process: hits"
# 3. Without CUCORE_LOG the drop-in prints nothing.
run_mode "third process, quiet" cases "$cache"
expect "$(wc -c <"$work/err")" 0 "third process: bytes on stderr"
# 4. Misuse, many threads at once, a header edited on disk.
run_mode "misuse" misuse "$cache"
run_mode "threads" threads "$cache" CUCORE_LOG=info
expect "$(count 'info: miss ')" 4 "threads: misses (4 programs, 8 threads, single-flight)"
run_mode "edited header" edit "$cache" CUCORE_LOG=info
expect "$(count 'info: miss ')" 1 "edited header: misses"

# 4b. The drop-in's cache does not fsync (a miss costs little more than NVRTC) unless
# CUCORE_CACHE_FSYNC=1 asks.
if command -v strace >/dev/null 2>&1; then
  syncs() {
    rm -rf "$work/synced"
    # LeakSanitizer cannot run under ptrace: off for this run of a sanitizer build.
    env "CUCORE_RUN_CACHE=dir:$work/synced" "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
      "$@" strace -f -qq -e trace=fsync,fdatasync \
      -o "$work/strace" "$harness" "$real" "$dropin" "$work/src" edit >/dev/null 2>&1
    grep -c -E 'fsync|fdatasync' "$work/strace"
  }
  expect "$(syncs)" 0 "no fsync by default"
  n=$(syncs CUCORE_CACHE_FSYNC=1)
  [ "$n" -gt 0 ] && ok "CUCORE_CACHE_FSYNC=1: $n fsyncs" || bad "CUCORE_CACHE_FSYNC=1: no fsync"
fi

# Faults: each run must still give NVRTC's own results, silently.
# 5. Every entry damaged on disk: misses, recompiled, stored again.
damaged=0
while IFS= read -r -d '' f; do
  size=$(stat -c %s "$f")
  if [ "$size" -gt 64 ]; then
    printf 'damaged!' | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc status=none
    damaged=$((damaged + 1))
  fi
done < <(find "$work/cache" -type f -size +1k -print0)
[ "$damaged" -gt 0 ] && ok "damaged $damaged entries" || bad "found no entries to damage"
run_mode "damaged entries" cases "$cache" CUCORE_LOG=info
expect "$(count 'info: miss ')" $((cacheable - 1)) "damaged entries: misses"
run_mode "damaged entries, stored again" cases "$cache" CUCORE_LOG=info
expect "$(count 'info: miss ')" 0 "damaged entries, stored again: misses"
# 6. A cache that cannot be opened (a file where its directory should be).
touch "$work/not-a-directory"
run_mode "unusable cache" cases "CUCORE_RUN_CACHE=dir:$work/not-a-directory/cache"
expect "$(wc -c <"$work/err")" 0 "unusable cache: bytes on stderr"
# 7. A Redis tier that is down (nothing listens on port 9 of the loopback).
run_mode "redis down" cases "CUCORE_RUN_CACHE=dir:$work/cache2+redis://127.0.0.1:9/0"
run_mode "redis alone, down" cases "CUCORE_RUN_CACHE=redis://127.0.0.1:9/0"
expect "$(wc -c <"$work/err")" 0 "redis down: bytes on stderr"
# 8. No real library: every call fails, and one message says why.
run_mode "no real library" missing "CUCORE_RUN_NVRTC=$work/no-such-libnvrtc.so.13"
expect "$(count 'no real libnvrtc.so.13')" 1 "no real library: messages"

# 8b. Told to forward to the drop-in itself: refused (it would call itself without end).
run_mode "the drop-in as its own real library" missing "CUCORE_RUN_NVRTC=$dropin"
expect "$(count 'the drop-in itself')" 1 "the drop-in as its own real library: messages"

# 9. A shim without its engine beside it: every call fails, and one message says why.
mkdir -p "$work/lonely"
cp "$dropin" "$work/lonely/"
if env "$harness" "$real" "$work/lonely/$(basename "$dropin")" "$work/src" missing \
  >"$work/out" 2>"$work/err"; then
  ok "no engine: $(tail -n 1 "$work/out")"
else
  bad "no engine"
  cat "$work/out" "$work/err"
fi
expect "$(count "drop-in's engine")" 1 "no engine: messages"

finish
