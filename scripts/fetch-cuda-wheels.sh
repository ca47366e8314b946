#!/usr/bin/env bash
# Installs NVIDIA's CUDA 13.5 wheels (scripts/cuda-wheels.txt) into a directory that then works as
# a site-packages directory for cucore's library discovery (its nvidia/cu13 is a toolkit root):
# point CUCORE_CUDA_WHEELS at it, or leave it at the default .cache/cuda-wheels, which the build
# searches (cmake/cucore_cuda_headers.cmake). Idempotent: a second run with the same pins does
# nothing. Usage: scripts/fetch-cuda-wheels.sh [dir]   (default .cache/cuda-wheels; needs .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.cache/cuda-wheels}
requirements=scripts/cuda-wheels.txt
stamp=$dir/.cucore-wheels
if [ -f "$stamp" ] && cmp -s "$stamp" "$requirements"; then exit 0; fi
py=.venv/bin/python
[ -x "$py" ] || py=python3
echo "setup: installing NVIDIA's CUDA 13.5 wheels into $dir (no CUDA toolkit needed)"
if [ -e "$dir" ] && [ ! -f "$stamp" ] && [ -n "$(ls -A "$dir")" ]; then
  echo "fetch-cuda-wheels: $dir exists and was not made by this script: name an empty or new" \
       "directory" >&2
  exit 1
fi
# Into a fresh directory beside it, moved into place when complete: an interrupted run leaves
# nothing that looks finished.
new="$dir.new.$$"
trap 'rm -rf "$new"' EXIT
mkdir -p "$new"
# --target: a plain directory, not an environment; --no-deps: the pins are the whole set.
"$py" -m pip install -q --disable-pip-version-check --no-deps --target "$new" -r "$requirements"
if [ ! -f "$new/nvidia/cu13/lib/libnvrtc.so.13" ]; then
  echo "fetch-cuda-wheels: the wheels did not install nvidia/cu13/lib/libnvrtc.so.13" >&2
  exit 1
fi
cp "$requirements" "$new/.cucore-wheels"
rm -rf "$dir"
mv "$new" "$dir"
