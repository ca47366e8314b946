# Finds libzstd (the compression of cache packs, src/cache/pack) with pkg-config and defines the
# imported target cucore::zstd. Used by the build and by the installed package's config (cucore is a
# static library by default, so its consumers link libzstd too). Debian: libzstd-dev.
if(NOT TARGET cucore::zstd)
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(CUCORE_ZSTD QUIET IMPORTED_TARGET libzstd)
  endif()
  if(TARGET PkgConfig::CUCORE_ZSTD)
    add_library(cucore::zstd INTERFACE IMPORTED)
    target_link_libraries(cucore::zstd INTERFACE PkgConfig::CUCORE_ZSTD)
  endif()
endif()
