// Include tracking end to end with one cache: deleted, macro-named, pre-included and in-memory
// headers, toolkit headers, --no-source-include, explain, and the stats-only second derivation
// (include_tracking_test_support.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "include_tracking_test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using namespace include_tracking_testing;  // include_tracking_test_support.hpp
using include_tracking_testing::kernel;    // not cucore::kernel, the runtime's

// ---------------------------------------------------------------------------------------------
// Scenarios with one cache.

// 4.
TEST(IncludeTrackingScenario, DeletedHeaderIsACompileErrorNeverAHit) {
  temp_dir src;
  in_memory_program_cache cache;
  const fs::path file = src / "k.cu";
  write_text(src / "gone.cuh", defines_value(4001));
  const std::string code = kernel("#include \"gone.cuh\"");
  auto first = expect_compile(cache, code, named(file), cache_outcome::miss);
  expect_compile(cache, code, named(file), cache_outcome::hit);

  fs::remove(src / "gone.cuh");
  for (int attempt = 0; attempt < 2; ++attempt) {
    program cached(code, source_type::cxx, named(file));
    EXPECT_THROW(cached.compile(code_type::ptx, {}, &cache), compile_error);
    EXPECT_EQ(outcome(cached), "miss");
    EXPECT_THROW(program(code, source_type::cxx, named(file)).compile(code_type::ptx),
                 compile_error);
  }
  const auto key = key_of(cache, code, named(file));
  EXPECT_EQ(key.includes().files, 0u);
  EXPECT_TRUE(explain_mentions(key, (src / "gone.cuh").string() + " (absent)"));
  EXPECT_EQ(cache.size(), 1u);

  // Restored with the same contents: the first key, a hit.
  write_text(src / "gone.cuh", defines_value(4001));
  auto back = expect_compile(cache, code, named(file), cache_outcome::hit);
  EXPECT_TRUE(back == first);
}

