// The oracle over real header libraries nobody here wrote: CUTLASS/CuTe 4.2 and CuPy 14.2 from
// their PyPI wheels (scripts/fetch-corpus.sh), and the toolkit's CCCL, with the kernels of
// tests/data/corpus (corpus.json says how each is compiled). For each kernel:
// - NVRTC's accesses (strace) are all tracked, and the key tracks at most 1.5x the files NVRTC
//   reads;
// - through a directory cache: the miss returns the bytes of an uncached compile in the same
//   process, and a fresh process hits and gets exactly the bytes the miss stored.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "corpus_support.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/program.hpp"
#include "cucore/toolkit.hpp"
#include "oracle_support.hpp"
#include "test_support.hpp"

namespace cucore::oracle {
namespace {

namespace fs = std::filesystem;
using cucore::testing::read_text;
using cucore::testing::temp_dir;

class CorpusOracle : public ::testing::TestWithParam<corpus_kernel> {};

TEST_P(CorpusOracle, NvrtcAccessesAreTrackedAndTheCacheReturnsTheUncachedBytes) {
  ASSERT_TRUE(fs::exists(corpus_dir() / ".cucore-corpus"))
      << "the header corpus is not at " << corpus_dir()
      << ": run scripts/fetch-corpus.sh (scripts/setup.sh does)";
  temp_dir t;
  fs::create_directories(t / "cwd");
  const oracle_case c = case_of(GetParam().spec, t / "cwd");
  // The program's name names a file on disk: NVRTC's module id in internal symbol names is then
  // stable, so two compiles of the same inputs give the same bytes (nvrtc-observed.md).
  cucore::testing::write_text(c.cwd / c.name, c.code);

  // 1. What NVRTC reads and probes, against the key.
  const file_accesses seen = trace_compile(c, t / "scratch");
  ASSERT_EQ(seen.exit_status, 0) << seen.errors;
  const tracked_paths tracked = tracked_by_key(c);
  const oracle_report r = compare(c, seen, tracked, {corpus_dir().string()});
  EXPECT_TRUE(r.holds()) << r.describe();
  EXPECT_LE(r.ratio, 1.5) << r.describe();
  std::cout << "[ corpus   ] " << GetParam().name << ": NVRTC read " << r.read << ", probed "
            << r.probed_absent << " absent; key tracks " << r.tracked_files << " files (" << r.ratio
            << "x), " << r.tracked_absent << " absent, " << tracked.skipped
            << " includes skipped\n";
  RecordProperty("read", static_cast<int>(r.read));
  RecordProperty("tracked", static_cast<int>(r.tracked_files));

  // 2. Through a directory cache: the miss equals an uncached compile in this process; a fresh
  // process hits and returns the stored bytes.
  file_stream_program_cache cache(t / "cache");
  const fs::path here = fs::current_path();
  fs::current_path(c.cwd);
  program cached(c.code, source_type::cxx, options_of(c));
  const object_code miss = cached.compile(target_of(c), c.name_expressions, &cache);
  EXPECT_EQ(cached.last_cache_outcome(), cache_outcome::miss);
  // The reference compiles plain: with automatic PCH, this second compile of the prefix would make
  // an image (slower, and not the plain compile the oracle means).
  program_options plain = options_of(c);
  plain.auto_pch = false;
  program uncached(c.code, source_type::cxx, plain);
  const object_code reference = uncached.compile(target_of(c), c.name_expressions);
  fs::current_path(here);
  EXPECT_TRUE(miss == reference) << "the cached compile differs from an uncached one";

  {
    std::ofstream out(t / "case.json");
    out << nlohmann::json(c).dump();
  }
  std::string said;
  const int status = run_process({CUCORE_ORACLE_COMPILE, "--cache", (t / "cache").string(),
                                  (t / "case.json").string(), (t / "hit.bin").string()},
                                 {}, said);
  ASSERT_EQ(status, 0) << said;
  EXPECT_EQ(said, "hit\n") << "a fresh process must hit what this one stored";
  const std::string hit = read_text(t / "hit.bin");
  const auto stored = miss.code();
  EXPECT_EQ(hit, std::string(reinterpret_cast<const char*>(stored.data()), stored.size()))
      << "the fresh process's hit differs from the bytes the miss stored";
}

#ifdef CUCORE_CLI_PATH
// The command line, as a user runs it: for a CuTe, a CUTLASS and a CuPy kernel, the uncached
// compile, a miss into a directory cache, and a hit in a fresh process all write the same bytes.
TEST(CorpusCli, CompilesMissesAndHitsInAFreshProcessWithTheUncachedBytes) {
  ASSERT_TRUE(fs::exists(corpus_dir() / ".cucore-corpus"))
      << "the header corpus is not at " << corpus_dir() << ": run scripts/fetch-corpus.sh";
  temp_dir t;
  for (const auto& k : corpus_kernels()) {
    const std::string name = k.name;
    if (name != "cute_tiled_copy" && name != "cutlass_epilogue" && name != "cupy_elementwise") {
      continue;
    }
    SCOPED_TRACE(name);
    const oracle_case c = case_of(k.spec, t.path());
    std::vector<std::string> args = {
        CUCORE_CLI_PATH, "compile", (spec_dir() / k.spec.at("file").get<std::string>()).string(),
        "--arch",        c.arch,    "--target",
        c.target};
    for (const auto& d : c.include_path) args.insert(args.end(), {"-I", d});
    if (!c.toolkit_include_path) args.push_back("--no-toolkit-include");
    if (c.std) args.insert(args.end(), {"--std", *c.std});
    if (c.default_device) args.push_back("--default-device");
    if (c.ftz) args.insert(args.end(), {"--ftz", "true"});
    const auto run = [&](const std::string& cache, const std::string& out) {
      std::vector<std::string> a = args;
      a.insert(a.end(), {"--cache", cache, "-o", (t / out).string(), "--json"});
      std::string said;
      EXPECT_EQ(run_process(a, {}, said), 0) << said;
      const auto j = nlohmann::json::parse(said, nullptr, false);
      return j.is_object() ? j.value("cache", std::string("?")) : said;
    };
    const std::string cache = (t / (name + "-cache")).string();
    EXPECT_EQ(run("none", name + ".none"), "off");
    EXPECT_EQ(run(cache, name + ".miss"), "miss");
    EXPECT_EQ(run(cache, name + ".hit"), "hit");
    const std::string uncached = read_text(t / (name + ".none"));
    EXPECT_FALSE(uncached.empty());
    EXPECT_EQ(read_text(t / (name + ".miss")), uncached) << "the miss differs from --cache none";
    EXPECT_EQ(read_text(t / (name + ".hit")), uncached) << "the hit differs from --cache none";
  }
}
#endif

INSTANTIATE_TEST_SUITE_P(Kernels, CorpusOracle, ::testing::ValuesIn(corpus_kernels()),
                         [](const ::testing::TestParamInfo<corpus_kernel>& info) {
                           return info.param.name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CorpusOracle);

}  // namespace
}  // namespace cucore::oracle
