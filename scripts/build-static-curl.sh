#!/usr/bin/env bash
# Builds a static libcurl for the portable Python wheel (scripts/build-wheel.sh; docs/python.md,
# "A wheel that installs anywhere"): Debian's libcurl.a cannot be linked statically on its own (it
# needs nghttp2, libssh2, librtmp, libpsl, GSSAPI and LDAP, which Debian ships only as shared
# libraries), so this builds libcurl from Debian's own source package (the same version and
# security patches as the system's libcurl4-openssl-dev, fetched with `apt-get source` through a
# private source list: the machine's apt configuration is not touched) with HTTP and HTTPS only,
# TLS from OpenSSL's static libcrypto.a/libssl.a (libssl-dev), and no other dependency.
#
# Installs into DIR/curl-VERSION-RECIPE (include/, lib/libcurl.a; RECIPE: a hash of this script) and prints that directory on stdout.
# Idempotent: a finished build of the same version is reused (DIR is kept outside the clone, like
# the compiler cache, so CI's fresh clones reuse it). Compiles through ccache.
# Usage: scripts/build-static-curl.sh [DIR]   (default: ${XDG_CACHE_HOME:-~/.cache}/cucore-wheel-deps)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/cucore-wheel-deps}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# The version of libcurl4-openssl-dev installed (scripts/setup.sh), e.g. 7.88.1-10+deb12u15.
version=$(dpkg-query -W -f='${Version}' libcurl4-openssl-dev 2>/dev/null) || version=""
if [ -z "$version" ]; then
  echo "build-static-curl: libcurl4-openssl-dev is not installed: run scripts/setup.sh" >&2
  exit 1
fi
# A change to this script (its options) is a new build beside the old one.
recipe=$(sha256sum "$0" | cut -c1-12)
prefix=$dir/curl-$version-$recipe
if [ -f "$prefix/.complete" ]; then
  echo "$prefix"
  exit 0
fi
for tool in dpkg-source cmake ninja; do
  command -v "$tool" >/dev/null || {
    echo "build-static-curl: $tool is not installed: run scripts/setup.sh" >&2
    exit 1
  }
done
for archive in libssl.a libcrypto.a; do
  [ -f "/usr/lib/$(gcc -dumpmachine)/$archive" ] || {
    echo "build-static-curl: /usr/lib/$(gcc -dumpmachine)/$archive is missing: install libssl-dev" >&2
    exit 1
  }
done

work=$(mktemp -d "$dir/.curl-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "build-static-curl: fetching Debian's source of curl $version" >&2
# A private apt state: Debian's source index (deb-src) for this release, in $work only.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [ -z "$codename" ]; then
  echo "build-static-curl: no VERSION_CODENAME in /etc/os-release (not Debian?)" >&2
  exit 1
fi
mkdir -p "$work/apt/lists/partial" "$work/apt/parts" "$work/src"
cat >"$work/apt/parts/debian-src.sources" <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $codename $codename-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: $codename-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt_options=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/apt/parts"
             -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
             -o APT::Sandbox::User=root)
apt-get "${apt_options[@]}" -qq update >/dev/null
(cd "$work/src" && apt-get "${apt_options[@]}" -qq source --download-only "curl=$version" >/dev/null)
# Unpacks the upstream tarball and applies Debian's patches.
(cd "$work/src" && dpkg-source -x --no-check ./curl_*.dsc curl >/dev/null)

echo "build-static-curl: building a static libcurl (HTTP and HTTPS, OpenSSL) into $prefix" >&2
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache); fi
# Only what the HTTP cache tier uses: http and https (HTTP_ONLY), no compression, IDN, PSL, SSH,
# HTTP/2, GSSAPI or LDAP (each would be one more library to link). Certificates: OpenSSL's default
# locations (CURL_CA_FALLBACK; SSL_CERT_FILE and SSL_CERT_DIR override them), not a path of the
# build machine's. OpenSSL's configuration file is not loaded (CURL_DISABLE_OPENSSL_AUTO_LOAD_CONFIG):
# the host's could name engines or providers built against its own shared libcrypto.
cmake -S "$work/src/curl" -B "$work/build" -G Ninja "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_SHARED_LIBS=OFF -DBUILD_CURL_EXE=OFF \
  -DBUILD_TESTING=OFF -DENABLE_MANUAL=OFF -DPICKY_COMPILER=OFF \
  -DHTTP_ONLY=ON -DCURL_USE_OPENSSL=ON -DOPENSSL_USE_STATIC_LIBS=ON \
  -DCURL_CA_BUNDLE=none -DCURL_CA_PATH=none -DCURL_CA_FALLBACK=ON \
  -DCURL_ZLIB=OFF -DCURL_BROTLI=OFF -DCURL_ZSTD=OFF -DUSE_LIBIDN2=OFF -DCURL_USE_LIBPSL=OFF \
  -DCURL_USE_LIBSSH2=OFF -DCURL_USE_LIBSSH=OFF -DUSE_NGHTTP2=OFF -DCURL_USE_GSSAPI=OFF \
  -DCURL_DISABLE_LDAP=ON -DCURL_DISABLE_LDAPS=ON -DENABLE_THREADED_RESOLVER=ON \
  -DCURL_DISABLE_OPENSSL_AUTO_LOAD_CONFIG=ON >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log" >&2; echo "build-static-curl: configuring curl failed" >&2; exit 1; }
cmake --build "$work/build" >"$work/build.log" 2>&1 ||
  { tail -50 "$work/build.log" >&2; echo "build-static-curl: building curl failed" >&2; exit 1; }
rm -rf "$prefix"
cmake --install "$work/build" >/dev/null
[ -f "$prefix/lib/libcurl.a" ] || {
  echo "build-static-curl: the install has no $prefix/lib/libcurl.a" >&2
  exit 1
}
touch "$prefix/.complete"
# Earlier builds (another version or recipe) are not used again.
find "$dir" -mindepth 1 -maxdepth 1 -name 'curl-*' ! -path "$prefix" -exec rm -rf {} +
echo "$prefix"