// 7.
TEST(IncludeTrackingScenario, MacroNamedIncludeIsTracked) {
  temp_dir src;
  in_memory_program_cache cache;
  const fs::path file = src / "k.cu";
  write_text(src / "h.cuh", defines_value(7001));

  // Defined in the code.
  const std::string in_code = kernel("#define H \"h.cuh\"\n#include H");
  auto first = expect_compile(cache, in_code, named(file), cache_outcome::miss);
  EXPECT_TRUE(stores(first, 7001)) << first.text();
  expect_compile(cache, in_code, named(file), cache_outcome::hit);
  EXPECT_EQ(key_of(cache, in_code, named(file)).includes().files, 1u);
  write_text(src / "h.cuh", defines_value(7002));
  auto edited = expect_compile(cache, in_code, named(file), cache_outcome::miss);
  EXPECT_TRUE(stores(edited, 7002)) << edited.text();
  expect_compile(cache, in_code, named(file), cache_outcome::hit);

  // Defined on the command line.
  auto o = named(file);
  o.define_macro = {macro{"H", "\"h.cuh\""}};
  const std::string by_flag = kernel("#include H");
  auto flagged = expect_compile(cache, by_flag, o, cache_outcome::miss);
  EXPECT_TRUE(stores(flagged, 7002)) << flagged.text();
  expect_compile(cache, by_flag, o, cache_outcome::hit);
  write_text(src / "h.cuh", defines_value(7003));
  flagged = expect_compile(cache, by_flag, o, cache_outcome::miss);
  EXPECT_TRUE(stores(flagged, 7003)) << flagged.text();
  expect_compile(cache, by_flag, o, cache_outcome::hit);

  // Through function-like macros (stringized, and CUTLASS's CUDA_STD_HEADER form): tracked.
  const std::string stringized = kernel("#define STR(x) #x\n#include STR(h.cuh)");
  auto by_function = expect_compile(cache, stringized, named(file), cache_outcome::miss);
  EXPECT_TRUE(stores(by_function, 7003)) << by_function.text();
  expect_compile(cache, stringized, named(file), cache_outcome::hit);
  write_text(src / "h.cuh", defines_value(7004));
  by_function = expect_compile(cache, stringized, named(file), cache_outcome::miss);
  EXPECT_TRUE(stores(by_function, 7004)) << by_function.text();
  fs::create_directories(src / "sub");
  write_text(src / "sub" / "h", defines_value(7005));
  o = named(file);
  o.include_path = {src.path().string()};
  const std::string angled = kernel("#define SUB_HEADER(name) <sub/name>\n#include SUB_HEADER(h)");
  auto by_angle = expect_compile(cache, angled, o, cache_outcome::miss);
  EXPECT_TRUE(stores(by_angle, 7005)) << by_angle.text();
  write_text(src / "sub" / "h", defines_value(7006));
  by_angle = expect_compile(cache, angled, o, cache_outcome::miss);
  EXPECT_TRUE(stores(by_angle, 7006)) << by_angle.text();

  // Through a predefined macro whose value the key cannot know: refused without an extra_digest.
  write_text(src / "13.cuh", defines_value(7007));
  const std::string versioned =
      kernel("#define STR2(x) #x\n#define STR(x) STR2(x)\n#include STR(__CUDACC_VER_MAJOR__.cuh)");
  program_cache_key_inputs in;
  in.code = versioned;
  in.options = named(file);
  in.target = code_type::ptx;
  try {
    (void)make_program_cache_key(in);
    ADD_FAILURE() << "a key for an include through a predefined macro";
  } catch (const extra_digest_required& e) {
    EXPECT_TRUE(contains(e.what(), "STR(__CUDACC_VER_MAJOR__.cuh)")) << e.what();
    EXPECT_TRUE(contains(e.what(), "extra_digest")) << e.what();
  }
  const std::size_t entries = cache.size();
  program through_cache(versioned, source_type::cxx, named(file));
  EXPECT_THROW(through_cache.compile(code_type::ptx, {}, &cache), invalid_argument);
  EXPECT_EQ(cache.size(), entries);
  // NVRTC itself compiles it (the header is found): only the key cannot follow.
  EXPECT_TRUE(
      stores(program(versioned, source_type::cxx, named(file)).compile(code_type::ptx), 7007));

  in.extra_digest = "fingerprint of 13.cuh";
  const auto vouched = make_program_cache_key(in);
  EXPECT_TRUE(vouched.includes().tracked);
  ASSERT_FALSE(vouched.includes().vouched.empty());
  EXPECT_TRUE(contains(vouched.includes().vouched[0], "STR(__CUDACC_VER_MAJOR__.cuh)"))
      << vouched.includes().vouched[0];
  EXPECT_TRUE(explain_mentions(vouched, "covered by extra_digest"));
}

// 8.
TEST(IncludeTrackingScenario, HasIncludeOfAFileThatAppearsLater) {
  temp_dir src;
  in_memory_program_cache cache;
  const fs::path file = src / "k.cu";
  const std::string code = kernel(
      "#if __has_include(\"later.cuh\")\n#include \"later.cuh\"\n#else\n#define VALUE 8001\n"
      "#endif");
  auto without = expect_compile(cache, code, named(file), cache_outcome::miss);
  EXPECT_TRUE(stores(without, 8001)) << without.text();
  expect_compile(cache, code, named(file), cache_outcome::hit);

  write_text(src / "later.cuh", defines_value(8002));
  auto with = expect_compile(cache, code, named(file), cache_outcome::miss);
  EXPECT_TRUE(stores(with, 8002)) << with.text();
  expect_compile(cache, code, named(file), cache_outcome::hit);

  // Gone again: the first key, a hit with the first bytes.
  fs::remove(src / "later.cuh");
  auto gone = expect_compile(cache, code, named(file), cache_outcome::hit);
  EXPECT_TRUE(gone == without);
}

// 9.
TEST(IncludeTrackingScenario, PreIncludeEditedMisses) {
  temp_dir src;
  in_memory_program_cache cache;
  const fs::path file = src / "k.cu";
  const std::string code = kernel("");

  auto by_path = named(file);
  by_path.pre_include = {(src / "pre.cuh").string()};
  auto by_search = named(file);
  by_search.pre_include = {"pre.cuh"};
  by_search.include_path = {src.path().string()};
  for (const auto* o : {&by_path, &by_search}) {
    SCOPED_TRACE(o->pre_include[0]);
    write_text(src / "pre.cuh", defines_value(9001));
    auto first = expect_compile(cache, code, *o, cache_outcome::miss);
    EXPECT_TRUE(stores(first, 9001)) << first.text();
    expect_compile(cache, code, *o, cache_outcome::hit);
    EXPECT_EQ(key_of(cache, code, *o).includes().files, 1u);

    write_text(src / "pre.cuh", defines_value(9002));
    auto edited = expect_compile(cache, code, *o, cache_outcome::miss);
    EXPECT_TRUE(stores(edited, 9002)) << edited.text();
    expect_compile(cache, code, *o, cache_outcome::hit);
  }
}

