#!/bin/bash
# An unmodified cuda.core program (tests/dropin/cuda_core_program.py) on each NVRTC users get from
# PyPI, under `cucore run` with nothing but the program named (no --nvrtc):
#   12.9: cuda.core with cuda-bindings 12.9 and the -cu12 wheels (a CUDA 12 program: it loads
#         libnvrtc.so.12 and must get NVRTC 12, not the 13 drop-in's real library);
#   13.5: cuda.core with cuda-bindings 13.5 (.venv's) and the 13.5 wheels.
# Each in a venv made of the base interpreter's packages and the version's site
# (scripts/fetch-cuda-versions.sh). Checked: the program loads the drop-in of its own major, the
# real NVRTC that compiles is the one the plain run uses, every output equals the plain run's, the
# first run misses every compile and the second hits every one.
# Usage: run_cuda_core_versions.sh CUCORE PYTHON PROGRAM SOURCE_DIR
set -u
cucore=$1 python=$2 program=$3 src=$4
versions=${CUCORE_CUDA_VERSIONS_DIR:-$src/.cache/cuda-versions}
. "$(dirname "$0")/checks.sh"
work_dir cucore-run-cuda-core-versions
unset CUCORE_LOG CUCORE_RUN_CACHE CUCORE_REMOTE_CACHE CUCORE_RUN_NVRTC CUCORE_RUN_NVRTC12
unset CUCORE_RUN_LD_LIBRARY_PATH VIRTUAL_ENV CONDA_PREFIX CUDA_PATH CUDA_HOME LD_LIBRARY_PATH
base_site=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")

check() {  # VERSION SONAME
  local version=$1 soname=$2
  local vsite=$versions/$version/site
  if [ ! -d "$vsite/nvidia" ]; then
    bad "$version: no $vsite: run scripts/fetch-cuda-versions.sh (or set CUCORE_CUDA_VERSIONS_DIR)"
    return
  fi
  # The version's own cuda.core/cuda-bindings where its site has them (12.9), else the base's.
  local own_cuda=0
  [ -d "$vsite/cuda/bindings" ] && own_cuda=1
  local venv=$work/venv-$version site entry name
  "$python" -m venv --without-pip "$venv" || { bad "$version: python -m venv"; return; }
  site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  for entry in "$base_site"/*; do
    name=$(basename "$entry")
    case $name in
      nvidia | __pycache__) continue ;;
      cuda | cuda_* | _cuda_bindings_redirector*) ((own_cuda)) && continue ;;
    esac
    ln -s "$entry" "$site/$name"
  done
  for entry in "$vsite"/*; do
    name=$(basename "$entry")
    case $name in
      __pycache__ | nvidia_*) continue ;;
      nvidia) ;;
      *) ((own_cuda)) || continue ;;
    esac
    ln -s "$entry" "$site/$name"
  done
  local out=$work/$version
  mkdir -p "$out"
  if (cd "$work" && "$venv/bin/python" "$program") >"$out/plain.out" 2>"$out/plain.err"; then
    ok "$version: the plain run"
  else
    bad "$version: the plain run"
    cat "$out/plain.err"
    return
  fi
  local real compiles
  real=$(sed -n 's/^real nvrtc: //p' "$out/plain.out")
  expect "$(basename "$real")" "$soname" "$version: the plain run's NVRTC"
  compiles=$(grep -c '^{' "$out/plain.out")
  for run in 1 2; do
    if (cd "$work" && CUCORE_LOG=info "$cucore" run --cache "dir:$work/cache-$version" -- \
      "$venv/bin/python" "$program") >"$out/run$run.out" 2>"$out/run$run.err"; then
      ok "$version: run $run under cucore run"
    else
      bad "$version: run $run under cucore run"
      cat "$out/run$run.err"
      continue
    fi
    local loaded
    loaded=$(sed -n 's/^nvrtc: //p' "$out/run$run.out")
    expect "$(basename "$(dirname "$loaded")")/$(basename "$loaded")" "cucore-run/$soname" \
      "$version: run $run: the drop-in cuda.core loaded"
    expect "$(sed -n 's/^real nvrtc: //p' "$out/run$run.out")" "$real" \
      "$version: run $run: the NVRTC that compiled"
    cmp -s <(grep '^{' "$out/plain.out") <(grep '^{' "$out/run$run.out") &&
      ok "$version: run $run: outputs equal the plain run's" ||
      bad "$version: run $run: outputs differ from the plain run's"
  done
  expect "$(grep -c 'info: miss ' "$out/run1.err")" "$compiles" "$version: run 1: misses"
  expect "$(grep -c 'info: hit ' "$out/run2.err")" "$compiles" "$version: run 2: hits"
  expect "$(grep -c 'info: miss ' "$out/run2.err")" 0 "$version: run 2: misses"
}

check 12.9 libnvrtc.so.12
check 13.5 libnvrtc.so.13
finish
