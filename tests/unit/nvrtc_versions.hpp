// The NVRTC version matrix (docs/development.md, "NVRTC versions"): the toolkit roots that
// scripts/fetch-cuda-versions.sh assembles from pinned PyPI wheels, and how a test binary is run
// against one of them.
//
// A version's root: cuda_version_root (test_support.hpp). A test run with
// CUCORE_TEST_NVRTC=VERSION (the ctest entries labelled `matrix`) points this process and every
// child at that root (CUCORE_CUDA_HOME=ROOT, CUCORE_CUDA_HOME_ONLY=1) before the first compile,
// and checks that the NVRTC it then loads is VERSION. A missing root fails the run with the
// command that fetches it: never a silent skip.
//
// Include where CUCORE_SOURCE_DIR is defined (cucore_path_macros): it registers a gtest
// environment, once per binary however many of its sources include it.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>

#include "test_support.hpp"  // cuda_version_root

#include "cucore/toolkit.hpp"
#include "test_support.hpp"  // cuda_version_root

namespace cucore::testing {

// The version this run was asked for (CUCORE_TEST_NVRTC), or "" for the default search.
inline std::string requested_nvrtc_version() {
  const char* v = std::getenv("CUCORE_TEST_NVRTC");
  return v != nullptr ? std::string(v) : std::string();
}

// Points the process at the requested version's root before any test runs, and checks the NVRTC
// that then loads. Without CUCORE_TEST_NVRTC, nothing changes.
class nvrtc_version_environment : public ::testing::Environment {
 public:
  void SetUp() override {
    const std::string version = requested_nvrtc_version();
    if (version.empty()) return;
    std::filesystem::path root;
    try {
      root = cuda_version_root(version);
    } catch (const std::exception& e) {
      FAIL() << "CUCORE_TEST_NVRTC=" << version << ": " << e.what();
    }
    ::setenv("CUCORE_CUDA_HOME", root.c_str(), 1);
    ::setenv("CUCORE_CUDA_HOME_ONLY", "1", 1);
    const toolkit::library_status nvrtc = toolkit::status(toolkit::library::nvrtc);
    ASSERT_TRUE(nvrtc.found) << "CUCORE_TEST_NVRTC=" << version << ": no NVRTC under " << root
                             << ": " << nvrtc.error;
    ASSERT_EQ(toolkit::nvrtc_version().to_string(), version)
        << "CUCORE_TEST_NVRTC=" << version << ": " << nvrtc.path << " is another version";
    std::cout << "[ nvrtc    ] " << version << " from " << nvrtc.path << "\n";
  }
};

}  // namespace cucore::testing

// One registration per binary (an inline variable).
inline ::testing::Environment* const cucore_nvrtc_version_environment =
    ::testing::AddGlobalTestEnvironment(new cucore::testing::nvrtc_version_environment);