// 10. NVRTC 13 (checked with nvrtcCreateProgram directly): an in-memory header wins over a file of
// the same name beside the program.
TEST(IncludeTrackingScenario, InMemoryHeadersAndNotTheDiskFileOfTheSameName) {
  temp_dir src;
  in_memory_program_cache cache;
  const fs::path file = src / "k.cu";
  write_text(src / "mem.cuh", defines_value(10222));  // must not be what compiles
  auto o = named(file);
  o.headers = {{"mem.cuh", defines_value(10111)}};
  const std::string code = kernel("#include \"mem.cuh\"");

  auto first = expect_compile(cache, code, o, cache_outcome::miss);
  EXPECT_TRUE(stores(first, 10111)) << first.text();
  EXPECT_FALSE(stores(first, 10222)) << first.text();
  expect_compile(cache, code, o, cache_outcome::hit);
  const auto key = key_of(cache, code, o);
  EXPECT_TRUE(key.includes().tracked);
  EXPECT_EQ(key.includes().in_memory, 1u);
  EXPECT_EQ(key.includes().files, 0u);
  EXPECT_FALSE(explain_mentions(key, (src / "mem.cuh").string()))
      << "the disk file of the in-memory header's name entered the key";

  // The disk file edited or removed: not consulted, still a hit with the same bytes.
  write_text(src / "mem.cuh", defines_value(10333));
  auto still = expect_compile(cache, code, o, cache_outcome::hit);
  EXPECT_TRUE(still == first);
  fs::remove(src / "mem.cuh");
  expect_compile(cache, code, o, cache_outcome::hit);

  // The in-memory contents changed: a miss, the new value.
  o.headers[0].contents = defines_value(10444);
  auto changed = expect_compile(cache, code, o, cache_outcome::miss);
  EXPECT_TRUE(stores(changed, 10444)) << changed.text();
  expect_compile(cache, code, o, cache_outcome::hit);

  // An in-memory header that includes a file from disk: that file is tracked too.
  write_text(src / "disk.cuh", defines_value(10555));
  o.headers[0].contents = "#include \"" + (src / "disk.cuh").string() + "\"\n";
  auto nested = expect_compile(cache, code, o, cache_outcome::miss);
  EXPECT_TRUE(stores(nested, 10555)) << nested.text();
  write_text(src / "disk.cuh", defines_value(10556));
  nested = expect_compile(cache, code, o, cache_outcome::miss);
  EXPECT_TRUE(stores(nested, 10556)) << nested.text();
}

constexpr const char* kComplex = R"(#include <cuda/std/complex>
extern "C" __global__ void k(float* out) {
  cuda::std::complex<float> c(out[0], out[1]);
  out[2] = cuda::std::abs(c * c);
}
)";

// 11.
TEST(IncludeTrackingScenario, ToolkitHeadersCompileWithNoFlagsAndAreCached) {
  ASSERT_FALSE(toolkit::include_directories().empty()) << "NVRTC is not under a CUDA root";
  in_memory_program_cache cache;
  program_options o;
  o.arch = testing::kArch;
  expect_compile(cache, kComplex, o, cache_outcome::miss);
  expect_compile(cache, kComplex, o, cache_outcome::hit);
  const auto key = key_of(cache, kComplex, o);
  EXPECT_TRUE(key.includes().tracked);
  EXPECT_GT(key.includes().files, 100u);
  EXPECT_TRUE(explain_mentions(key, toolkit::include_directories().front() + "/cuda/std/complex"));

  o.toolkit_include_path = false;
  program cached(kComplex, source_type::cxx, o);
  EXPECT_THROW(cached.compile(code_type::ptx, {}, &cache), compile_error);
  EXPECT_EQ(outcome(cached), "miss");
  EXPECT_THROW(program(kComplex, source_type::cxx, o).compile(code_type::ptx), compile_error);
}

