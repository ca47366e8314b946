// program::compile(target, names, cache): key derivation, hits with the symbol mapping intact,
// misses that compile and store, refusals, and a failing cache that never fails the compile.
#include <gtest/gtest.h>

#include "cache_test_support.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "cucore/program.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using testing::contains;

constexpr const char* kSource = R"(
template <class T> __global__ void scale(T* x, T a) { x[threadIdx.x] *= a; }
extern "C" __global__ void plain(float* x) { x[0] = 1.0f; }
)";

program_options options() {
  program_options o;
  o.arch = testing::kArch;
  return o;
}

TEST(CompileWithCache, MissThenHitWithSymbolMapping) {
  in_memory_program_cache cache;
  std::vector<std::string> names = {"scale<float>", "scale<int>"};
  program first(kSource, source_type::cxx, options());
  auto compiled = first.compile(code_type::cubin, names, &cache);
  EXPECT_EQ(first.last_cache_outcome(), cache_outcome::miss);
  ASSERT_TRUE(first.last_cache_key());
  EXPECT_EQ(cache.size(), 1u);

  program second(kSource, source_type::cxx, options());
  auto hit = second.compile(code_type::cubin, names, &cache);
  EXPECT_EQ(second.last_cache_outcome(), cache_outcome::hit);
  EXPECT_EQ(*second.last_cache_key(), *first.last_cache_key());
  EXPECT_EQ(hit, compiled);
  EXPECT_EQ(hit.symbol("scale<float>"), "_Z5scaleIfEvPT_S0_");
  EXPECT_EQ(hit.name(), "default_program");
  EXPECT_EQ(cache.stats().hits, 1u);
}

TEST(CompileWithCache, TheKeyIsMakeProgramCacheKeys) {
  in_memory_program_cache cache;
  program p(kSource, source_type::cxx, options());
  p.compile(code_type::ptx, {}, &cache);
  program_cache_key_inputs in;
  in.code = kSource;
  in.options = options();
  in.target = code_type::ptx;
  EXPECT_EQ(*p.last_cache_key(), make_program_cache_key(in));
  EXPECT_TRUE(cache.get(*p.last_cache_key()));
}

// A binding's byte-string name expressions (Python's b"scale<int>") are resolved like text ones,
// and their compile is keyed as make_program_cache_key keys them: apart from the same text.
TEST(CompileWithCache, ByteNameExpressionsResolveAndKeyApart) {
  in_memory_program_cache cache;
  const std::vector<std::string> text = {"scale<int>"};
  const std::vector<std::string> none;
  program as_text(kSource, source_type::cxx, options());
  auto from_text = as_text.compile(code_type::cubin, text, &cache);
  program as_bytes(kSource, source_type::cxx, options());
  auto from_bytes = as_bytes.compile(code_type::cubin, none, text, &cache);
  EXPECT_EQ(as_bytes.last_cache_outcome(), cache_outcome::miss);
  EXPECT_NE(*as_bytes.last_cache_key(), *as_text.last_cache_key());
  EXPECT_EQ(from_bytes.symbol("scale<int>"), "_Z5scaleIiEvPT_S0_");
  EXPECT_EQ(from_bytes, from_text) << "the same compile underneath";
  program_cache_key_inputs in;
  in.code = kSource;
  in.options = options();
  in.byte_name_expressions = text;
  EXPECT_EQ(*as_bytes.last_cache_key(), make_program_cache_key(in));
  // Both kinds at once: one NVRTC expression, both tags in the key.
  program both(kSource, source_type::cxx, options());
  auto from_both = both.compile(code_type::cubin, text, text, &cache);
  EXPECT_EQ(from_both.symbol_mapping().size(), 1u);
  EXPECT_NE(*both.last_cache_key(), *as_text.last_cache_key());
  EXPECT_NE(*both.last_cache_key(), *as_bytes.last_cache_key());
  EXPECT_EQ(cache.size(), 3u);
}

