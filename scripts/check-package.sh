#!/usr/bin/env bash
# Installs a built tree into a scratch prefix and builds a consumer against it twice: through
# find_package(cucore CONFIG) and through pkg-config. Usage: scripts/check-package.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/default}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

cmake --install "$build" --prefix "$stage/prefix" >/dev/null
cmake -S tests/package -B "$stage/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$stage/prefix" >/dev/null
cmake --build "$stage/consumer" >/dev/null
"$stage/consumer/package_consumer"

PKG_CONFIG_PATH="$stage/prefix/lib/pkgconfig" \
  c++ -o "$stage/pc_consumer" tests/package/consumer.cpp \
  $(PKG_CONFIG_PATH="$stage/prefix/lib/pkgconfig" pkg-config --cflags --libs --static cucore)
"$stage/pc_consumer"
echo "package: find_package and pkg-config consumers built and ran"
