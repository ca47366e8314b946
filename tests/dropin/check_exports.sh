#!/bin/bash
# A drop-in exports exactly the real library's dynamic symbols, with the same version nodes and
# soname. Usage: check_exports.sh REAL DROPIN
set -u
exports() {
  objdump -T "$1" | awk '$0 !~ /\*UND\*/ && ($2 == "g" || $2 == "w") { print $NF, $(NF - 1) }' |
    sort
}
soname() { objdump -p "$1" | awk '$1 == "SONAME" { print $2 }'; }
status=0
if diff <(exports "$1") <(exports "$2"); then
  echo "ok: $(exports "$2" | wc -l) exported symbols and versions equal the real library's"
else
  echo "FAILED: exported symbols differ (< real, > drop-in)"
  status=1
fi
if [ "$(soname "$1")" = "$(soname "$2")" ]; then
  echo "ok: soname $(soname "$2")"
else
  echo "FAILED: soname $(soname "$2"), want $(soname "$1")"
  status=1
fi
exit $status
