// Helpers the hand-written oracle cases share (lookup_oracle_test, generated_oracle_test's
// findings): a case directory with a program directory, a working directory and its files, and
// the oracle's check of one case.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "oracle_support.hpp"
#include "test_support.hpp"

namespace cucore::oracle {

// Writes `text` to root/relative, making directories.
inline void put(const std::filesystem::path& root, const std::string& relative,
                const std::string& text) {
  std::filesystem::create_directories((root / relative).parent_path());
  cucore::testing::write_text(root / relative, text);
}

// A case compiling `code` to PTX as root/prog/k.cu, in root/cwd, without the toolkit's
// directories.
inline oracle_case case_in(const std::filesystem::path& root, const std::string& code) {
  oracle_case c;
  c.code = code;
  c.cwd = root / "cwd";
  std::filesystem::create_directories(c.cwd);
  c.name = (root / "prog" / "k.cu").string();
  std::filesystem::create_directories(root / "prog");
  c.target = "ptx";
  c.toolkit_include_path = false;
  return c;
}

// The oracle over one case: NVRTC's accesses are all tracked, and the compile went as expected
// (a case that fails early would check little). Returns the report.
inline oracle_report expect_tracked(const oracle_case& c, const std::filesystem::path& root,
                                    bool compiles = true) {
  const file_accesses seen = trace_compile(c, root / "scratch");
  EXPECT_EQ(seen.exit_status, compiles ? 0 : 1) << seen.errors;
  const oracle_report r = compare(c, seen, tracked_by_key(c), {root.string()});
  EXPECT_TRUE(r.holds()) << r.describe() << "\ncompiler said: " << seen.errors;
  return r;
}

}  // namespace cucore::oracle
