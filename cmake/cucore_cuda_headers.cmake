# cucore needs only the CUDA toolkit's *headers* at build time: every CUDA library (driver, NVRTC,
# nvJitLink, libNVVM) is opened at run time, so nothing here links against them.
#
# The headers are looked for with the run-time search's sources and variables
# (docs/library-discovery.md): $CUCORE_CUDA_HOME, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, then
# NVIDIA's CUDA 13 pip wheels (<site-packages>/nvidia/cu13) for each site-packages directory in
# $CUCORE_CUDA_WHEELS (':'-separated), $VIRTUAL_ENV, and .cache/cuda-wheels of this source tree
# (where scripts/setup.sh puts the wheels on a machine without a toolkit). CUCORE_CUDA_SEARCH (and
# CUCORE_CUDA_HOME_ONLY=1) choose and order the sources as they do at run time, and then nothing
# else is searched, so a build can be pinned to the wheels alone.
set(_cucore_search "$ENV{CUCORE_CUDA_SEARCH}")
if("$ENV{CUCORE_CUDA_HOME_ONLY}" STREQUAL "1")
  set(_cucore_search "CUCORE_CUDA_HOME")
endif()
if(_cucore_search STREQUAL "")
  set(_cucore_search_only FALSE)
  set(_cucore_search CUCORE_CUDA_HOME CUDA_HOME CUDA_PATH /usr/local/cuda wheels)
else()
  set(_cucore_search_only TRUE)
  string(REPLACE "," ";" _cucore_search "${_cucore_search}")
endif()

set(_cucore_cuda_roots)
set(_cucore_wheel_sites)
foreach(_source IN LISTS _cucore_search)
  if(_source MATCHES "^(CUCORE_CUDA_HOME|CUDA_HOME|CUDA_PATH)$")
    if(NOT "$ENV{${_source}}" STREQUAL "")
      list(APPEND _cucore_cuda_roots "$ENV{${_source}}")
    endif()
  elseif(_source STREQUAL "/usr/local/cuda")
    list(APPEND _cucore_cuda_roots /usr/local/cuda)
  elseif(_source STREQUAL "wheels")
    string(REPLACE ":" ";" _sites "$ENV{CUCORE_CUDA_WHEELS}")
    if(NOT "$ENV{VIRTUAL_ENV}" STREQUAL "")
      file(GLOB _venv_sites LIST_DIRECTORIES TRUE "$ENV{VIRTUAL_ENV}/lib/python3*/site-packages")
      list(APPEND _sites ${_venv_sites})
    endif()
    list(APPEND _sites "${PROJECT_SOURCE_DIR}/.cache/cuda-wheels")
    foreach(_site IN LISTS _sites)
      list(APPEND _cucore_wheel_sites "${_site}")
      list(APPEND _cucore_cuda_roots "${_site}/nvidia/cu13")
    endforeach()
  elseif(NOT _source STREQUAL "loader")
    message(FATAL_ERROR "CUCORE_CUDA_SEARCH names the unknown source \"${_source}\": use a "
                        "comma-separated list of CUCORE_CUDA_HOME, CUDA_HOME, CUDA_PATH, "
                        "/usr/local/cuda, wheels, loader")
  endif()
endforeach()

set(_cucore_cuda_include_suffixes include targets/${CMAKE_SYSTEM_PROCESSOR}-linux/include nvvm/include)
if(_cucore_search_only)
  set(_cucore_find_mode PATHS ${_cucore_cuda_roots} NO_DEFAULT_PATH)
else()
  set(_cucore_find_mode HINTS ${_cucore_cuda_roots})
endif()

set(CUCORE_CUDA_INCLUDE_DIRS)
foreach(_header cuda.h nvrtc.h nvJitLink.h nvvm.h)
  string(MAKE_C_IDENTIFIER "${_header}" _var)
  find_path(CUCORE_${_var}_DIR ${_header} ${_cucore_find_mode}
            PATH_SUFFIXES ${_cucore_cuda_include_suffixes})
  if(NOT CUCORE_${_var}_DIR)
    message(FATAL_ERROR "cucore: ${_header} not found under ${_cucore_cuda_roots}. Install the "
                        "CUDA toolkit and set CUDA_HOME, or run scripts/setup.sh (without a toolkit "
                        "it installs NVIDIA's CUDA 13 wheels into .cache/cuda-wheels), or point "
                        "CUCORE_CUDA_WHEELS at a site-packages directory that holds them")
  endif()
  list(APPEND CUCORE_CUDA_INCLUDE_DIRS ${CUCORE_${_var}_DIR})
endforeach()
list(REMOVE_DUPLICATES CUCORE_CUDA_INCLUDE_DIRS)
message(STATUS "cucore: CUDA headers from ${CUCORE_CUDA_INCLUDE_DIRS}")

# Headers from a wheel: the library also searches that site-packages directory at run time, last
# among the wheels, so a build made from the wheels alone finds its compilers without any variable.
set(CUCORE_CUDA_WHEEL_SITE_PACKAGES "")
foreach(_site IN LISTS _cucore_wheel_sites)
  if(CUCORE_cuda_h_DIR STREQUAL "${_site}/nvidia/cu13/include")
    set(CUCORE_CUDA_WHEEL_SITE_PACKAGES "${_site}")
    break()
  endif()
endforeach()
