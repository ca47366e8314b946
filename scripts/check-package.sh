#!/usr/bin/env bash
# Installs a built tree into a scratch prefix and builds a consumer against it twice: through
# find_package(cucore CONFIG) and through pkg-config. Usage: scripts/check-package.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache-env.sh
build=${1:-build/default}
# Inside the checkout at a fixed path, so that the consumers' compiles hit the compiler cache from
# any clone (scripts/ccache-env.sh); removed afterwards.
stage=$PWD/build/check-package
rm -rf "$stage"
trap 'rm -rf "$stage"' EXIT
launcher=()
if [ -n "${CCACHE_BASEDIR:-}" ]; then launcher=(ccache); fi

cmake --install "$build" --prefix "$stage/prefix" >/dev/null
cmake -S tests/package -B "$stage/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$stage/prefix" \
  ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER=ccache} >/dev/null
cmake --build "$stage/consumer" >/dev/null
"$stage/consumer/package_consumer"

# Compiled with the Cflags, linked with the Libs (two steps: a compile that also links is not
# cached).
export PKG_CONFIG_PATH="$stage/prefix/lib/pkgconfig"
"${launcher[@]}" c++ -c -o "$stage/pc_consumer.o" tests/package/consumer.cpp \
  $(pkg-config --cflags cucore)
c++ -o "$stage/pc_consumer" "$stage/pc_consumer.o" $(pkg-config --libs --static cucore)
"$stage/pc_consumer"
echo "package: find_package and pkg-config consumers built and ran"
