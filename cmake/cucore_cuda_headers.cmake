# cucore needs only the CUDA toolkit's *headers* at build time: every CUDA library (driver, NVRTC,
# nvJitLink, libNVVM) is opened at run time, so nothing here links against them.
set(_cucore_cuda_roots $ENV{CUCORE_CUDA_HOME} $ENV{CUDA_HOME} $ENV{CUDA_PATH} /usr/local/cuda)
set(_cucore_cuda_include_suffixes include targets/${CMAKE_SYSTEM_PROCESSOR}-linux/include nvvm/include)

foreach(_header cuda.h nvrtc.h nvJitLink.h nvvm.h)
  string(MAKE_C_IDENTIFIER "${_header}" _var)
  find_path(CUCORE_${_var}_DIR ${_header} HINTS ${_cucore_cuda_roots}
            PATH_SUFFIXES ${_cucore_cuda_include_suffixes} REQUIRED)
  list(APPEND CUCORE_CUDA_INCLUDE_DIRS ${CUCORE_${_var}_DIR})
endforeach()
list(REMOVE_DUPLICATES CUCORE_CUDA_INCLUDE_DIRS)
message(STATUS "cucore: CUDA headers from ${CUCORE_CUDA_INCLUDE_DIRS}")
