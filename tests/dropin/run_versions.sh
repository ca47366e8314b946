#!/bin/bash
# Programs built against other CUDA releases' headers under `cucore run` (docs/transparent-cache.md,
# "Every release"): a C program built against CUDA 13.5's headers (its calls bind to
# __nvJitLinkCreate_13_5, nvrtcGetTileIRSize, nvvmLLVMVersion) and one built against 12.9's
# (libnvrtc.so.12, libnvJitLink.so.12), each linked -z now and run with that release's libraries:
# under `cucore run` it prints what the plain run prints, and its second run's compile and link are
# hits. Then a library newer than the drop-ins (a libnvrtc.so.13 exporting an unknown name): the
# drop-in is left out, the program runs as without cucore, and CUCORE_LOG says so.
# Usage: run_versions.sh CUCORE CC SOURCE_DIR
set -u
cucore=$1 cc=$2 src=$3
here=$(cd "$(dirname "$0")" && pwd)
versions=${CUCORE_CUDA_VERSIONS_DIR:-$src/.cache/cuda-versions}
work=$(mktemp -d "${TMPDIR:-/tmp}/cucore-run-versions-XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
ok() { echo "ok: $1"; }
fail() { echo "FAILED: $1"; failures=$((failures + 1)); }
expect() { [ "$1" = "$2" ] && ok "$3" || fail "$3: got '$1', want '$2'"; }

case_version() {  # VERSION LIBDIRS CFLAGS LIBS
  local version=$1 libdirs=$2 cflags=$3 libs=$4 root=$versions/$1/root
  if [ ! -d "$root" ]; then
    fail "$version: no $root: run scripts/fetch-cuda-versions.sh (or set CUCORE_CUDA_VERSIONS_DIR)"
    return
  fi
  local prog=$work/program-$version
  # shellcheck disable=SC2086
  if ! "$cc" -std=c11 -Wall -Wextra -Werror $cflags -I"$root/include" -o "$prog" \
    "$here/versions_program.c" -L"$root/lib" $libs -Wl,-z,now -Wl,-rpath-link,"$root/lib"; then
    fail "$version: building the program"
    return
  fi
  local plain under1 under2
  plain=$(cd "$work" && LD_LIBRARY_PATH=$libdirs "$prog" 2>&1)
  expect "$?" 0 "$version: the plain run"
  under1=$(cd "$work" && CUCORE_LOG=info CUCORE_CACHE_DIR=$work/cache-$version LD_LIBRARY_PATH=$libdirs \
    "$cucore" run -- "$prog" 2>"$work/err1-$version")
  expect "$?" 0 "$version: run 1 under cucore run"
  under2=$(cd "$work" && CUCORE_LOG=info CUCORE_CACHE_DIR=$work/cache-$version LD_LIBRARY_PATH=$libdirs \
    "$cucore" run -- "$prog" 2>"$work/err2-$version")
  expect "$?" 0 "$version: run 2 under cucore run"
  expect "$under1" "$plain" "$version: run 1 prints what the plain run prints"
  expect "$under2" "$plain" "$version: run 2 prints what the plain run prints"
  expect "$(grep -c 'info: miss ' "$work/err1-$version")" 2 "$version: run 1 misses (compile, link)"
  expect "$(grep -c 'info: hit ' "$work/err2-$version")" 2 "$version: run 2 hits (compile, link)"
  expect "$(grep -c 'leaving out' "$work/err1-$version")" 0 "$version: no drop-in left out"
}

r135=$versions/13.5/root r129=$versions/12.9/root
case_version 13.5 "$r135/lib" "-DCUCORE_TEST_TILE=1 -DCUCORE_TEST_NVVM=1" \
  "-l:libnvrtc.so.13 -l:libnvJitLink.so.13 -l:libnvvm.so.4"
case_version 12.9 "$r129/lib" "" "-l:libnvrtc.so.12 -l:libnvJitLink.so.12"
# The 12.9 program's NVRTC under cucore run is 12.9's, not the system's 13 (it prints "nvrtc 12").
expect "$(cd "$work" && LD_LIBRARY_PATH=$r129/lib "$cucore" run -- "$work/program-12.9" | head -1)" \
  "nvrtc 12" "12.9: NVRTC 12 under cucore run"

# A newer release than the drop-ins know.
mkdir -p "$work/future"
echo 'libnvrtc.so.13 { global: nvrtcVersion; nvrtcFutureFunction; local: *; };' >"$work/future.map"
"$cc" -shared -fPIC -fvisibility=hidden -o "$work/future/libnvrtc.so.13" -Wl,-soname,libnvrtc.so.13 \
  -Wl,--version-script="$work/future.map" "$here/future_library.c" || fail "building the future library"
"$cc" -o "$work/future-program" "$here/future_program.c" -L"$work/future" -l:libnvrtc.so.13 -Wl,-z,now ||
  fail "building the future program"
plain=$(LD_LIBRARY_PATH=$work/future "$work/future-program" 2>&1)
expect "$plain" "nvrtc 13.99 future 42" "future: the plain run"
under=$(CUCORE_LOG=warning LD_LIBRARY_PATH=$work/future "$cucore" run -- "$work/future-program" 2>"$work/err-future")
expect "$?" 0 "future: exit status under cucore run"
expect "$under" "$plain" "future: prints what the plain run prints"
expect "$(grep -c 'leaving out the drop-in libnvrtc.so.13: .*nvrtcFutureFunction' "$work/err-future")" 1 \
  "future: CUCORE_LOG says the NVRTC drop-in is left out"
# Without the check, the drop-in in the way: the program cannot start (what the check prevents).
CUCORE_RUN_LD_LIBRARY_PATH=$work/future LD_LIBRARY_PATH=$(dirname "$(readlink -f "$cucore")")/../lib/cucore-run:$work/future \
  "$work/future-program" >/dev/null 2>&1
expect "$?" 127 "future: with the drop-in in its way the program cannot start"
# cucore env makes the same check (for python3 and for any program the loader serves).
env_out=$(LD_LIBRARY_PATH=$work/future "$cucore" env)
expect "$(grep -c 'LD_PRELOAD=.*/libnvrtc.so.13' <<<"$env_out")" 0 "future: cucore env leaves out the NVRTC drop-in"
expect "$(grep -c 'LD_PRELOAD=.*/libnvJitLink.so.13' <<<"$env_out")" 1 "future: cucore env keeps the others"
(eval "$env_out" && "$work/future-program" >"$work/env-future" 2>&1)
expect "$?" 0 "future: the program runs in cucore env's environment"
expect "$(cat "$work/env-future")" "$plain" "future: prints what the plain run prints in cucore env's environment"
under=$(LD_LIBRARY_PATH=$work/future "$cucore" run -- "$work/future-program" 2>&1)
expect "$under" "$plain" "future: quiet without CUCORE_LOG"

[ "$failures" -eq 0 ] && echo "all passed" || echo "$failures failed"
[ "$failures" -eq 0 ]
