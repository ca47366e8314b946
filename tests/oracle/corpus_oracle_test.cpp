// The oracle over real header libraries nobody here wrote: CUTLASS/CuTe 4.2 and CuPy 14.2 from
// their PyPI wheels (scripts/fetch-corpus.sh), and the toolkit's CCCL, with the kernels of
// tests/data/corpus (corpus.json says how each is compiled). For each kernel, one test (each step
// reuses the compiles of the steps before it: these are the suite's longest compiles):
// 1. NVRTC's accesses (strace of an uncached compile in a separate process) are all tracked, and
//    the key tracks at most 1.5x the files NVRTC reads;
// 2. through a directory cache: the miss returns the bytes of an uncached compile in this process,
//    and a fresh process hits and gets exactly the bytes the miss stored;
// 3. automatic precompiled headers: the uncached compile was the prefix's first (no PCH flag), the
//    miss its second, which makes the image of the kernel's leading #include lines; then a sibling
//    (the kernel's code with one more kernel after it: the same #include lines) compiles from that
//    image, and the kernel again: every output and log equals the compile without an automatic
//    PCH, byte for byte, symbol mapping included (docs/compilation.md, "Precompiled headers").
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

std::string bytes_of(const object_code& code) {
  const auto b = code.code();
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

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

class CorpusOracle : public ::testing::TestWithParam<corpus_kernel> {};

TEST_P(CorpusOracle, TrackedCachedAndPrecompiledCompilesEqualTheUncachedBytes) {
  ASSERT_TRUE(fs::exists(corpus_dir() / ".cucore-corpus"))
      << "the header corpus is not at " << corpus_dir()
      << ": run scripts/fetch-corpus.sh (scripts/setup.sh does)";
  clear_auto_pch();
  temp_dir t;
  fs::create_directories(t / "cwd");
  const oracle_case c = case_of(GetParam().spec, t / "cwd");
  // The program's name names a file on disk: NVRTC's module id in internal symbol names is then
  // stable, so two compiles of the same inputs in one process give the same bytes (in two, CUB's
  // and libcu++'s internal names still differ by the PID: nvrtc-observed.md).
  cucore::testing::write_text(c.cwd / c.name, c.code);

  // 1. What NVRTC reads and probes, against the key.
  const file_accesses seen = trace_compile(c, t / "scratch");
  const std::string nvrtc = toolkit::nvrtc_version().to_string();
  if (const auto why = unsupported_with(GetParam().spec, nvrtc)) {
    // A library that does not support this NVRTC (corpus.json): the compile must still fail (else
    // the entry is stale), and what NVRTC read and probed before it gave up is tracked all the
    // same. Nothing compiled, so there are no bytes to compare.
    EXPECT_EQ(seen.exit_status, 1)
        << GetParam().name << " compiled with NVRTC " << nvrtc
        << ", which corpus.json says its library does not support: remove that entry";
    const oracle_report r = compare(c, seen, tracked_by_key(c), {corpus_dir().string()});
    EXPECT_TRUE(r.holds()) << r.describe();
    std::cout << "[ corpus   ] " << GetParam().name << ": not supported with NVRTC " << nvrtc
              << " (" << *why << "): the compile fails as expected; NVRTC read " << r.read
              << ", probed " << r.probed_absent << " absent before failing, all tracked\n";
    return;
  }
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

  // The uncached reference, in this process: NVRTC puts the compiling process's PID into some
  // internal symbol names (CUB, libcu++'s ranges), so only a compile here has the same bytes. It
  // is also the prefix's first compile for automatic PCH (no PCH flag: a plain compile).
  const fs::path here = fs::current_path();
  fs::current_path(c.cwd);
  const outcome first = compile(c.code, c, true);
  EXPECT_EQ(first.status, auto_pch_status::first_seen) << "no PCH flag: the plain reference";

  // 2. Through a directory cache: the miss equals the uncached compile; a fresh process hits and
  // returns the stored bytes. The miss is the prefix's second compile: it makes the PCH image.
  file_stream_program_cache cache(t / "cache");
  program cached(c.code, source_type::cxx, options_of(c));
  outcome made{cached.compile(target_of(c), c.name_expressions, &cache), cached.log(),
               cached.last_auto_pch()};
  EXPECT_EQ(cached.last_cache_outcome(), cache_outcome::miss);
  EXPECT_TRUE(same(made, first)) << "the cached compile differs from an uncached one";
  {
    std::ofstream out(t / "case.json");
    out << nlohmann::json(c).dump();
  }
  std::string said;
  const int status = run_process({CUCORE_ORACLE_COMPILE, "--cache", (t / "cache").string(),
                                  (t / "case.json").string(), (t / "hit.bin").string()},
                                 {}, said);
  EXPECT_EQ(status, 0) << said;
  EXPECT_EQ(said, "hit\n") << "a fresh process must hit what this one stored";
  EXPECT_EQ(read_text(t / "hit.bin"), bytes_of(made.code))
      << "the fresh process's hit differs from the bytes the miss stored";

  // 3. Automatic PCH, from the image the miss made.
  const std::string sibling =
      c.code +
      "\nextern \"C\" __global__ void cucore_pch_sibling(int* p) { p[threadIdx.x] = 7; }\n";
  if (made.status == auto_pch_status::discarded) {
    // NVRTC's PCH heap was too small for the image: grown, and the next compile makes it. (With
    // cucore's first heap, 512 MiB, the corpus's CuTe prefixes fit: 273 MB measured.)
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
    if (const auto why = unsupported_with(k.spec, toolkit::nvrtc_version().to_string())) {
      std::cout << "[ cli      ] " << name << " left out: not supported with NVRTC "
                << toolkit::nvrtc_version().to_string() << " (" << *why << ")\n";
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
