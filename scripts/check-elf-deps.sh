#!/usr/bin/env bash
# Checks that every ELF file under DIR (an unpacked or installed cucore wheel) needs no shared
# library but glibc's, libstdc++ and libgcc_s (the portable wheel links everything else
# statically: docs/python.md, "A wheel that installs anywhere"), and that the drop-ins of
# `cucore run` (cucore/_lib/cucore-run/) resolve, under ldd, to nothing else either: a drop-in is
# preloaded into other programs and must bring no library of its own into them.
# Usage: scripts/check-elf-deps.sh DIR   (exit 1 naming each offending file and library)
set -euo pipefail
dir=${1:?usage: check-elf-deps.sh DIR}
allowed=" libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 ld-linux-x86-64.so.2 \
ld-linux-aarch64.so.1 libstdc++.so.6 libgcc_s.so.1 linux-vdso.so.1 "
bad=0
files=0
while IFS= read -r -d '' f; do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  files=$((files + 1))
  while read -r needed; do
    if [[ "$allowed" != *" $needed "* ]]; then
      echo "check-elf-deps: ${f#"$dir"/} needs $needed" >&2
      bad=1
    fi
  done < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done < <(find "$dir" -type f \( -name '*.so' -o -name '*.so.*' -o -perm -u+x -o -path '*/_bin/*' \) -print0)
if ((files == 0)); then
  echo "check-elf-deps: no ELF file under $dir" >&2
  exit 1
fi
# The drop-ins as the loader resolves them (ldd): each library from the system's glibc, libstdc++
# or libgcc_s, none from the wheel or elsewhere.
dropins=0
for f in "$dir"/cucore/_lib/cucore-run/*; do
  [ -f "$f" ] || continue
  dropins=$((dropins + 1))
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || { path=$name; name=$(basename "$name"); }
    case $name in linux-vdso.so.1 | "") continue ;; esac
    if [[ "$allowed" != *" $name "* ]]; then
      echo "check-elf-deps: ldd: ${f#"$dir"/} loads $name ($path)" >&2
      bad=1
    fi
  done < <(ldd "$f" | sed 's/ (0x[0-9a-f]*)//')
done
if ((dropins == 0)); then
  echo "check-elf-deps: no drop-in under $dir/cucore/_lib/cucore-run" >&2
  exit 1
fi
((bad == 0)) || exit 1
echo "check-elf-deps: $files ELF files, $dropins drop-ins: only glibc, libstdc++ and libgcc_s"
