# Finds hiredis (the Redis client of the Redis cache tier) and defines the imported target
# cucore::hiredis. Used by the build and by the installed package's config (cucore is a static
# library by default, so its consumers link hiredis too). Debian: libhiredis-dev.
if(NOT TARGET cucore::hiredis)
  find_path(CUCORE_HIREDIS_INCLUDE_DIR hiredis/hiredis.h)
  find_library(CUCORE_HIREDIS_LIBRARY hiredis)
  if(CUCORE_HIREDIS_INCLUDE_DIR AND CUCORE_HIREDIS_LIBRARY)
    add_library(cucore::hiredis UNKNOWN IMPORTED)
    set_target_properties(cucore::hiredis PROPERTIES
                          IMPORTED_LOCATION "${CUCORE_HIREDIS_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${CUCORE_HIREDIS_INCLUDE_DIR}")
  endif()
endif()
