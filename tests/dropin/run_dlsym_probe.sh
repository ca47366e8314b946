#!/bin/bash
# The names a program finds by dlsym/dlvsym in each CUDA library are the real library's, plainly
# and under `cucore run` (docs/transparent-cache.md, "Exactly the real library's API"): for the
# 13.0 toolkit's NVRTC, nvJitLink and libNVVM and the 13.5 and 12.9 roots of
# scripts/fetch-cuda-versions.sh (a missing root fails with the command to run), every name any
# drop-in or the real library exports is probed both ways and the outputs compared line by line.
# Also `-z now` binding: a program linked against a name the real library lacks exits 127 plainly
# and under `cucore run` alike.
# Usage: run_dlsym_probe.sh CUCORE PROBE CC DROPIN_DIR REAL_NVRTC REAL_NVJITLINK REAL_NVVM SOURCE_DIR
#   (REAL_*: the 13.0 toolkit's libraries)
set -u
cucore=$1 probe=$2 cc=$3 dropins=$4 nvrtc13=$5 nvjitlink13=$6 nvvm13=$7 src=$8
if [ ! -x "$probe" ]; then
  echo "skipped: $probe is not built here (a build of selected targets)"
  exit 77
fi
versions=${CUCORE_CUDA_VERSIONS_DIR:-$src/.cache/cuda-versions}
work=$(mktemp -d "${TMPDIR:-/tmp}/cucore-dlsym-probe-XXXXXX")
export XDG_RUNTIME_DIR=$work/runtime  # the drop-in copies of this test, removed with it
mkdir -m 700 "$XDG_RUNTIME_DIR"
trap 'rm -rf "$work"' EXIT
failures=0
ok() { echo "ok: $1"; }
fail() { echo "FAILED: $1"; failures=$((failures + 1)); }
defined() {  # the defined dynamic names of a library
  objdump -T "$1" | awk '$0 !~ /\*UND\*/ && ($2 == "g" || $2 == "w") && $NF != $(NF - 1) { print $NF }'
}

case_version() {  # VERSION LIBDIRS SONAME VERSION_NODE REAL
  local version=$1 libdirs=$2 soname=$3 node=$4 real=$5
  if [ ! -f "$real" ]; then
    fail "$version $soname: no $real: run scripts/fetch-cuda-versions.sh (or set CUCORE_CUDA_VERSIONS_DIR)"
    return
  fi
  { defined "$dropins/$soname"; defined "$real"; } | sort -u >"$work/names"
  local plain under
  plain=$(cd "$work" && LD_LIBRARY_PATH=$libdirs "$probe" "$soname" "$node" <"$work/names" 2>"$work/plain-file")
  under=$(cd "$work" && CUCORE_CACHE_DIR=$work/cache LD_LIBRARY_PATH=$libdirs \
    "$cucore" run -- "$probe" "$soname" "$node" <"$work/names" 2>"$work/err")
  if [ "$plain" = "$under" ]; then
    ok "$version $soname: $(grep -c ' dlsym found' <<<"$plain") of $(wc -l <"$work/names") names found, the same under cucore run"
  else
    fail "$version $soname: the names found differ (plain < > cucore run):"
    diff <(echo "$plain") <(echo "$under") | head -20
    cat "$work/err"
  fi
  if grep -q 'leaving out' "$work/err"; then fail "$version $soname: a drop-in left out: $(cat "$work/err")"; fi
  # Plainly the probe opened the real library; under cucore run, a drop-in (in the runtime
  # directory's copies, or as built).
  grep -qxF "file $real" "$work/plain-file" ||
    fail "$version $soname: plainly the probe opened $(cat "$work/plain-file"), not $real"
  grep -qE "^file ($XDG_RUNTIME_DIR|$dropins)/" "$work/err" ||
    fail "$version $soname: under cucore run the probe opened $(grep ^file "$work/err"), not a drop-in"
}

r135=$versions/13.5/root r129=$versions/12.9/root
lib13="$(dirname "$nvrtc13"):$(dirname "$nvjitlink13"):$(dirname "$nvvm13")"
case_version 13.0 "$lib13" libnvrtc.so.13 libnvrtc.so.13 "$nvrtc13"
case_version 13.0 "$lib13" libnvJitLink.so.13 libnvJitLink.so.13 "$nvjitlink13"
case_version 13.0 "$lib13" libnvvm.so.4 - "$nvvm13"
case_version 13.5 "$r135/lib" libnvrtc.so.13 libnvrtc.so.13 "$r135/lib/libnvrtc.so.13"
case_version 13.5 "$r135/lib" libnvJitLink.so.13 libnvJitLink.so.13 "$r135/lib/libnvJitLink.so.13"
case_version 13.5 "$r135/lib" libnvvm.so.4 - "$r135/lib/libnvvm.so.4"
case_version 12.9 "$r129/lib:$r129/nvvm/lib64" libnvrtc.so.12 libnvrtc.so.12 "$r129/lib/libnvrtc.so.12"
case_version 12.9 "$r129/lib:$r129/nvvm/lib64" libnvJitLink.so.12 libnvJitLink.so.12 "$r129/lib/libnvJitLink.so.12"
case_version 12.9 "$r129/lib:$r129/nvvm/lib64" libnvvm.so.4 - "$r129/nvvm/lib64/libnvvm.so.4"

# -z now: a program that needs nvrtcGetTileIR (13.5) with 13.0's NVRTC fails to start, plainly and
# under cucore run, with the same status.
cat >"$work/needs_tile.c" <<'C'
#include <stddef.h>
int nvrtcGetTileIRSize(void* prog, size_t* size);
int main(void) { return nvrtcGetTileIRSize(NULL, NULL) == 0 ? 3 : 0; }
C
if "$cc" -o "$work/needs_tile" "$work/needs_tile.c" -L"$dropins" -l:libnvrtc.so.13 -Wl,-z,now 2>"$work/cc.err"; then
  (cd "$work" && LD_LIBRARY_PATH=$lib13 "$work/needs_tile" >/dev/null 2>&1)
  plain=$?
  (cd "$work" && CUCORE_CACHE_DIR=$work/cache LD_LIBRARY_PATH=$lib13 "$cucore" run -- "$work/needs_tile" >/dev/null 2>&1)
  under=$?
  [ "$plain" = 127 ] && [ "$under" = 127 ] && ok "-z now with a 13.5 name on 13.0: exit 127 both ways" ||
    fail "-z now with a 13.5 name on 13.0: plain exit $plain, under cucore run $under (want 127 both)"
else
  fail "building the -z now program: $(cat "$work/cc.err")"
fi
[ "$failures" = 0 ] && echo "dlsym probe: all equal" || { echo "dlsym probe: $failures failures"; exit 1; }
