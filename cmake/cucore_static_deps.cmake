# CUCORE_STATIC_DEPS (off by default; on in the portable wheel's build, scripts/build-wheel.sh):
# the library's link dependencies come from static archives, so the extension, the `cucore`
# executable and the drop-in engines of `cucore run` need nothing beyond glibc, libstdc++ and
# libgcc_s (docs/python.md, "A wheel that installs anywhere"). A drop-in is preloaded into programs
# that may load their own libcrypto, libsqlite3 or libcurl: linked in and hidden, cucore's copies
# can neither clash with theirs nor be dragged into them.
#
# Included after the find_package calls of the top-level CMakeLists.txt: it points their imported
# targets (OpenSSL::Crypto, OpenSSL::SSL, SQLite::SQLite3, cucore::hiredis, cucore::zstd,
# CURL::libcurl) at the static archives, so the targets that link them are unchanged.
# - sqlite3, hiredis, zstd, libcrypto/libssl: Debian's own archives (libsqlite3-dev, libhiredis-dev,
#   libzstd-dev, libssl-dev), found beside the shared libraries.
# - libcurl: Debian's libcurl.a needs nghttp2, libssh2, librtmp, libpsl, GSSAPI and LDAP, which
#   have no static archives; scripts/build-static-curl.sh builds one with HTTP(S) and OpenSSL only,
#   named by CUCORE_STATIC_CURL_ROOT (its install prefix).
# - xxHash is header-only already.
# The archives' symbols are made local to each shared object (--exclude-libs,ALL), so none is
# exported; the drop-in engines' version script hides them too.
option(CUCORE_STATIC_DEPS "Link sqlite3, hiredis, zstd, libcrypto and libcurl statically (the portable wheel)" OFF)
set(CUCORE_STATIC_CURL_ROOT "" CACHE PATH
    "With CUCORE_STATIC_DEPS: the install prefix of a static libcurl (scripts/build-static-curl.sh)")
if(NOT CUCORE_STATIC_DEPS)
  return()
endif()

# Points the imported target at ARCHIVE for every configuration it names, and appends the
# archive's own dependencies.
function(cucore_use_static_archive target archive)
  if(NOT TARGET ${target})
    message(FATAL_ERROR "CUCORE_STATIC_DEPS: no target ${target} to make static")
  endif()
  if(NOT EXISTS "${archive}")
    message(FATAL_ERROR "CUCORE_STATIC_DEPS: ${archive} does not exist (for ${target})")
  endif()
  set_target_properties(${target} PROPERTIES IMPORTED_LOCATION "${archive}")
  get_target_property(configs ${target} IMPORTED_CONFIGURATIONS)
  if(configs)
    foreach(config IN LISTS configs)
      set_target_properties(${target} PROPERTIES IMPORTED_LOCATION_${config} "${archive}")
    endforeach()
  endif()
  if(ARGN)
    set_property(TARGET ${target} APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${ARGN})
  endif()
  message(STATUS "cucore: ${target} statically from ${archive}")
endfunction()

# A static archive NAME (libfoo.a) where the linker finds the system's libraries.
function(cucore_find_static_archive var name package)
  find_library(${var} NAMES ${name} NO_CACHE)
  if(NOT ${var})
    message(FATAL_ERROR "CUCORE_STATIC_DEPS: ${name} not found: install ${package} (scripts/setup.sh does)")
  endif()
  set(${var} "${${var}}" PARENT_SCOPE)
endfunction()

cucore_find_static_archive(crypto_archive libcrypto.a libssl-dev)
cucore_use_static_archive(OpenSSL::Crypto "${crypto_archive}" ${CMAKE_DL_LIBS} Threads::Threads)
if(TARGET OpenSSL::SSL)
  cucore_find_static_archive(ssl_archive libssl.a libssl-dev)
  cucore_use_static_archive(OpenSSL::SSL "${ssl_archive}" OpenSSL::Crypto)
endif()
cucore_find_static_archive(sqlite_archive libsqlite3.a libsqlite3-dev)
cucore_use_static_archive(SQLite::SQLite3 "${sqlite_archive}" m ${CMAKE_DL_LIBS} Threads::Threads)
cucore_find_static_archive(hiredis_archive libhiredis.a libhiredis-dev)
cucore_use_static_archive(cucore::hiredis "${hiredis_archive}")
if(TARGET cucore::zstd)
  # An INTERFACE target over pkg-config's (which names the shared library): replace its link line.
  cucore_find_static_archive(zstd_archive libzstd.a libzstd-dev)
  set_target_properties(cucore::zstd PROPERTIES INTERFACE_LINK_LIBRARIES "${zstd_archive};Threads::Threads"
                        INTERFACE_INCLUDE_DIRECTORIES "${CUCORE_ZSTD_INCLUDE_DIRS}")
  message(STATUS "cucore: cucore::zstd statically from ${zstd_archive}")
endif()
if(TARGET CURL::libcurl)
  if(NOT CUCORE_STATIC_CURL_ROOT OR NOT EXISTS "${CUCORE_STATIC_CURL_ROOT}/lib/libcurl.a")
    message(FATAL_ERROR "CUCORE_STATIC_DEPS: set CUCORE_STATIC_CURL_ROOT to the prefix of a static "
                        "libcurl (\"${CUCORE_STATIC_CURL_ROOT}\" has no lib/libcurl.a): "
                        "scripts/build-static-curl.sh builds one and prints it")
  endif()
  if(NOT TARGET OpenSSL::SSL)
    message(FATAL_ERROR "CUCORE_STATIC_DEPS: the static libcurl needs OpenSSL's libssl (libssl-dev)")
  endif()
  cucore_use_static_archive(CURL::libcurl "${CUCORE_STATIC_CURL_ROOT}/lib/libcurl.a"
                            OpenSSL::SSL OpenSSL::Crypto Threads::Threads)
  # Its headers, not the system's (the same version, but they go with the archive).
  set_target_properties(CURL::libcurl PROPERTIES
                        INTERFACE_INCLUDE_DIRECTORIES "${CUCORE_STATIC_CURL_ROOT}/include"
                        INTERFACE_COMPILE_DEFINITIONS CURL_STATICLIB)
endif()

# The archives' symbols stay inside each shared object (the extension, the drop-in engines).
add_link_options(LINKER:--exclude-libs,ALL)
