#!/bin/bash
# A drop-in covers the real library: every dynamic symbol the real library exports, the drop-in
# exports too, with the same version node, and the soname is the same. The drop-in may export more
# (the union over every release of its major, scripts/gen-dropin-api.py).
# Usage: check_exports.sh REAL DROPIN SOURCE_DIR
#   REAL: a path, or VERSION:PATH inside VERSION's toolkit root (scripts/fetch-cuda-versions.sh:
#   $CUCORE_CUDA_VERSIONS_DIR/VERSION/root, default SOURCE_DIR/.cache/cuda-versions/VERSION/root).
set -u
real=$1 dropin=$2
case "$real" in
  [0-9]*:*)
    version=${real%%:*}
    root=${CUCORE_CUDA_VERSIONS_DIR:-$3/.cache/cuda-versions}/$version/root
    real=$root/${real#*:}
    if [ ! -f "$real" ]; then
      echo "FAILED: no $real: run scripts/fetch-cuda-versions.sh (or set CUCORE_CUDA_VERSIONS_DIR)"
      exit 1
    fi
    ;;
esac
exports() {
  objdump -T "$1" | awk '$0 !~ /\*UND\*/ && ($2 == "g" || $2 == "w") { print $NF, $(NF - 1) }' |
    sort
}
soname() { objdump -p "$1" | awk '$1 == "SONAME" { print $2 }'; }
status=0
missing=$(comm -23 <(exports "$real") <(exports "$dropin"))
if [ -z "$missing" ]; then
  echo "ok: the drop-in's $(exports "$dropin" | wc -l) exports cover the $(exports "$real" | wc -l) of $real"
else
  echo "FAILED: $real exports what the drop-in does not (name, version):"
  echo "$missing"
  status=1
fi
if [ "$(soname "$real")" = "$(soname "$dropin")" ]; then
  echo "ok: soname $(soname "$dropin")"
else
  echo "FAILED: soname $(soname "$dropin"), want $(soname "$real")"
  status=1
fi
exit $status
