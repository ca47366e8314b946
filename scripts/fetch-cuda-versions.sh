#!/usr/bin/env bash
# The NVRTC version matrix (docs/development.md, "NVRTC versions"): installs each pinned set of
# NVIDIA wheels in scripts/cuda-versions/VERSION.txt into DIR/VERSION/site and makes
# DIR/VERSION/root, a toolkit root cucore can be pointed at (CUCORE_CUDA_HOME=DIR/VERSION/root
# CUCORE_CUDA_HOME_ONLY=1): lib/ with NVRTC and nvJitLink, nvvm/ with libNVVM and libdevice,
# include/ with the CUDA headers and include/cccl/ with CCCL.
# - CUDA 13 wheels all install into nvidia/cu13, already laid out as such a root: root is a link to it.
# - CUDA 12 wheels install one directory per package (nvidia/cuda_nvrtc, nvidia/nvjitlink,
#   nvidia/cuda_nvcc, ...): root is assembled from links into them.
# The toolkit in /usr/local/cuda (13.0) is the matrix's third version and needs nothing here.
# Idempotent and reusable between clones (like .cache/cuda-wheels): a version whose pins did not
# change is left as it is; an interrupted run leaves nothing that looks finished.
# Usage: scripts/fetch-cuda-versions.sh [DIR]   (default .cache/cuda-versions; prints nothing when
# everything is in place)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.cache/cuda-versions}
py=.venv/bin/python
[ -x "$py" ] || py=python3
mkdir -p "$dir"
dir=$(cd "$dir" && pwd -P)

# Links each entry of the directories after the first into the first (a merged include/ or lib/).
link_entries() {
  local into=$1 from entry
  shift
  mkdir -p "$into"
  for from in "$@"; do
    [ -d "$from" ] || continue
    for entry in "$from"/*; do
      [ -e "$entry" ] || continue
      case $(basename "$entry") in __init__.py | __pycache__) continue ;; esac
      ln -sfn "$entry" "$into/$(basename "$entry")"
    done
  done
}

for requirements in scripts/cuda-versions/*.txt; do
  version=$(basename "$requirements" .txt)
  target=$dir/$version
  stamp=$target/.cucore-version
  if [ -f "$stamp" ] && cmp -s "$stamp" "$requirements" && [ -e "$target/root/include/nvrtc.h" ]; then
    continue
  fi
  echo "setup: installing NVRTC $version's wheels into $target (the version matrix)"
  new=$target.new.$$
  rm -rf "$new"
  mkdir -p "$new"
  trap 'rm -rf "$new"' EXIT
  "$py" -m pip install -q --disable-pip-version-check --no-deps --target "$new/site" \
    -r "$requirements"
  site=$new/site/nvidia
  if [ -d "$site/cu13" ]; then
    ln -sfn site/nvidia/cu13 "$new/root"
  else
    # Relative links inside the version's directory: the root stays valid when DIR moves.
    root=$new/root
    mkdir -p "$root"
    link_entries "$root/lib" "$site/cuda_nvrtc/lib" "$site/nvjitlink/lib"
    link_entries "$root/include" "$site/cuda_runtime/include" "$site/cuda_nvcc/include" \
      "$site/cuda_nvrtc/include" "$site/nvjitlink/include"
    ln -sfn "$site/cuda_cccl/include" "$root/include/cccl"
    # libNVVM's file is libnvvm.so in the wheel (soname libnvvm.so.4): the toolkit's name beside it.
    link_entries "$root/nvvm" "$site/cuda_nvcc/nvvm"
    rm -f "$root/nvvm/lib64"
    link_entries "$root/nvvm/lib64" "$site/cuda_nvcc/nvvm/lib64"
    ln -sfn libnvvm.so "$root/nvvm/lib64/libnvvm.so.4"
    # Absolute links name $new: make them relative to the version's directory.
    while IFS= read -r link; do
      destination=$(readlink "$link")
      case $destination in
        "$new"/*) ln -sfn "$(realpath --relative-to="$(dirname "$link")" -m "$destination")" "$link" ;;
      esac
    done < <(find "$root" -type l)
  fi
  lib=$(ls "$new"/root/lib/libnvrtc.so.* 2>/dev/null | head -1)
  if [ -z "$lib" ] || [ ! -f "$new/root/include/nvrtc.h" ]; then
    echo "fetch-cuda-versions: the wheels of $requirements made no root with lib/libnvrtc.so.N" \
         "and include/nvrtc.h" >&2
    exit 1
  fi
  cp "$requirements" "$new/.cucore-version"
  rm -rf "$target"
  mv "$new" "$target"
  trap - EXIT
done
