#!/bin/bash
# cuda-bindings programs with NVIDIA's wheels of CUDA 13.5 (calling what 13.1+ and 13.3+ added) and
# of CUDA 12.9 (libnvrtc.so.12, which cuda.pathfinder finds after probing for a loaded .so.13) in a
# venv, under `cucore run`: the plain run's outputs, the compile a hit on the second run, and the
# CUDA 12 program compiled by NVRTC 12, not captured by the preloaded 13 drop-in.
# Usage: run_python_versions.sh CUCORE PYTHON PROGRAM SOURCE_DIR
set -u
cucore=$1 python=$2 program=$3 src=$4
versions=${CUCORE_CUDA_VERSIONS_DIR:-$src/.cache/cuda-versions}
. "$(dirname "$0")/checks.sh"
work_dir cucore-run-pyversions
unset CUCORE_LOG CUCORE_RUN_CACHE CUCORE_REMOTE_CACHE CUCORE_RUN_NVRTC CUCORE_RUN_LD_LIBRARY_PATH
unset VIRTUAL_ENV CONDA_PREFIX CUDA_PATH CUDA_HOME LD_LIBRARY_PATH

check() {  # VERSION PROGRAM-ARGS...
  local version=$1
  shift
  if [ ! -d "$versions/$version/site/nvidia" ]; then
    bad "$version: no $versions/$version/site: run scripts/fetch-cuda-versions.sh (or set CUCORE_CUDA_VERSIONS_DIR)"
    return
  fi
  local venv=$work/venv-$version
  make_venv "$python" "$venv" "$versions/$version/site/nvidia" ||
    { bad "$version: python -m venv"; return; }
  local plain run1 run2
  plain=$(cd "$work" && "$venv/bin/python" "$program" "$@" 2>&1)
  expect "$?" 0 "$version: the plain run"
  run1=$(cd "$work" && CUCORE_LOG=info "$cucore" run --cache "dir:$work/cache-$version" -- \
    "$venv/bin/python" "$program" "$@" 2>"$work/err1-$version")
  run2=$(cd "$work" && CUCORE_LOG=info "$cucore" run --cache "dir:$work/cache-$version" -- \
    "$venv/bin/python" "$program" "$@" 2>"$work/err2-$version")
  expect "$run1" "$plain" "$version: run 1 prints what the plain run prints"
  expect "$run2" "$plain" "$version: run 2 prints what the plain run prints"
  expect "$(grep -c 'info: miss ' "$work/err1-$version")" 1 "$version: run 1 misses"
  expect "$(grep -c 'info: hit ' "$work/err2-$version")" 1 "$version: run 2 hits"
  [ "$fail" -eq 0 ] || { cat "$work/err1-$version"; echo "$plain"; }
}
check 13.5 --new
check 12.9
expect "$(sed -n 's/^nvrtc //p' <<<"$(cd "$work" && "$cucore" run -- "$work/venv-12.9/bin/python" "$program")")" 12 \
  "12.9: NVRTC 12 under cucore run"
finish