// 12.
TEST(IncludeTrackingScenario, SameSourceInTwoDirectoriesKeepsItsOwnHeader) {
  temp_dir x;
  temp_dir y;
  in_memory_program_cache cache;
  const std::string code = kernel("#include \"h.cuh\"");
  write_text(x / "h.cuh", defines_value(12001));
  write_text(y / "h.cuh", defines_value(12002));
  write_text(x / "k.cu", code);
  write_text(y / "k.cu", code);

  auto from_x = expect_compile(cache, code, named(x / "k.cu"), cache_outcome::miss);
  auto from_y = expect_compile(cache, code, named(y / "k.cu"), cache_outcome::miss);
  EXPECT_TRUE(stores(from_x, 12001)) << from_x.text();
  EXPECT_TRUE(stores(from_y, 12002)) << from_y.text();
  EXPECT_NE(key_of(cache, code, named(x / "k.cu")), key_of(cache, code, named(y / "k.cu")));
  for (int round = 0; round < 2; ++round) {
    EXPECT_TRUE(expect_compile(cache, code, named(x / "k.cu"), cache_outcome::hit) == from_x);
    EXPECT_TRUE(expect_compile(cache, code, named(y / "k.cu"), cache_outcome::hit) == from_y);
  }
  EXPECT_EQ(cache.size(), 2u);
}

// 13.
TEST(IncludeTrackingScenario, NoSourceIncludeDoesNotReadBesideTheName) {
  temp_dir src;
  temp_dir inc;
  in_memory_program_cache cache;
  const fs::path file = src / "k.cu";
  write_text(src / "h.cuh", "#error \"the header beside the program must not be read\"\n");
  write_text(inc / "h.cuh", defines_value(13001));
  const std::string code = kernel("#include \"h.cuh\"");
  auto o = named(file);
  o.include_path = {inc.path().string()};
  const std::string beside = (src / "h.cuh").string();

  // Without no_source_include: accepted, the header beside the name is in the key (and breaks
  // the compile).
  const auto searched = key_of(cache, code, o);
  EXPECT_TRUE(explain_mentions(searched, beside + " ("));
  EXPECT_FALSE(explain_mentions(searched, (inc / "h.cuh").string())) << "not searched that far";
  program broken(code, source_type::cxx, o);
  EXPECT_THROW(broken.compile(code_type::ptx, {}, &cache), compile_error);

  o.no_source_include = true;
  const auto not_searched = key_of(cache, code, o);
  EXPECT_FALSE(explain_mentions(not_searched, beside)) << "a field for the skipped candidate";
  EXPECT_TRUE(explain_mentions(not_searched, (inc / "h.cuh").string() + " ("));
  auto fine = expect_compile(cache, code, o, cache_outcome::miss);
  EXPECT_TRUE(stores(fine, 13001)) << fine.text();
  expect_compile(cache, code, o, cache_outcome::hit);
  // Editing the skipped file changes nothing.
  write_text(src / "h.cuh", "#error \"still not read\"\n");
  expect_compile(cache, code, o, cache_outcome::hit);
}

std::string sha256sum(const fs::path& file) {
  const std::string command = "sha256sum '" + file.string() + "'";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {};
  char buffer[65] = {};
  const std::size_t n = std::fread(buffer, 1, 64, pipe);
  ::pclose(pipe);
  return std::string(buffer, n);
}

