#!/bin/bash
# The real NVRTC a drop-in forwards to is the one the program would have loaded without `cucore
# run` (docs/transparent-cache.md, "Which real library"), not the first toolkit cucore's own search
# finds: an unmodified cuda.core program, with $CUDA_HOME naming another toolkit each time,
#   1. in a venv that is not activated, with NVIDIA's NVRTC wheel in its site-packages
#      (cuda.pathfinder takes the wheel);
#   2. with no wheel and its LD_LIBRARY_PATH naming a directory that holds NVRTC (the loader's
#      search finds it before $CUDA_HOME).
# The NVRTC "files" are links to (or copies of) the file the program loads by itself, at other
# paths, so /proc/self/maps tells which one compiled. Each case runs the program without cucore,
# then twice under `cucore run` (misses, then hits): same outputs, same NVRTC file.
# Usage: run_real_library.sh CUCORE PYTHON PROGRAM
set -u
cucore=$1 python=$2 program=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/cucore-run-real-library-XXXXXX")
trap 'rm -rf "$work"' EXIT
unset CUCORE_LOG CUCORE_RUN_CACHE CUCORE_REMOTE_CACHE CUCORE_RUN_NVRTC CUCORE_RUN_LD_LIBRARY_PATH
unset VIRTUAL_ENV CONDA_PREFIX CUDA_PATH LD_LIBRARY_PATH
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAILED: $*"; fail=$((fail + 1)); }
expect() { if [ "$1" = "$2" ]; then ok "$3 ($1)"; else bad "$3: got '$1', want '$2'"; fi; }

# The NVRTC the program loads by itself, and the toolkit root it belongs to.
own=$("$python" -c "from cuda.pathfinder import load_nvidia_dynamic_lib as load
print(load('nvrtc').abs_path)") || { echo "cuda.pathfinder cannot load NVRTC"; exit 1; }
own_dir=$(dirname "$(realpath "$own")")
# A toolkit that is not the program's: $CUDA_HOME must lose to the program's own choice.
export CUDA_HOME=$(dirname "$own_dir")
# NVRTC (and its builtins, which it opens from its own directory) at another path: copies, not
# hard links (a new link changes the real library's ctime, which tests running beside this one
# see as their compiler's builtins changing during a compile: the store check refuses to store).
place_nvrtc() {
  mkdir -p "$1"
  cp -a "$own_dir"/libnvrtc.so.13* "$own_dir"/libnvrtc-builtins.so.13* "$1"/
}
mapped_file() { realpath "$1"/libnvrtc.so.13; }

# Runs the program plainly and twice under `cucore run`; `want` is the NVRTC file that must
# compile in all three. Extra arguments: the environment (VAR=VALUE ...) and the Python.
check_case() {
  local name=$1 want=$2 py=$3
  shift 3
  local out=$work/$name
  mkdir -p "$out"
  env "$@" "$py" "$program" >"$out/plain" 2>"$out/plain.err" ||
    { bad "$name: without cucore run"; cat "$out/plain.err"; return; }
  expect "$(sed -n 's/^real nvrtc: //p' "$out/plain")" "$want" "$name: without cucore run, NVRTC"
  sed -i '/^nvrtc: /d' "$out/plain"
  local run
  for run in 1 2; do
    env "$@" CUCORE_LOG=info "$cucore" run --cache "dir:$out/cache" -- "$py" "$program" \
      >"$out/run$run" 2>"$out/run$run.err" || { bad "$name: run $run"; cat "$out/run$run.err"; }
    sed -i '/^nvrtc: /d' "$out/run$run"
    cmp -s "$out/plain" "$out/run$run" && ok "$name: run $run's outputs and NVRTC file equal the plain run's" ||
      { bad "$name: run $run differs from the plain run"; diff "$out/plain" "$out/run$run" | head -5; }
  done
  expect "$(grep -c 'info: miss ' "$out/run1.err")" 5 "$name: run 1, misses"
  expect "$(grep -c 'info: hit ' "$out/run2.err")" 5 "$name: run 2, hits"
}

# 1. A venv, not activated, with NVIDIA's wheel (nvidia/cu13/lib) in its site-packages beside the
# packages the program imports (linked from the test's Python environment, as pip would install
# them into the venv).
"$python" -m venv --without-pip "$work/venv" || { echo "python -m venv failed"; exit 1; }
site=$("$work/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
base_site=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
for entry in "$base_site"/*; do
  [ -e "$site/$(basename "$entry")" ] || ln -s "$entry" "$site/"
done
if [ -e "$base_site/nvidia" ]; then
  echo "note: $base_site already has NVIDIA wheels; the venv's are linked from it"
else
  place_nvrtc "$site/nvidia/cu13/lib"
fi
check_case venv-wheel "$(mapped_file "$site/nvidia/cu13/lib")" "$work/venv/bin/python"

# 2. No wheel; the program's LD_LIBRARY_PATH names a directory with NVRTC.
if [ -e "$base_site/nvidia/cu13/lib/libnvrtc.so.13" ]; then
  echo "skipped: the loader-path case (the test's Python has NVIDIA's wheel, which comes first)"
else
  place_nvrtc "$work/lib"
  check_case loader-path "$(mapped_file "$work/lib")" "$python" LD_LIBRARY_PATH="$work/lib"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