TEST(CompileWithCache, EveryInputThatChangesTheOutputMisses) {
  in_memory_program_cache cache;
  program(kSource, source_type::cxx, options()).compile(code_type::cubin, {}, &cache);
  auto other_arch = options();
  other_arch.arch = "sm_80";
  program a(kSource, source_type::cxx, other_arch);
  a.compile(code_type::cubin, {}, &cache);
  EXPECT_EQ(a.last_cache_outcome(), cache_outcome::miss);
  program b(kSource, source_type::cxx, options());
  b.compile(code_type::ptx, {}, &cache);
  EXPECT_EQ(b.last_cache_outcome(), cache_outcome::miss);
  auto macro_opts = options();
  macro_opts.define_macro = {{"X", "1"}};
  program c(kSource, source_type::cxx, macro_opts);
  c.compile(code_type::cubin, {}, &cache);
  EXPECT_EQ(c.last_cache_outcome(), cache_outcome::miss);
  program d(std::string(kSource) + "\n// edit\n", source_type::cxx, options());
  d.compile(code_type::cubin, {}, &cache);
  EXPECT_EQ(d.last_cache_outcome(), cache_outcome::miss);
  std::vector<std::string> names = {"scale<double>"};
  program e(kSource, source_type::cxx, options());
  e.compile(code_type::cubin, names, &cache);
  EXPECT_EQ(e.last_cache_outcome(), cache_outcome::miss);
  EXPECT_EQ(cache.size(), 6u);
}

TEST(CompileWithCache, PersistentCachesHitAcrossReopen) {
  testing::temp_dir dir;
  std::vector<std::string> names = {"scale<float>"};
  object_code first = [&] {
    file_stream_program_cache cache(dir / "fs");
    return program(kSource, source_type::cxx, options()).compile(code_type::cubin, names, &cache);
  }();
  {
    file_stream_program_cache cache(dir / "fs");
    program p(kSource, source_type::cxx, options());
    auto hit = p.compile(code_type::cubin, names, &cache);
    EXPECT_EQ(p.last_cache_outcome(), cache_outcome::hit);
    EXPECT_EQ(hit, first);
    EXPECT_EQ(hit.symbol("scale<float>"), "_Z5scaleIfEvPT_S0_");
  }
  {
    sqlite_program_cache cache(dir / "c.db");
    program(kSource, source_type::cxx, options()).compile(code_type::cubin, names, &cache);
  }
  {
    sqlite_program_cache cache(dir / "c.db");
    program p(kSource, source_type::cxx, options());
    auto hit = p.compile(code_type::cubin, names, &cache);
    EXPECT_EQ(p.last_cache_outcome(), cache_outcome::hit);
    EXPECT_EQ(hit, first);
  }
}

TEST(CompileWithCache, PersistentCacheRemembersCompilerVersions) {
  testing::temp_dir dir;
  file_stream_program_cache cache(dir / "fs");
  ASSERT_TRUE(cache.compiler_version_memo());
  program(kSource, source_type::cxx, options()).compile(code_type::cubin, {}, &cache);
  const auto memo = testing::read_text(*cache.compiler_version_memo());
  // Its format (magic, version, length-prefixed records, XXH3): key/compiler_version_memo.cpp.
  EXPECT_EQ(memo.substr(0, 8), "CUCORECV") << memo;
  EXPECT_TRUE(contains(memo, std::string("\x05\0\0\0nvrtc", 9))) << memo;
  EXPECT_TRUE(contains(memo, "libnvrtc.so")) << memo;
}

// The message of the extra_digest_required `p` throws compiling to a cubin through `cache` (a
// failure, and "", where it compiles).
std::string refusal_through(program_cache& cache, program& p) {
  try {
    p.compile(code_type::cubin, {}, &cache);
  } catch (const extra_digest_required& e) {
    return e.what();
  }
  ADD_FAILURE() << "compiled through the cache: the key cannot see all its inputs";
  return {};
}

