#!/bin/bash
# `cucore run` never stops or disturbs the program for a cache problem (docs/transparent-cache.md):
# for each broken cache the NVRTC harness (tests/dropin/nvrtc_harness.c, mode "edit": one real and
# one drop-in compile) runs under `cucore run`, passes, exits 0, and writes nothing on stderr
# without CUCORE_LOG, the reason with CUCORE_LOG=warning. `cucore cache check` reports each one
# (exit 1) and a good cache as good (exit 0).
# Usage: run_cache_failures.sh CUCORE HARNESS REAL_NVRTC DROPIN_DIR
set -u
cucore=$1 harness=$2 real=$3 dir=$4
if [ ! -x "$harness" ]; then
  echo "skipped: $harness is not built"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/cucore-run-failures-XXXXXX")
trap 'rm -rf "$work"' EXIT
# The unwritable case runs as another user, who must reach the work directory.
chmod 755 "$work"
unset CUCORE_LOG CUCORE_RUN_CACHE CUCORE_RUN_LD_LIBRARY_PATH CUCORE_RUN_NVRTC CUCORE_RUN_LIBS \
  CUCORE_REMOTE_CACHE CUCORE_CACHE_DIR XDG_CACHE_HOME CUCORE_CACHE_SHARED
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAILED: $*"; fail=$((fail + 1)); }
expect() { if [ "$1" = "$2" ]; then ok "$3"; else bad "$3: got \"$1\", want \"$2\""; fi; }

mkdir -p "$work/src"
src=$work/src  # the harness's WORKDIR (it writes its headers there)
before=:       # run before each run of the program and of cache check: puts the fault back
# $1 label, $2 the expected text in stderr under CUCORE_LOG=warning, $3... a prefix (env VAR=...,
# setpriv ...) then cucore run's options. The harness loads the drop-in by path: --no-preload
# (sanitizer builds cannot preload it).
run_case() {
  local label=$1 reason=$2
  shift 2
  local prefix=() opts=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    prefix+=("$1")
    shift
  done
  shift
  opts=("$@")
  local prog=("$harness" "$real" "$dir/libnvrtc.so.13" "$src" edit)
  eval "$before"
  "${prefix[@]}" "$cucore" run --no-preload --nvrtc "$real" "${opts[@]}" -- "${prog[@]}" \
    >"$work/out" 2>"$work/err"
  local rc=$?
  expect "$rc|$(tail -n 1 "$work/out")" "0|1 passed, 0 failed" "$label: the program ran, its output and exit status"
  expect "$(wc -c <"$work/err")" 0 "$label: nothing on stderr without CUCORE_LOG"
  [ "$rc" -ne 0 ] && cat "$work/out" "$work/err"
  eval "$before"
  "${prefix[@]}" env CUCORE_LOG=warning "$cucore" run --no-preload --nvrtc "$real" "${opts[@]}" \
    -- "${prog[@]}" >"$work/out" 2>"$work/err"
  expect "$?|$(tail -n 1 "$work/out")" "0|1 passed, 0 failed" "$label, CUCORE_LOG=warning: the program ran"
  if grep -q -- "$reason" "$work/err"; then
    ok "$label, CUCORE_LOG=warning: stderr says why"
  else
    bad "$label, CUCORE_LOG=warning: no \"$reason\" on stderr:"
    cat "$work/err"
  fi
}
# $1 label, $2 the expected PROBLEM text, $3... a prefix then -- then cache check's options.
check_case() {
  local label=$1 reason=$2
  shift 2
  local prefix=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    prefix+=("$1")
    shift
  done
  shift
  eval "$before"
  "${prefix[@]}" "$cucore" cache check "$@" >"$work/check" 2>&1
  expect "$?" 1 "cache check, $label: exit status"
  if grep -q "^PROBLEM.*$reason" "$work/check"; then
    ok "cache check, $label: names the problem"
  else
    bad "cache check, $label: no PROBLEM line with \"$reason\":"
    cat "$work/check"
  fi
}
# run_case, then check_case: $1 label, $2 run_case's reason, $3 check_case's, then the arguments of
# both.
both_cases() {
  local label=$1 run_reason=$2 check_reason=$3
  shift 3
  run_case "$label" "$run_reason" "$@"
  check_case "$label" "$check_reason" "$@"
}

# 1. A regular file where --cache's directory belongs.
touch "$work/file"
both_cases "--cache is a regular file" "not a directory" "regular file, not a directory" env -- \
  --cache "$work/file"
# 2. The same at $CUCORE_CACHE_DIR.
both_cases "\$CUCORE_CACHE_DIR is a regular file" "not a directory" "regular file" env \
  "CUCORE_CACHE_DIR=$work/file" --
# 3. The same at ~/.cache/cucore.
mkdir -p "$work/home/.cache"
touch "$work/home/.cache/cucore"
both_cases "~/.cache/cucore is a regular file" "not a directory" "regular file" env \
  "HOME=$work/home" --
# 4. A dangling symbolic link.
ln -s "$work/nowhere/cache" "$work/dangling"
both_cases "--cache is a dangling link" "cache directory" "symbolic link to nothing" env -- \
  --cache "$work/dangling"
