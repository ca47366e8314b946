# End-to-end test of the cucore tool: runs the built binary as a child process and checks its
# output, files and exit status (real compiles; no GPU needed). Included from tests/CMakeLists.txt
# after find_package(GTest) and include(GoogleTest).
if(TARGET cucore_cli)
  add_executable(cli_test ${PROJECT_SOURCE_DIR}/tests/unit/cli_test.cpp)
  target_link_libraries(cli_test PRIVATE cucore_warnings GTest::gtest_main)
  target_compile_features(cli_test PRIVATE cxx_std_20)
  target_compile_definitions(cli_test PRIVATE CUCORE_VERSION="${PROJECT_VERSION}")
  cucore_path_macros(cli_test CUCORE_CLI_PATH $<TARGET_FILE:cucore_cli>
                     CUCORE_TEST_DATA_DIR ${PROJECT_SOURCE_DIR}/tests/data
                     CUCORE_SOURCE_DIR ${PROJECT_SOURCE_DIR})
  # The test runs the tool, so building the test must build the tool.
  add_dependencies(cli_test cucore_cli)
  # Test names start with "cli." so `ctest -R cli` selects them.
  gtest_discover_tests(cli_test TEST_PREFIX "cli." DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "unit")
endif()
