// The compiler version memo: a remembered version belongs to one library file (path, inode, size,
// mtime), and a library replaced on disk after this process loaded it never inherits the loaded
// one's version (that would give the new compiler the old one's keys: stale hits elsewhere).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "key/memoized_probes.hpp"
#include "loader/libraries.hpp"
#include "loader/shared_library.hpp"
#include "test_support.hpp"

namespace cucore::detail {
namespace {

namespace fs = std::filesystem;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "expectation failed: %s\n", what);
    std::exit(1);
  }
}

class VersionMemo : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(VersionMemo, ALibraryReplacedAfterLoadingIsNotGivenTheLoadedVersion) {
  // A private CUDA root holding a copy of the real libnvrtc (the one the search finds:
  // /usr/local/cuda's, or the pip wheels' when only they are searched). A copy, not a hard link:
  // a new link changes the real file's ctime, which makes tests running beside this one rightly
  // refuse to remember its version (the store check's too-new rule).
  const auto found = find_in_roots(library_spec_of(toolkit::library::nvrtc));
  if (!found) GTEST_SKIP() << "NVRTC is not under a CUDA root";
  const auto real = fs::canonical(*found);

  EXPECT_EXIT(
      {
        {
          testing::temp_dir root;
          fs::create_directories(root / "lib64");
          const auto lib = root / "lib64" / "libnvrtc.so.13";
          fs::copy_file(real, lib);
          for (const auto& e : fs::directory_iterator(real.parent_path())) {
            const auto name = e.path().filename().string();
            if (name.rfind("libnvrtc-builtins.so", 0) == 0) {
              fs::copy_file(e.path(), root / "lib64" / name);
            }
          }
          ::setenv("CUCORE_CUDA_HOME", root.path().c_str(), 1);
          ::setenv("CUCORE_CUDA_HOME_ONLY", "1", 1);
          const auto memo = root / "compiler-versions";

          const auto first = memoized_compiler_probes(memo).nvrtc();  // loads it, remembers
          require(first.ok, "NVRTC probed through the private root");
          const auto loaded = identify_file(fs::canonical(lib).string());
          require(loaded.has_value(), "identity of the linked library");
          compiler_version_memo check(memo);
          require(check.lookup("nvrtc", *loaded) == first.value, "remembered for that file");

          // Replace the file (new inode, other size), as an in-place toolkit upgrade would.
          const auto replacement = root / "lib64" / "replacement";
          testing::write_text(replacement, "not the library this process loaded");
          fs::rename(replacement, lib);
          const auto replaced = identify_file(fs::canonical(lib).string());
          require(replaced.has_value() && !(*replaced == *loaded), "a different file now");

          const auto second = memoized_compiler_probes(memo).nvrtc();
          require(second.ok, "the loaded library still answers for this process");
          compiler_version_memo after(memo);
          require(!after.lookup("nvrtc", *replaced).has_value(),
                  "the replaced file was not given the loaded library's version");
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace cucore::detail
