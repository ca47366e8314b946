#!/bin/bash
# What NVRTC/nvJitLink 13.3+ programs ask for, answered from the cache under `cucore run`
# (docs/transparent-cache.md, "What is cached"), with CUDA 13.5's libraries (the root of
# scripts/fetch-cuda-versions.sh; missing: the test fails with the command to run):
# - a C program built against 13.5's headers (tile_program.c): Tile code under -enable-tile,
#   --enable-tile, -tile-only, -simt-only, -enable-tile -dlto (Tile IR, PTX, cubin, LTO-IR, lowered
#   names), the Tile IR of a compile without Tile code, --use-bundled-headers=DIR, and nvJitLink
#   -lto links' linked LTO-IR: run 1 and run 2 print what the plain run prints, run 2 all hits;
#   the bundled directory removed: a hit that leaves DIR installed; a header there edited: a miss;
# - cuda.core with ProgramOptions(use_bundled_headers=True) and the 13.5 wheels: the plain run's
#   cubin, a miss then a hit, and a hit with the headers' directory removed reinstalls it.
# Usage: run_tile_bundled.sh CUCORE CC PYTHON SOURCE_DIR
set -u
cucore=$1 cc=$2 python=$3 src=$4
here=$(cd "$(dirname "$0")" && pwd)
versions=${CUCORE_CUDA_VERSIONS_DIR:-$src/.cache/cuda-versions}
. "$(dirname "$0")/checks.sh"
work_dir cucore-run-tile
unset CUCORE_LOG CUCORE_RUN_CACHE CUCORE_REMOTE_CACHE CUCORE_RUN_NVRTC CUCORE_RUN_LD_LIBRARY_PATH
unset VIRTUAL_ENV CONDA_PREFIX CUDA_PATH CUDA_HOME LD_LIBRARY_PATH
root=$versions/13.5/root
if [ ! -d "$root" ] || [ ! -d "$versions/13.5/site/nvidia" ]; then
  bad "no $versions/13.5: run scripts/fetch-cuda-versions.sh (or set CUCORE_CUDA_VERSIONS_DIR)"
  exit 1
fi

# --- the C program --------------------------------------------------------------------------
prog=$work/tile-program
"$cc" -std=c11 -Wall -Wextra -Werror -I"$root/include" -o "$prog" "$here/tile_program.c" \
  -L"$root/lib" -l:libnvrtc.so.13 -l:libnvJitLink.so.13 -Wl,-z,now -Wl,-rpath-link,"$root/lib" ||
  bad "building the program"
run() {  # NAME CACHE-DIR ARGS... (under cucore run; stderr in $work/err-NAME)
  local name=$1 cache=$2
  shift 2
  (cd "$work" && CUCORE_LOG=info CUCORE_CACHE_DIR=$cache LD_LIBRARY_PATH=$root/lib \
    "$cucore" run -- "$prog" "$root/include" "$@" 2>"$work/err-$name")
}
count() { grep -c "info: $1 " "$work/err-$2"; }
plain=$(cd "$work" && LD_LIBRARY_PATH=$root/lib "$prog" "$root/include" "$work/bh-plain")
expect "$?" 0 "the plain run"
# Every output the plain run reads is there (the Tile IR of a Tile compile is not empty).
expect "$(grep -c '^  tile-ir 0 [1-9][0-9]* 0 ' <<<"$plain")" 8 "the plain run has Tile IR where it asked for Tile code"
run1=$(run 1 "$work/cache" "$work/bh")
run2=$(run 2 "$work/cache" "$work/bh")
expect "$run1" "$plain" "run 1 prints what the plain run prints"
expect "$run2" "$plain" "run 2 prints what the plain run prints"
# 7 compiles (-enable-tile and --enable-tile share an entry, the second a hit) and 2 links.
expect "$(count miss 1) $(count hit 1)" "9 1" "run 1: misses (the second spelling of -enable-tile hits)"
expect "$(count hit 2) $(count miss 2) $(count bypass 2)" "10 0 0" "run 2: all hits, no bypass"
# The Tile compiles' keys carry the Tile marker: another key than the same options would have had
# before (tested by cucore key through the library: tile_test); here, that the record answers.
rm -rf "$work/bh"
run3=$(run 3 "$work/cache" "$work/bh" bundled)
expect "$(count hit 3)" 1 "bundled directory removed: a hit"
expect "$(grep -c . <<<"$run3")" 7 "bundled directory removed: the outputs"
[ -f "$work/bh/.nvrtc_headers_version" ] && [ -f "$work/bh/cccl/cuda/std/complex" ] &&
  ok "bundled directory removed: the hit installed it again" ||
  bad "bundled directory removed: the hit left no installed headers"
echo "// edited" >>"$work/bh/cccl/cuda/std/complex"
run4=$(run 4 "$work/cache" "$work/bh" bundled)
expect "$(count miss 4)" 1 "a bundled header edited: a miss"
expect "$run4" "$run3" "a bundled header edited (a comment): the same outputs"
run5=$(run 5 "$work/cache" "bh-relative" bundled)
expect "$(grep -c 'info: bypass .*not an absolute' "$work/err-5")" 1 "a relative directory: bypassed"
expect "$run5" "$run3" "a relative directory: the same outputs"

# --- cuda.core, use_bundled_headers=True ---------------------------------------------------
venv=$work/venv
make_venv "$python" "$venv" "$versions/13.5/site/nvidia" || bad "python -m venv"
py() {  # NAME [cucore]
  local name=$1
  shift
  (cd "$work" && HOME=$work/home XDG_CACHE_HOME=$work/xdg CUCORE_LOG=info "$@" \
    "$venv/bin/python" "$here/cuda_core_bundled.py" 2>"$work/err-$name")
}
plain=$(py plain)
expect "$?" 0 "cuda.core: the plain run"
expect "$(cut -d' ' -f1 <<<"$plain")" cubin "cuda.core: the plain run compiled"
rm -rf "$work/xdg"
under=("$cucore" run --cache "dir:$work/pycache" --)
expect "$(py p1 "${under[@]}")" "$plain" "cuda.core: run 1 prints what the plain run prints"
expect "$(py p2 "${under[@]}")" "$plain" "cuda.core: run 2 prints what the plain run prints"
expect "$(count miss p1) $(count hit p2)" "1 1" "cuda.core: a miss, then a hit"
rm -rf "$work/xdg"
expect "$(py p3 "${under[@]}")" "$plain" "cuda.core: headers removed, run 3 prints the same"
expect "$(count hit p3)" 1 "cuda.core: headers removed: a hit"
[ -n "$(find "$work/xdg" -name complex -path '*cuda/std*' 2>/dev/null)" ] &&
  ok "cuda.core: headers removed: installed again" || bad "cuda.core: headers removed: not installed"

finish
