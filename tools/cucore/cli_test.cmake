# End-to-end tests of the cucore tool: each runs the built binary as a child process and checks its
# output, files and exit status (real compiles; no GPU needed). Included from tests/CMakeLists.txt
# (cucore_test) after find_package(GTest) and include(GoogleTest). Test names start with "cli." so
# `ctest -R cli` selects them.
if(TARGET cucore_cli)
  # One program from one source per command (tests/unit/cli_test_support.hpp: their fixture).
  cucore_test(cli_test TOOL_ONLY USES_CLI PREFIX "cli."
    SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/cli_compile_test.cpp
            ${PROJECT_SOURCE_DIR}/tests/unit/cli_compile_options_test.cpp
            ${PROJECT_SOURCE_DIR}/tests/unit/cli_compile_cache_test.cpp
            ${PROJECT_SOURCE_DIR}/tests/unit/cli_key_test.cpp
            ${PROJECT_SOURCE_DIR}/tests/unit/cli_cache_test.cpp
            ${PROJECT_SOURCE_DIR}/tests/unit/cli_info_usage_test.cpp
    PROPERTIES LABELS "unit")
  target_compile_definitions(cli_test PRIVATE CUCORE_VERSION="${PROJECT_VERSION}")
  cucore_path_macros(cli_test CUCORE_TEST_DATA_DIR ${PROJECT_SOURCE_DIR}/tests/data
                     CUCORE_SOURCE_DIR ${PROJECT_SOURCE_DIR})

  # `cucore cache verify --recompile` (docs/verify-recompile.md): entries compiled again from their
  # recipes; nlohmann::json reads the tool's --json.
  find_package(nlohmann_json 3.10 REQUIRED CONFIG)
  cucore_test(cli_recompile_test TOOL_ONLY USES_CLI PREFIX "cli."
    SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/cli_recompile_test.cpp
    LIBS nlohmann_json::nlohmann_json
    INCLUDE unit
    PROPERTIES LABELS "unit" TIMEOUT 300)

  # `cucore cache export` / `import` (docs/cache-packs.md): packs written and read by the tool, its
  # progress bar on a pseudo-terminal; nlohmann::json reads the tool's --json.
  cucore_test(cli_pack_test TOOL_ONLY USES_CLI PREFIX "cli."
    SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/cli_pack_test.cpp
    LIBS nlohmann_json::nlohmann_json
    INCLUDE unit
    PROPERTIES LABELS "unit" TIMEOUT 300)
endif()
