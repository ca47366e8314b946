#!/usr/bin/env bash
# Fetches the real header libraries the corpus kernels of tests/data/corpus/ compile against
# (issue 19's differential oracle), from PyPI, pinned by version and sha256:
#   nvidia-cutlass 4.2.0.0  cutlass_library/source/include/{cutlass,cute}  -> DEST/cutlass/include
#   cupy-cuda13x 14.2.0     cupy/_core/include (CuPy's preamble headers and
#                           its bundled CCCL under cupy/_cccl/{cub,thrust,libcudacxx})
#                                                                    -> DEST/cupy/_core/include
# The CuPy tree keeps the wheel's layout below DEST/cupy, so the include directories are the ones
# CuPy 14 passes NVRTC: -I ${CUPY}/_core/include/cupy/_cccl/{cub,thrust,libcudacxx}
# -I ${CUPY}/_core/include (${CUPY} = DEST/cupy; see tests/data/corpus/corpus.json).
# The CuPy wheel is per Python version; the cp311 manylinux2014 x86_64 one is asked for by name
# (--python-version/--abi/--platform), so every machine gets the same bytes whatever its Python.
# Needs only python3 with pip (.venv/bin/python when present): pip download --no-deps, then
# Python's zipfile extracts the few directories named above (no unzip).
# Idempotent: when DEST holds a complete fetch of these pins it prints nothing and exits 0.
# Atomic: everything is extracted into a fresh directory beside DEST, then renamed into place.
# Usage: scripts/fetch-corpus.sh [DEST]   (default .cache/corpus, relative to the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.cache/corpus}
dest=${dest%/}

# The pins; the marker written last holds exactly this text.
pins='nvidia-cutlass==4.2.0.0 --hash=sha256:f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
cupy-cuda13x==14.2.0 --hash=sha256:f94843e54500a9c8c169135f79572bfaba946efe4f7178e834c227280c1b0c12'
marker=$dest/.cucore-corpus
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$pins" ]; then exit 0; fi

if [ -e "$dest" ] && [ ! -f "$marker" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
  echo "fetch-corpus: $dest exists and was not made by this script: name an empty or new" \
       "directory" >&2
  exit 1
fi

py=.venv/bin/python
[ -x "$py" ] || py=python3
echo "fetch-corpus: fetching nvidia-cutlass 4.2.0.0 and cupy-cuda13x 14.2.0 headers into $dest"
start=$SECONDS
mkdir -p "$(dirname "$dest")"
new="$dest.new.$$"
trap 'rm -rf "$new"' EXIT
mkdir -p "$new/wheels"
printf '%s\n' "$pins" >"$new/wheels/requirements.txt"
# --require-hashes (implied by the hashes) makes a substituted or re-uploaded wheel fail loudly.
"$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.11 --implementation cp --abi cp311 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  -d "$new/wheels" -r "$new/wheels/requirements.txt"

"$py" - "$new" <<'EOF'
import os, shutil, sys, zipfile
root = sys.argv[1]
wheels = os.path.join(root, "wheels")
# (wheel name prefix, member prefix in the wheel, destination under root)
plan = [
    ("nvidia_cutlass-4.2.0.0-", "cutlass_library/source/include/cutlass/", "cutlass/include/cutlass/"),
    ("nvidia_cutlass-4.2.0.0-", "cutlass_library/source/include/cute/", "cutlass/include/cute/"),
    ("nvidia_cutlass-4.2.0.0-", "nvidia_cutlass-4.2.0.0.dist-info/licenses/LICENSE.txt",
     "cutlass/LICENSE.txt"),
    ("cupy_cuda13x-14.2.0-", "cupy/_core/include/", "cupy/_core/include/"),
    ("cupy_cuda13x-14.2.0-", "cupy_cuda13x-14.2.0.dist-info/licenses/LICENSE", "cupy/LICENSE"),
]
names = os.listdir(wheels)
total = 0
for wheel_prefix, member_prefix, out_prefix in plan:
    found = [n for n in names if n.startswith(wheel_prefix) and n.endswith(".whl")]
    if len(found) != 1:
        sys.exit(f"fetch-corpus: expected one {wheel_prefix}*.whl, found {found}")
    count = 0
    with zipfile.ZipFile(os.path.join(wheels, found[0])) as z:
        for info in z.infolist():
            name = info.filename
            if info.is_dir() or not name.startswith(member_prefix):
                continue
            rel = out_prefix + name[len(member_prefix):]
            if ".." in rel.split("/"):
                sys.exit(f"fetch-corpus: refusing member {name}")
            out = os.path.join(root, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
            count += 1
    if count == 0:
        sys.exit(f"fetch-corpus: nothing under {member_prefix} in {found[0]}")
    total += count
for must in ["cutlass/include/cutlass/cutlass.h", "cutlass/include/cute/tensor.hpp",
             "cupy/_core/include/cupy/carray.cuh",
             "cupy/_core/include/cupy/_cccl/cub/cub/version.cuh",
             "cupy/_core/include/cupy/_cccl/thrust/thrust/version.h",
             "cupy/_core/include/cupy/_cccl/libcudacxx/cuda/std/version"]:
    if not os.path.isfile(os.path.join(root, must)):
        sys.exit(f"fetch-corpus: {must} missing after extraction")
print(f"fetch-corpus: extracted {total} files")
EOF

bytes=$(du -cb "$new"/wheels/*.whl | tail -1 | cut -f1)
rm -rf "$new/wheels"
printf '%s\n' "$pins" >"$new/.cucore-corpus"
rm -rf "$dest"
mv "$new" "$dest"
trap - EXIT
echo "fetch-corpus: done in $((SECONDS - start)) s ($((bytes / 1048576)) MiB of wheels downloaded)"