TEST(CompileWithCache, InputsTheKeyCannotSeeAreRefusedWithAPointer) {
  in_memory_program_cache cache;
  // Precompiled headers: files no key can see.
  auto o = options();
  o.pch = true;
  program p(kSource, source_type::cxx, o);
  std::string why = refusal_through(cache, p);
  EXPECT_TRUE(contains(why, "pch")) << why;
  EXPECT_TRUE(contains(why, "make_program_cache_key")) << why;
  EXPECT_EQ(cache.size(), 0u);

  // An include through a macro whose value cannot be worked out (NVRTC predefines it: 13).
  testing::temp_dir dir;
  testing::write_text(dir / "13.cuh", "#include <cuda/std/cstdint>\n");
  const std::string computed =
      "#define STR2(x) #x\n#define STR(x) STR2(x)\n#include STR(__CUDACC_VER_MAJOR__.cuh)\n" +
      std::string(kSource);
  auto with_dir = options();
  with_dir.include_path = {dir.path().string()};
  program q(computed, source_type::cxx, with_dir);
  why = refusal_through(cache, q);
  EXPECT_TRUE(contains(why, "STR(__CUDACC_VER_MAJOR__.cuh)")) << why;
  EXPECT_TRUE(contains(why, "make_program_cache_key")) << why;
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_NO_THROW(q.compile(code_type::cubin));  // without the cache it compiles

  auto side_effect = options();
  side_effect.time = "timing.csv";
  EXPECT_THROW(
      program(kSource, source_type::cxx, side_effect).compile(code_type::cubin, {}, &cache),
      invalid_argument);
}

// include_path and pre_include used to need an extra_digest: the key now tracks what they read.
TEST(CompileWithCache, IncludePathAndPreIncludeAreCached) {
  testing::temp_dir dir;
  testing::write_text(dir / "scale.cuh", "#define SCALE 3\n");
  in_memory_program_cache cache;
  auto o = options();
  o.include_path = {dir.path().string()};
  o.pre_include = {"scale.cuh"};
  const std::string code = "extern \"C\" __global__ void k(int* x) { *x = SCALE; }";
  program first(code, source_type::cxx, o);
  auto a = first.compile(code_type::ptx, {}, &cache);
  EXPECT_EQ(first.last_cache_outcome(), cache_outcome::miss);
  ASSERT_TRUE(first.last_cache_key());
  EXPECT_TRUE(first.last_cache_key()->includes().tracked);
  EXPECT_EQ(first.last_cache_key()->includes().files, 1u);
  program second(code, source_type::cxx, o);
  EXPECT_EQ(second.compile(code_type::ptx, {}, &cache), a);
  EXPECT_EQ(second.last_cache_outcome(), cache_outcome::hit);
}

TEST(CompileWithCache, CompileFailureStoresNothing) {
  in_memory_program_cache cache;
  program p("__global__ void k() { syntax error }", source_type::cxx, options());
  EXPECT_THROW(p.compile(code_type::cubin, {}, &cache), compile_error);
  EXPECT_EQ(p.last_cache_outcome(), cache_outcome::miss);
  EXPECT_EQ(cache.size(), 0u);
}

// Forwards to a cache, but every write fails, as a full or read-only disk would make a strict
// cache do.
class failing_cache final : public testing::forwarding_cache {
 public:
  using forwarding_cache::forwarding_cache;
  void put(cache_key_ref, const object_code&) override { throw error("disk full"); }
  std::string description() const override { return "failing"; }
};

TEST(CompileWithCache, AFailedStoreNeverFailsTheCompile) {
  in_memory_program_cache inner;
  failing_cache cache(inner);
  testing::log_capture logs;
  program p(kSource, source_type::cxx, options());
  auto code = p.compile(code_type::ptx, {}, &cache);
  const auto warnings = logs.at(log_level::warning);
  EXPECT_TRUE(contains(code.text(), ".entry plain"));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(contains(warnings[0], "disk full"));
}