# 5. A damaged SQLite file (each run moves it aside and starts afresh: damaged again each time).
before='rm -rf "$work"/bad.db*; head -c 8192 /dev/urandom >"$work/bad.db"'
both_cases "a damaged sqlite file" "sqlite\|SQLite\|database" "open" env -- --cache \
  "sqlite:$work/bad.db"
before=:
# 5b. A cache the trust rules refuse (world-writable: anyone could plant code in it).
mkdir -p "$work/world"
chmod 777 "$work/world"
both_cases "a world-writable cache" "world-writable" "world-writable" env -- --cache "$work/world"
# 6. A malformed $CUCORE_REMOTE_CACHE (the environment's, not this command line's).
both_cases "a malformed \$CUCORE_REMOTE_CACHE" "CUCORE_REMOTE_CACHE" "CUCORE_REMOTE_CACHE" env \
  "HOME=$work/home2" "CUCORE_REMOTE_CACHE=redis:/nohost" --
# 7. A Redis tier that is down (nothing listens on port 9 of the loopback); a fresh local tier
# each time, so that the compile reaches the remote one.
before='rm -rf "$work/c7"'
both_cases "a Redis tier that is down" "redis" "redis" env -- --cache \
  "$work/c7+redis://127.0.0.1:9/0"
before=:
# 8. A cache directory the user cannot write. Root writes through permission bits, so as root the
# program runs as nobody, over a directory nobody owns (trusted) but cannot write.
mkdir -p "$work/ro"
chmod 555 "$work/ro"
as_user=(env)
if [ "$(id -u)" -eq 0 ]; then
  if command -v setpriv >/dev/null 2>&1 && id nobody >/dev/null 2>&1; then
    chown -R nobody "$work/ro"
    mkdir -p "$work/src-nobody"
    chown nobody "$work/src-nobody"
    src=$work/src-nobody
    as_user=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups env "HOME=$work/home3")
  else
    as_user=()
  fi
fi
if [ ${#as_user[@]} -gt 0 ]; then
  both_cases "an unwritable cache" "ermission denied" "writable" "${as_user[@]}" -- --cache \
    "$work/ro"
else
  echo "skipped: an unwritable cache (running as root without setpriv or a user nobody)"
fi
# 8b. A full file system and a read-only one (honest for root too): each run in a mount namespace
# of its own, over a small tmpfs made full (or read-only) before the command starts.
mkdir -p "$work/mnt"
cat >"$work/fs.sh" <<'SCRIPT'
#!/bin/bash
# fs.sh MOUNTPOINT full|ro COMMAND...: MOUNTPOINT/cache on a 256 KiB tmpfs, full or read-only.
mnt=$1 how=$2
shift 2
mount -t tmpfs -o size=256k tmpfs "$mnt" || exit 99
mkdir "$mnt/cache"
if [ "$how" = full ]; then
  dd if=/dev/zero of="$mnt/fill" bs=4k 2>/dev/null
else
  mount -o remount,ro "$mnt" || exit 99
fi
exec "$@"
SCRIPT
chmod +x "$work/fs.sh"
if [ "$(id -u)" -eq 0 ] && unshare -m "$work/fs.sh" "$work/mnt" full true 2>/dev/null; then
  both_cases "a full file system" "No space left" "No space left" unshare -m "$work/fs.sh" \
    "$work/mnt" full -- --cache "$work/mnt/cache"
  both_cases "a read-only file system" "Read-only file system" "Read-only file system" unshare -m \
    "$work/fs.sh" "$work/mnt" ro -- --cache "$work/mnt/cache"
else
  echo "skipped: a full and a read-only file system (need root and unshare -m to mount a tmpfs)"
fi
# 9. A typo on cucore run's own command line is the one usage error: the program does not start.
"$cucore" run --cache "bogus://x" -- touch "$work/started" 2>"$work/err"
expect "$?|$([ -e "$work/started" ] && echo started)" "2|" "a malformed --cache: usage error, program not started"
# 9b. A key-side file of the wrong kind (a FIFO for the digest memo): cache check names it, and
# looks at it without opening it (a FIFO would block an open).
mkdir -p "$work/fifo"
mkfifo "$work/fifo/header-digests"
check_case "a FIFO for header-digests" "header-digests is a FIFO" timeout 60 -- --cache "$work/fifo"
# 10. A good cache: cache check finds nothing, and its JSON says so.
"$cucore" cache check --cache "$work/good" >"$work/check"
expect "$?" 0 "cache check, a good cache: exit status"
out=$("$cucore" cache check --cache "$work/good" --json)
case "$out" in
  *'"ok":true'*'"cucore_run":"run the program with this cache"'*) ok "cache check --json, a good cache" ;;
  *) bad "cache check --json, a good cache: $out" ;;
esac
out=$("$cucore" cache check --cache "$work/file" --json)
case "$out" in
  *'"ok":false'*'"cucore_run":"run the program uncached"'*) ok "cache check --json, a regular file" ;;
  *) bad "cache check --json, a regular file: $out" ;;
esac

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
