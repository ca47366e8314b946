# A C program of the tests or benchmarks (an unmodified program's stand-in, a harness): C11, the
# project's warnings (cucore_warnings), libdl and the libraries given after the source. The
# directory must have enabled C (enable_language(C) is file-scope only).
function(cucore_c_program target source)
  add_executable(${target} ${source})
  set_target_properties(${target} PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON)
  target_link_libraries(${target} PRIVATE cucore_warnings ${CMAKE_DL_LIBS} ${ARGN})
endfunction()