TEST(CompileWithCache, NvvmAndPtxGoThroughTheCacheToo) {
  in_memory_program_cache cache;
  const auto ir = testing::data_file("scale.ll");
  program n1(ir, source_type::nvvm, options());
  auto a = n1.compile(code_type::ptx, {}, &cache);
  program n2(ir, source_type::nvvm, options());
  auto b = n2.compile(code_type::ptx, {}, &cache);
  EXPECT_EQ(n2.last_cache_outcome(), cache_outcome::hit);
  EXPECT_EQ(a, b);

  auto ptx = program(kSource, source_type::cxx, options()).compile(code_type::ptx);
  program p1(std::string(ptx.text()), source_type::ptx, options());
  auto c = p1.compile(code_type::cubin, {}, &cache);
  program p2(std::string(ptx.text()), source_type::ptx, options());
  auto d = p2.compile(code_type::cubin, {}, &cache);
  EXPECT_EQ(p2.last_cache_outcome(), cache_outcome::hit);
  EXPECT_EQ(c, d);
}

TEST(CompileWithCache, WithoutACacheNothingIsKeyed) {
  program p(kSource, source_type::cxx, options());
  p.compile(code_type::ptx);
  EXPECT_EQ(p.last_cache_outcome(), cache_outcome::off);
  EXPECT_FALSE(p.last_cache_key());
}

// Issue 39: ptxas reads the file --ptxas-options=--options-file=FILE names, which the key does not
// walk. The compile bypasses the cache, so each edit of FILE gives what an uncached compile gives:
// the same cubin, or the same failure.
TEST(CompileWithCache, PtxasOptionsFileBypassesTheCache) {
  constexpr const char* kPressure = R"(
extern "C" __global__ void k(float* a, float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i % 7] + __sinf(a[i + 1]);
  a[0] = s;
})";
  testing::temp_dir dir;
  in_memory_program_cache cache;
  // The cubin's bytes, or "failed: " and the log.
  const auto compile = [&](const std::vector<std::string>& ptxas, bool cached) {
    program_options o = options();
    o.ptxas_options = ptxas;
    program p(kPressure, source_type::cxx, o);
    try {
      const object_code out =
          cached ? p.compile(code_type::cubin, {}, &cache) : p.compile(code_type::cubin);
      return std::string(out.text());
    } catch (const compile_error& e) {
      return "failed: " + std::string(e.what());
    }
  };
  std::vector<std::string> results;
  // A file name of its own per edit: where a driver is installed, NVRTC's ptxas keeps its results
  // in the driver's compute cache under the option string, which does not see the file's contents
  // either (measured on the GPU machine: the garbage file "compiled"), so an edit under the same
  // name would not show in an uncached compile there.
  int edits = 0;
  for (const auto& spelling :
       std::vector<std::vector<std::string>>{{"--options-file="}, {"-optf="}, {"-optf", ""}}) {
    SCOPED_TRACE(spelling.front());
    for (const char* contents :
         {"--maxrregcount=24\n", "--maxrregcount=64\n", "-O0\n", "--no-such-ptxas-option\n"}) {
      SCOPED_TRACE(contents);
      const std::string file = (dir / ("ptxas" + std::to_string(edits++) + ".opts")).string();
      testing::write_text(file, contents);
      std::vector<std::string> with_file = spelling;
      with_file.back() += file;
      const auto& spelling_of = with_file;
      const std::string cached = compile(spelling_of, true);
      EXPECT_EQ(cached, compile(spelling_of, false));
      EXPECT_EQ(compile(spelling_of, true), cached);  // again: still no stale hit
      results.push_back(cached);
    }
  }
  // The file was read: its contents changed the output, and the garbage failed the compile.
  EXPECT_NE(results[0], results[2]);
  EXPECT_TRUE(results[3].starts_with("failed: ")) << results[3].substr(0, 200);
  EXPECT_FALSE(results[0].starts_with("failed: ")) << results[0].substr(0, 200);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.stats().hits, 0u);
  // An ordinary ptxas option is still cached.
  program_options o = options();
  o.ptxas_options = {"--maxrregcount=64"};
  program first(kPressure, source_type::cxx, o);
  first.compile(code_type::cubin, {}, &cache);
  program second(kPressure, source_type::cxx, o);
  second.compile(code_type::cubin, {}, &cache);
  EXPECT_EQ(second.last_cache_outcome(), cache_outcome::hit);
}

}  // namespace
}  // namespace cucore