// 14.
TEST(IncludeTrackingScenario, ExplainListsHeadersWithDigestsAndAbsentCandidates) {
  temp_dir src;
  temp_dir a;
  temp_dir b;
  const fs::path file = src / "k.cu";
  const std::string contents = defines_value(14001);
  write_text(b / "h.cuh", contents);
  auto o = named(file);
  o.include_path = {a.path().string(), b.path().string()};
  const std::string code = kernel("#include \"h.cuh\"");

  program_cache_key_inputs in;
  in.code = code;
  in.options = o;
  in.target = code_type::ptx;
  const auto key = make_program_cache_key(in);
  const std::string digest = sha256sum(b / "h.cuh");
  ASSERT_EQ(digest.size(), 64u);
  const std::vector<key_field> expected = {
      {"headers_count", "3"},
      {"header_absent", (src / "h.cuh").string() + " (absent)"},
      {"header_absent", (a / "h.cuh").string() + " (absent)"},
      {"header", (b / "h.cuh").string() + " (" + std::to_string(contents.size()) +
                     " bytes, sha256 " + digest + ")"},
  };
  EXPECT_EQ(header_fields(key), expected);
  // Right after the program name.
  const auto& fields = key.explain();
  const auto name = std::find_if(fields.begin(), fields.end(),
                                 [](const key_field& f) { return f.label == "options_name"; });
  ASSERT_GE(fields.end() - name, 5);
  EXPECT_EQ(name[1].label, "headers_count");
  EXPECT_EQ(name[4].label, "header");
  EXPECT_EQ(key.includes().files, 1u);
  EXPECT_EQ(key.includes().absent, 2u);
  EXPECT_EQ(key.includes().in_memory, 0u);
  EXPECT_TRUE(key.includes().vouched.empty());

  // In-memory headers: each listed with its digest (all of them: NVRTC gets them all), then the
  // closure, where the one the code includes stands as in memory.
  in.options.headers = {{"h.cuh", contents}, {"unused.cuh", "// nothing"}};
  const auto memory = make_program_cache_key(in);
  const auto fields_m = header_fields(memory);
  ASSERT_GE(fields_m.size(), 5u);
  EXPECT_EQ(fields_m[0], (key_field{"memory_headers_count", "2"}));
  EXPECT_EQ(fields_m[1], (key_field{"memory_header", "h.cuh (" + std::to_string(contents.size()) +
                                                         " bytes, sha256 " + digest + ")"}));
  EXPECT_EQ(fields_m[2].label, "memory_header");
  EXPECT_TRUE(contains(fields_m[2].payload, "unused.cuh (")) << fields_m[2].payload;
  EXPECT_EQ(fields_m[3].label, "headers_count");
  EXPECT_NE(std::find(fields_m.begin(), fields_m.end(),
                      key_field{"header_in_memory", "h.cuh (in memory)"}),
            fields_m.end());
  for (const auto& f : fields_m) {
    EXPECT_NE(f.label, "header") << f.payload << ": the in-memory header comes first";
    EXPECT_NE(f.label, "header_absent") << f.payload << ": the in-memory header comes first";
  }
  EXPECT_NE(memory, key);
}

// 15.
TEST(IncludeTrackingScenario, SecondDerivationOfSettledHeadersIsStatsOnly) {
  program_cache_key_inputs in;
  in.code = kComplex;
  in.options.arch = testing::kArch;
  in.target = code_type::ptx;
  const auto first = make_program_cache_key(in);
  const auto second = make_program_cache_key(in);
  EXPECT_EQ(first, second);
  EXPECT_GT(second.includes().files, 100u);
  EXPECT_EQ(second.includes().hashed, 0u);
  EXPECT_TRUE(second.includes().stat_fast_path());

  // A header written just now is hashed on every derivation, never memoised.
  temp_dir src;
  write_text(src / "fresh.cuh", defines_value(15001));
  const std::string code = std::string("#include \"fresh.cuh\"\n") + kComplex;
  in.code = code;
  in.options.name = (src / "k.cu").string();
  for (int i = 0; i < 3; ++i) {
    const auto k = make_program_cache_key(in);
    EXPECT_EQ(k.includes().hashed, 1u) << "derivation " << i;
    EXPECT_FALSE(k.includes().stat_fast_path());
  }
  // Settled (its times well in the past; ctime is still now, so still hashed).
  set_times(src / "fresh.cuh", 1'000'000'000);
  EXPECT_EQ(make_program_cache_key(in).includes().hashed, 1u);
  // No headers at all: nothing tracked, no fast path to report.
  in.code = "extern \"C\" __global__ void k() {}";
  EXPECT_FALSE(make_program_cache_key(in).includes().tracked);
  EXPECT_FALSE(make_program_cache_key(in).includes().stat_fast_path());
}

}  // namespace
}  // namespace cucore
