// Automatic precompiled headers over the real-header corpus (CUTLASS/CuTe 4.2, CuPy 14.2, the
// toolkit's CCCL: tests/data/corpus, scripts/fetch-corpus.sh). For each kernel K, in one process:
// K's first compile (no PCH yet: NVRTC gets no PCH flag), K again (it makes the image of K's
// leading #include lines), a sibling S (K's code with one more kernel after it: same #include
// lines) from that image, and K from it: every output and log equals the compile without an
// automatic PCH. Byte for byte, symbol mapping included (docs/compilation.md, "Precompiled
// headers").
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "corpus_support.hpp"
#include "cucore/program.hpp"
#include "oracle_support.hpp"
#include "test_support.hpp"

namespace cucore::oracle {
namespace {

namespace fs = std::filesystem;

struct outcome {
  object_code code;
  std::string log;
  auto_pch_status status;
};

outcome compile(const std::string& source, const oracle_case& c, bool auto_pch) {
  program_options o = options_of(c);
  if (!auto_pch) o.auto_pch = false;
  program p(source, source_type::cxx, o);
  object_code out = p.compile(target_of(c), c.name_expressions);
  return {std::move(out), p.log(), p.last_auto_pch()};
}

::testing::AssertionResult same(const outcome& got, const outcome& plain) {
  if (!(got.code == plain.code)) {
    return ::testing::AssertionFailure()
           << "the output differs from the compile without an automatic PCH (" << got.code.size()
           << " and " << plain.code.size() << " bytes; " << to_string(got.status) << ")";
  }
  if (got.log != plain.log) {
    return ::testing::AssertionFailure() << "the log differs (" << to_string(got.status) << "):\n"
                                         << got.log << "\n--- without:\n"
                                         << plain.log;
  }
  return ::testing::AssertionSuccess();
}

class CorpusPch : public ::testing::TestWithParam<corpus_kernel> {};

TEST_P(CorpusPch, EveryCompileFromAnImageEqualsThePlainCompile) {
  ASSERT_TRUE(fs::exists(corpus_dir() / ".cucore-corpus"))
      << "the header corpus is not at " << corpus_dir() << ": run scripts/fetch-corpus.sh";
  clear_auto_pch();
  testing::temp_dir t;
  fs::create_directories(t / "cwd");
  const oracle_case c = case_of(GetParam().spec, t / "cwd");
  // Named by a file on disk: NVRTC's module id, in internal symbol names, is then stable.
  testing::write_text(c.cwd / c.name, c.code);
  const std::string sibling =
      c.code +
      "\nextern \"C\" __global__ void cucore_pch_sibling(int* p) { p[threadIdx.x] = 7; }\n";
  const fs::path here = fs::current_path();
  fs::current_path(c.cwd);

  const outcome first = compile(c.code, c, true);
  EXPECT_EQ(first.status, auto_pch_status::first_seen) << "no PCH flag: the plain reference";
  outcome made = compile(c.code, c, true);
  if (made.status == auto_pch_status::discarded) {
    // NVRTC's PCH heap was too small for the image: grown, and the next compile makes it. (With
    // cucore's first heap, 512 MiB, the corpus's CuTe prefixes fit: 273 MB measured.)
    EXPECT_TRUE(same(made, first));
    made = compile(c.code, c, true);
  }
  const outcome sibling_plain = compile(sibling, c, false);
  const outcome sibling_pch = compile(sibling, c, true);
  const outcome again = compile(c.code, c, true);
  fs::current_path(here);

  // A kernel whose compile logs diagnostics gets no image (a compile from one would not repeat
  // those of the headers).
  const bool quiet = first.log.find_first_not_of(" \t\r\n") == std::string::npos;
  EXPECT_EQ(made.status, quiet ? auto_pch_status::created : auto_pch_status::unusable) << made.log;
  EXPECT_TRUE(same(made, first));
  EXPECT_EQ(sibling_pch.status, quiet ? auto_pch_status::used : auto_pch_status::unusable);
  EXPECT_TRUE(same(sibling_pch, sibling_plain));
  EXPECT_EQ(again.status, quiet ? auto_pch_status::used : auto_pch_status::unusable);
  EXPECT_TRUE(same(again, first));
  EXPECT_FALSE(sibling_plain.code == first.code) << "the sibling must be another program";
  std::cout << "[ pch      ] " << GetParam().name << ": " << to_string(made.status) << ", "
            << to_string(sibling_pch.status) << ", " << to_string(again.status) << "\n";
  clear_auto_pch();
}

INSTANTIATE_TEST_SUITE_P(Kernels, CorpusPch, ::testing::ValuesIn(corpus_kernels()),
                         [](const ::testing::TestParamInfo<corpus_kernel>& info) {
                           return info.param.name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CorpusPch);

}  // namespace
}  // namespace cucore::oracle
