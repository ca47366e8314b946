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

# `cucore cache verify --recompile` (docs/verify-recompile.md): entries compiled again from their
# recipes; nlohmann::json reads the tool's --json.
if(TARGET cucore_cli)
  find_package(nlohmann_json 3.10 REQUIRED CONFIG)
  add_executable(cli_recompile_test ${PROJECT_SOURCE_DIR}/tests/unit/cli_recompile_test.cpp)
  target_link_libraries(cli_recompile_test PRIVATE cucore_warnings GTest::gtest_main
                                                   nlohmann_json::nlohmann_json)
  target_include_directories(cli_recompile_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/unit)
  target_compile_features(cli_recompile_test PRIVATE cxx_std_20)
  cucore_path_macros(cli_recompile_test CUCORE_CLI_PATH $<TARGET_FILE:cucore_cli>)
  add_dependencies(cli_recompile_test cucore_cli)
  gtest_discover_tests(cli_recompile_test TEST_PREFIX "cli." DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "unit" TIMEOUT 300)
endif()

# `cucore cache export` / `import` (docs/cache-packs.md): packs written and read by the tool, its
# progress bar on a pseudo-terminal; nlohmann::json reads the tool's --json.
if(TARGET cucore_cli)
  add_executable(cli_pack_test ${PROJECT_SOURCE_DIR}/tests/unit/cli_pack_test.cpp)
  target_link_libraries(cli_pack_test PRIVATE cucore_warnings GTest::gtest_main
                                              nlohmann_json::nlohmann_json)
  target_include_directories(cli_pack_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/unit)
  target_compile_features(cli_pack_test PRIVATE cxx_std_20)
  cucore_path_macros(cli_pack_test CUCORE_CLI_PATH $<TARGET_FILE:cucore_cli>)
  add_dependencies(cli_pack_test cucore_cli)
  gtest_discover_tests(cli_pack_test TEST_PREFIX "cli." DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "unit" TIMEOUT 300)
endif()
