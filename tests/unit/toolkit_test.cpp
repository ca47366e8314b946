// Library discovery and version probes, including what happens when a library is missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "cucore/error.hpp"
#include "cucore/linker.hpp"
#include "cucore/program.hpp"
#include "cucore/toolkit.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using testing::contains;

TEST(Toolkit, ReportsCompilersWithVersions) {
  auto r = toolkit::query();
  ASSERT_TRUE(r.nvrtc.found) << r.nvrtc.error;
  ASSERT_TRUE(r.nvjitlink.found) << r.nvjitlink.error;
  ASSERT_TRUE(r.nvvm.found) << r.nvvm.error;
  EXPECT_FALSE(r.nvrtc.path.empty());
  EXPECT_TRUE(contains(r.nvrtc.path, "libnvrtc.so"));
  EXPECT_TRUE(contains(r.nvjitlink.path, "libnvJitLink.so"));
  EXPECT_TRUE(contains(r.nvvm.path, "libnvvm.so"));
  EXPECT_EQ(r.nvrtc.version, toolkit::nvrtc_version().to_string());
  EXPECT_GE(toolkit::nvrtc_version(), (version{12, 0}));
  EXPECT_GE(toolkit::nvjitlink_version(), (version{12, 3}));
  auto nvvm = toolkit::nvvm_version();
  EXPECT_GE(nvvm.ir.major, 1);
  EXPECT_TRUE(contains(r.nvvm.version, "IR " + nvvm.ir.to_string()));
  ASSERT_TRUE(r.libdevice.has_value());
  EXPECT_TRUE(contains(*r.libdevice, "libdevice.10.bc"));
  EXPECT_EQ(toolkit::library_name(toolkit::library::nvvm), "libNVVM");
}

TEST(Toolkit, DriverAbsenceIsReportedNotThrown) {
  auto r = toolkit::query();
  if (r.driver.found) {
    EXPECT_TRUE(toolkit::driver_version().has_value());
    GTEST_SKIP() << "this machine has a CUDA driver";
  }
  EXPECT_FALSE(toolkit::driver_version().has_value());
  EXPECT_EQ(toolkit::device_count(), 0);
  EXPECT_FALSE(toolkit::current_device_arch().has_value());
  EXPECT_TRUE(r.devices.empty());
  EXPECT_FALSE(r.driver.error.empty());
  EXPECT_TRUE(contains(r.driver.searched.front(), "libcuda.so.1"));
}

TEST(Toolkit, ProbesAreThreadSafeAndStable) {
  std::vector<std::thread> threads;
  std::vector<version> seen(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { seen[i] = toolkit::nvrtc_version(); });
  }
  for (auto& t : threads) t.join();
  for (const auto& v : seen) EXPECT_EQ(v, seen.front());
}

// The death-test style re-executes this binary for each case, so the child starts with no library
// loaded and sees only the environment set inside it.
class MissingLibrary : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// Points the search at an empty directory only, then runs `body` in a fresh process; `body`
// returns normally when every expectation held (exit 0), else it exits non-zero.
#define EXPECT_IN_EMPTY_CUDA_HOME(body)                          \
  EXPECT_EXIT(                                                   \
      {                                                          \
        {                                                        \
          testing::temp_dir empty; /* removed before the exit */ \
          ::setenv("CUCORE_CUDA_HOME", empty.path().c_str(), 1); \
          ::setenv("CUCORE_CUDA_HOME_ONLY", "1", 1);             \
          const std::string empty_dir = empty.path().string();   \
          body;                                                  \
        }                                                        \
        std::exit(0);                                            \
      },                                                         \
      ::testing::ExitedWithCode(0), "")

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "expectation failed: %s\n", what);
    std::exit(1);
  }
}

TEST_F(MissingLibrary, CompilingNamesTheLibraryThePlacesAndTheFeature) {
  EXPECT_IN_EMPTY_CUDA_HOME({
    program_options o;
    o.arch = "sm_90";
    try {
      program("__global__ void k() {}", source_type::cxx, o).compile(code_type::ptx);
      require(false, "compiled without NVRTC");
    } catch (const library_not_found& e) {
      std::string what = e.what();
      require(e.library() == "NVRTC", "library() is NVRTC");
      require(contains(what, "NVRTC"), "message names NVRTC");
      require(contains(what, empty_dir + "/lib64/libnvrtc.so.13"), "message lists the search");
      require(contains(what, "compiling CUDA C++"), "message names the feature");
      require(contains(what, "CUCORE_CUDA_HOME"), "message says what to do");
      require(!contains(what, "loader path"), "HOME_ONLY skipped the loader path");
      require(e.feature() == "compiling CUDA C++ (program with source_type c++)", "feature()");
    }
  });
}

TEST_F(MissingLibrary, EverythingElseKeepsWorking) {
  EXPECT_IN_EMPTY_CUDA_HOME({
    auto r = toolkit::query();  // never throws
    require(!r.nvrtc.found && !r.nvjitlink.found && !r.nvvm.found, "nothing found");
    require(contains(r.nvrtc.searched.front(), empty_dir), "searched the empty dir");
    require(!r.libdevice.has_value(), "no libdevice");
    bool threw = false;
    try {
      toolkit::nvvm_version();
    } catch (const library_not_found& e) {
      threw = contains(e.what(), "libNVVM");
    }
    require(threw, "nvvm_version throws library_not_found naming libNVVM");
    // Options, targets and object code need no library.
    program_options o;
    o.arch = "sm_90";
    require(compiler_flags(o, source_type::cxx, code_type::cubin).size() == 1, "flags");
    auto code = object_code::from_ptx(".version 9.0", "x");
    require(code.type() == code_type::ptx, "object_code");
    try {
      program(testing::data_file("scale.ll"), source_type::nvvm, o).compile(code_type::ptx);
      require(false, "compiled NVVM without libNVVM");
    } catch (const library_not_found& e) {
      require(e.library() == "libNVVM", "NVVM compile names libNVVM");
    }
  });
}

TEST_F(MissingLibrary, PtxFallsBackToTheDriverLinker) {
  EXPECT_IN_EMPTY_CUDA_HOME({
    require(linker::which_backend() == linker_backend::driver, "no nvJitLink: driver backend");
    program_options o;
    o.arch = "sm_90";
    program p(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n",
              source_type::ptx, o);
    require(p.backend() == compiler_backend::driver, "program reports the driver backend");
    if (toolkit::device_count() > 0) {
      // A GPU machine links with cuLink* in the device's primary context.
      auto cubin = p.compile(code_type::cubin);
      require(cubin.size() > 4 && cubin.code()[0] == std::byte{0x7f}, "the driver made an ELF");
    } else {
      try {
        p.compile(code_type::cubin);
        require(false, "linked without nvJitLink or a driver");
      } catch (const library_not_found& e) {
        require(e.library() == "CUDA driver", "names the driver");
        require(contains(e.what(), "driver linker"), "names the feature");
      } catch (const cuda_error& e) {
        require(e.call() == "cuInit", "a driver without a GPU fails in cuInit");
      }
    }
  });
}

}  // namespace
}  // namespace cucore
