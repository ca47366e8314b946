// Include tracking end to end (include_tracking_test_support.hpp: the oracle), scenarios with one
// cache: deleted, macro-named, later and pre-included headers, in-memory and toolkit headers, the
// key's explanation, and the reused walk of settled headers.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/toolkit.hpp"
#include "include_tracking_test_support.hpp"

namespace cucore {
namespace {

using namespace cucore::testing;  // NOLINT: the include tracking oracle and its helpers

// Whether any explain() payload mentions `text`.
bool explain_mentions(const program_cache_key& key, const std::string& text) {
  for (const auto& f : key.explain()) {
    if (contains(f.payload, text)) return true;
  }
  return false;
}

std::vector<key_field> header_fields(const program_cache_key& key) {
  std::vector<key_field> out;
  for (const auto& f : key.explain()) {
    if (f.label == "headers_count" || f.label == "header" || f.label == "header_absent" ||
        f.label == "header_in_memory" || f.label == "memory_header" ||
        f.label == "memory_headers_count" || f.label == "untracked_include") {
      out.push_back(f);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Scenarios with one cache.

// A program's directory, its file's name there, and an in-memory cache.
class IncludeTrackingScenario : public ::testing::Test {
 protected:
  temp_dir src_;
  const fs::path file_ = src_ / "k.cu";
  in_memory_program_cache cache_;
};

// 4.
TEST_F(IncludeTrackingScenario, DeletedHeaderIsACompileErrorNeverAHit) {
  write_text(src_ / "gone.cuh", defines_value(4001));
  const std::string code = value_kernel("#include \"gone.cuh\"");
  auto first = expect_compile(cache_, code, named(file_), cache_outcome::miss);
  expect_compile(cache_, code, named(file_), cache_outcome::hit);

  fs::remove(src_ / "gone.cuh");
  for (int attempt = 0; attempt < 2; ++attempt) {
    program cached(code, source_type::cxx, named(file_));
    EXPECT_THROW(cached.compile(code_type::ptx, {}, &cache_), compile_error);
    EXPECT_EQ(outcome(cached), "miss");
    EXPECT_THROW(program(code, source_type::cxx, named(file_)).compile(code_type::ptx),
                 compile_error);
  }
  const auto key = key_of(cache_, code, named(file_));
  EXPECT_EQ(key.includes().files, 0u);
  EXPECT_TRUE(explain_mentions(key, (src_ / "gone.cuh").string() + " (absent)"));
  EXPECT_EQ(cache_.size(), 1u);

  // Restored with the same contents: the first key, a hit.
  write_text(src_ / "gone.cuh", defines_value(4001));
  auto back = expect_compile(cache_, code, named(file_), cache_outcome::hit);
  EXPECT_TRUE(back == first);
}

// 7.
TEST_F(IncludeTrackingScenario, MacroNamedIncludeIsTracked) {
  write_text(src_ / "h.cuh", defines_value(7001));

  // Defined in the code.
  const std::string in_code = value_kernel("#define H \"h.cuh\"\n#include H");
  auto first = expect_miss_then_hit(cache_, in_code, named(file_), 7001);
  EXPECT_EQ(key_of(cache_, in_code, named(file_)).includes().files, 1u);
  write_text(src_ / "h.cuh", defines_value(7002));
  expect_miss_then_hit(cache_, in_code, named(file_), 7002);

  // Defined on the command line.
  auto o = named(file_);
  o.define_macro = {macro{"H", "\"h.cuh\""}};
  const std::string by_flag = value_kernel("#include H");
  expect_miss_then_hit(cache_, by_flag, o, 7002);
  write_text(src_ / "h.cuh", defines_value(7003));
  expect_miss_then_hit(cache_, by_flag, o, 7003);

  // Through function-like macros (stringized, and CUTLASS's CUDA_STD_HEADER form): tracked.
  const std::string stringized = value_kernel("#define STR(x) #x\n#include STR(h.cuh)");
  expect_miss_then_hit(cache_, stringized, named(file_), 7003);
  write_text(src_ / "h.cuh", defines_value(7004));
  expect_miss_storing(cache_, stringized, named(file_), 7004);
  fs::create_directories(src_ / "sub");
  write_text(src_ / "sub" / "h", defines_value(7005));
  o = named(file_);
  o.include_path = {src_.path().string()};
  const std::string angled =
      value_kernel("#define SUB_HEADER(name) <sub/name>\n#include SUB_HEADER(h)");
  expect_miss_storing(cache_, angled, o, 7005);
  write_text(src_ / "sub" / "h", defines_value(7006));
  expect_miss_storing(cache_, angled, o, 7006);

  // Through a predefined macro whose value the key cannot know: refused without an extra_digest.
  write_text(src_ / "13.cuh", defines_value(7007));
  const std::string versioned = value_kernel(
      "#define STR2(x) #x\n#define STR(x) STR2(x)\n#include STR(__CUDACC_VER_MAJOR__.cuh)");
  program_cache_key_inputs in = inputs_of(versioned, named(file_));
  expect_digest_demanded(in, "a key for an include through a predefined macro",
                         {"STR(__CUDACC_VER_MAJOR__.cuh)", "extra_digest"});
  const std::size_t entries = cache_.size();
  program through_cache(versioned, source_type::cxx, named(file_));
  EXPECT_THROW(through_cache.compile(code_type::ptx, {}, &cache_), invalid_argument);
  EXPECT_EQ(cache_.size(), entries);
  // NVRTC itself compiles it (the header is found): only the key cannot follow.
  EXPECT_TRUE(
      stores(program(versioned, source_type::cxx, named(file_)).compile(code_type::ptx), 7007));

  in.extra_digest = "fingerprint of 13.cuh";
  const auto vouched = make_program_cache_key(in);
  EXPECT_TRUE(vouched.includes().tracked);
  ASSERT_FALSE(vouched.includes().vouched.empty());
  EXPECT_TRUE(contains(vouched.includes().vouched[0], "STR(__CUDACC_VER_MAJOR__.cuh)"))
      << vouched.includes().vouched[0];
  EXPECT_TRUE(explain_mentions(vouched, "covered by extra_digest"));
}

// 8.
TEST_F(IncludeTrackingScenario, HasIncludeOfAFileThatAppearsLater) {
  const std::string code = value_kernel(
      "#if __has_include(\"later.cuh\")\n#include \"later.cuh\"\n#else\n#define VALUE 8001\n"
      "#endif");
  auto without = expect_miss_then_hit(cache_, code, named(file_), 8001);

  write_text(src_ / "later.cuh", defines_value(8002));
  expect_miss_then_hit(cache_, code, named(file_), 8002);

  // Gone again: the first key, a hit with the first bytes.
  fs::remove(src_ / "later.cuh");
  auto gone = expect_compile(cache_, code, named(file_), cache_outcome::hit);
  EXPECT_TRUE(gone == without);
}

// 9.
TEST_F(IncludeTrackingScenario, PreIncludeEditedMisses) {
  const std::string code = value_kernel("");

  auto by_path = named(file_);
  by_path.pre_include = {(src_ / "pre.cuh").string()};
  auto by_search = named(file_);
  by_search.pre_include = {"pre.cuh"};
  by_search.include_path = {src_.path().string()};
  for (const auto* o : {&by_path, &by_search}) {
    SCOPED_TRACE(o->pre_include[0]);
    write_text(src_ / "pre.cuh", defines_value(9001));
    auto first = expect_miss_then_hit(cache_, code, *o, 9001);
    EXPECT_EQ(key_of(cache_, code, *o).includes().files, 1u);

    write_text(src_ / "pre.cuh", defines_value(9002));
    expect_miss_then_hit(cache_, code, *o, 9002);
  }
}

// 10. NVRTC 13 (checked with nvrtcCreateProgram directly): an in-memory header wins over a file of
// the same name beside the program.
TEST_F(IncludeTrackingScenario, InMemoryHeadersAndNotTheDiskFileOfTheSameName) {
  write_text(src_ / "mem.cuh", defines_value(10222));  // must not be what compiles
  auto o = named(file_);
  o.headers = {{"mem.cuh", defines_value(10111)}};
  const std::string code = value_kernel("#include \"mem.cuh\"");

  auto first = expect_miss_storing(cache_, code, o, 10111);
  EXPECT_FALSE(stores(first, 10222)) << first.text();
  expect_compile(cache_, code, o, cache_outcome::hit);
  const auto key = key_of(cache_, code, o);
  EXPECT_TRUE(key.includes().tracked);
  EXPECT_EQ(key.includes().in_memory, 1u);
  EXPECT_EQ(key.includes().files, 0u);
  EXPECT_FALSE(explain_mentions(key, (src_ / "mem.cuh").string()))
      << "the disk file of the in-memory header's name entered the key";

  // The disk file edited or removed: not consulted, still a hit with the same bytes.
  write_text(src_ / "mem.cuh", defines_value(10333));
  auto still = expect_compile(cache_, code, o, cache_outcome::hit);
  EXPECT_TRUE(still == first);
  fs::remove(src_ / "mem.cuh");
  expect_compile(cache_, code, o, cache_outcome::hit);

  // The in-memory contents changed: a miss, the new value.
  o.headers[0].contents = defines_value(10444);
  expect_miss_then_hit(cache_, code, o, 10444);

  // An in-memory header that includes a file from disk: that file is tracked too.
  write_text(src_ / "disk.cuh", defines_value(10555));
  o.headers[0].contents = "#include \"" + (src_ / "disk.cuh").string() + "\"\n";
  expect_miss_storing(cache_, code, o, 10555);
  write_text(src_ / "disk.cuh", defines_value(10556));
  expect_miss_storing(cache_, code, o, 10556);
}

constexpr const char* kComplex = R"(#include <cuda/std/complex>
extern "C" __global__ void k(float* out) {
  cuda::std::complex<float> c(out[0], out[1]);
  out[2] = cuda::std::abs(c * c);
}
)";

// 11.
TEST_F(IncludeTrackingScenario, ToolkitHeadersCompileWithNoFlagsAndAreCached) {
  ASSERT_FALSE(toolkit::include_directories().empty()) << "NVRTC is not under a CUDA root";
  program_options o;
  o.arch = testing::kArch;
  expect_compile(cache_, kComplex, o, cache_outcome::miss);
  expect_compile(cache_, kComplex, o, cache_outcome::hit);
  const auto key = key_of(cache_, kComplex, o);
  EXPECT_TRUE(key.includes().tracked);
  EXPECT_GT(key.includes().files, 100u);
  EXPECT_TRUE(explain_mentions(key, toolkit::include_directories().front() + "/cuda/std/complex"));

  o.toolkit_include_path = false;
  program cached(kComplex, source_type::cxx, o);
  EXPECT_THROW(cached.compile(code_type::ptx, {}, &cache_), compile_error);
  EXPECT_EQ(outcome(cached), "miss");
  EXPECT_THROW(program(kComplex, source_type::cxx, o).compile(code_type::ptx), compile_error);
}

// 12.
TEST_F(IncludeTrackingScenario, SameSourceInTwoDirectoriesKeepsItsOwnHeader) {
  temp_dir x;
  temp_dir y;
  const std::string code = value_kernel("#include \"h.cuh\"");
  write_text(x / "h.cuh", defines_value(12001));
  write_text(y / "h.cuh", defines_value(12002));
  write_text(x / "k.cu", code);
  write_text(y / "k.cu", code);

  auto from_x = expect_compile(cache_, code, named(x / "k.cu"), cache_outcome::miss);
  auto from_y = expect_compile(cache_, code, named(y / "k.cu"), cache_outcome::miss);
  EXPECT_TRUE(stores(from_x, 12001)) << from_x.text();
  EXPECT_TRUE(stores(from_y, 12002)) << from_y.text();
  EXPECT_NE(key_of(cache_, code, named(x / "k.cu")), key_of(cache_, code, named(y / "k.cu")));
  for (int round = 0; round < 2; ++round) {
    EXPECT_TRUE(expect_compile(cache_, code, named(x / "k.cu"), cache_outcome::hit) == from_x);
    EXPECT_TRUE(expect_compile(cache_, code, named(y / "k.cu"), cache_outcome::hit) == from_y);
  }
  EXPECT_EQ(cache_.size(), 2u);
}

// 13.
TEST_F(IncludeTrackingScenario, NoSourceIncludeDoesNotReadBesideTheName) {
  temp_dir inc;
  write_text(src_ / "h.cuh", "#error \"the header beside the program must not be read\"\n");
  write_text(inc / "h.cuh", defines_value(13001));
  const std::string code = value_kernel("#include \"h.cuh\"");
  auto o = named(file_);
  o.include_path = {inc.path().string()};
  const std::string beside = (src_ / "h.cuh").string();

  // Without no_source_include: accepted, the header beside the name is in the key (and breaks
  // the compile).
  const auto searched = key_of(cache_, code, o);
  EXPECT_TRUE(explain_mentions(searched, beside + " ("));
  EXPECT_FALSE(explain_mentions(searched, (inc / "h.cuh").string())) << "not searched that far";
  program broken(code, source_type::cxx, o);
  EXPECT_THROW(broken.compile(code_type::ptx, {}, &cache_), compile_error);

  o.no_source_include = true;
  const auto not_searched = key_of(cache_, code, o);
  EXPECT_FALSE(explain_mentions(not_searched, beside)) << "a field for the skipped candidate";
  EXPECT_TRUE(explain_mentions(not_searched, (inc / "h.cuh").string() + " ("));
  expect_miss_then_hit(cache_, code, o, 13001);
  // Editing the skipped file changes nothing.
  write_text(src_ / "h.cuh", "#error \"still not read\"\n");
  expect_compile(cache_, code, o, cache_outcome::hit);
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
TEST_F(IncludeTrackingScenario, ExplainListsHeadersWithDigestsAndAbsentCandidates) {
  temp_dir a;
  temp_dir b;
  const std::string contents = defines_value(14001);
  write_text(b / "h.cuh", contents);
  auto o = named(file_);
  o.include_path = {a.path().string(), b.path().string()};
  const std::string code = value_kernel("#include \"h.cuh\"");

  program_cache_key_inputs in = inputs_of(code, o);
  const auto key = make_program_cache_key(in);
  const std::string digest = sha256sum(b / "h.cuh");
  ASSERT_EQ(digest.size(), 64u);
  const std::vector<key_field> expected = {
      {"headers_count", "3"},
      {"header_absent", (src_ / "h.cuh").string() + " (absent)"},
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
TEST_F(IncludeTrackingScenario, SecondDerivationOfSettledHeadersIsStatsOnly) {
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
  write_text(src_ / "fresh.cuh", defines_value(15001));
  const std::string code = std::string("#include \"fresh.cuh\"\n") + kComplex;
  in.code = code;
  in.options.name = (src_ / "k.cu").string();
  for (int i = 0; i < 3; ++i) {
    const auto k = make_program_cache_key(in);
    EXPECT_EQ(k.includes().hashed, 1u) << "derivation " << i;
    EXPECT_FALSE(k.includes().stat_fast_path());
  }
  // Settled (its times well in the past; ctime is still now, so still hashed).
  set_times(src_ / "fresh.cuh", 1'000'000'000);
  EXPECT_EQ(make_program_cache_key(in).includes().hashed, 1u);
  // No headers at all: nothing tracked, no fast path to report.
  in.code = "extern \"C\" __global__ void k() {}";
  EXPECT_FALSE(make_program_cache_key(in).includes().tracked);
  EXPECT_FALSE(make_program_cache_key(in).includes().stat_fast_path());
}

// 16. The reused walk. Once every file of a closure has settled, a walk leaves a manifest of each
// path it stat'd; the next derivation re-stats them and, if each answers as before, reuses the
// closure without resolving anything. Each edit below happens after the manifest exists, and the
// next derivation must see it (a fresh walk, and the compiler's bytes through the cache).
TEST_F(IncludeTrackingScenario, ReusedWalkSeesEveryEditMadeAfterIt) {
  enum class edit {
    none,
    nested_edited,
    touched,
    shadowed,
    deleted,
    link_retargeted,
    moved_cwd,
    directory_created
  };
  struct setup {
    edit what;
    int value;  // VALUE before the edit
    temp_dir root;
    fs::path src, inc1, inc2;
    std::string code;
    program_options options;
    in_memory_program_cache cache;
    std::optional<program_cache_key> settled_key;
  };
  std::vector<std::unique_ptr<setup>> setups;
  int value = 16100;
  for (edit e : {edit::none, edit::nested_edited, edit::touched, edit::shadowed, edit::deleted,
                 edit::link_retargeted, edit::moved_cwd, edit::directory_created}) {
    auto s = std::make_unique<setup>();
    s->what = e;
    s->value = value;
    value += 100;
    // src/k.cu includes "local.cuh" beside it, which includes <nested.cuh> from -I inc2 (inc1 is
    // searched first: inc1/nested.cuh is an absent candidate).
    s->src = s->root / "src";
    s->inc1 = s->root / "inc1";
    s->inc2 = s->root / "inc2";
    fs::create_directories(s->src);
    fs::create_directories(s->inc1);
    fs::create_directories(s->inc2);
    write_text(s->src / "local.cuh", "#pragma once\n#include <nested.cuh>\n");
    if (e == edit::link_retargeted) {
      fs::create_directories(s->root / "real");
      write_text(s->root / "real" / "a.cuh", defines_value(s->value));
      write_text(s->root / "real" / "b.cuh", defines_value(s->value + 1));
      fs::create_symlink(s->root / "real" / "a.cuh", s->inc2 / "nested.cuh");
    } else {
      write_text(s->inc2 / "nested.cuh", defines_value(s->value));
    }
    s->code = value_kernel("#include \"local.cuh\"");
    s->options = named(s->src / "k.cu");
    s->options.include_path = {s->inc1.string(), s->inc2.string()};
    if (e == edit::moved_cwd) s->options.name = "k.cu";  // beside it: the current directory
    if (e == edit::directory_created) {                  // searched first, and not there yet
      s->options.include_path.insert(s->options.include_path.begin(), (s->root / "inc0").string());
    }
    setups.push_back(std::move(s));
  }
  // Runs `f` with the current directory set to the setup's source directory when it names its
  // program relative to it.
  struct in_directory {
    fs::path before = fs::current_path();
    explicit in_directory(const fs::path& dir) { fs::current_path(dir); }
    ~in_directory() { fs::current_path(before); }
  };
  const auto in_place = [](setup& s, const auto& f) {
    if (s.what == edit::moved_cwd) {
      in_directory cd(s.src);
      f();
    } else {
      f();
    }
  };

  for (auto& s : setups) {
    in_place(
        *s, [&] { const auto ptx = expect_miss_storing(s->cache, s->code, s->options, s->value); });
  }
  // Every file settles: the next walk leaves a manifest, and the one after reuses it.
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  for (auto& s : setups) {
    SCOPED_TRACE("setup " + std::to_string(static_cast<int>(s->what)));
    in_place(*s, [&] {
      // (This one may already reuse a walk: where the compiles above ran slowly, as under TSan,
      // a setup's files had settled by its compile, whose walk then left the manifest.)
      s->settled_key = key_of(s->cache, s->code, s->options);
      const auto again = key_of(s->cache, s->code, s->options);
      EXPECT_EQ(again, *s->settled_key);
      EXPECT_TRUE(again.includes().reused_walk);
      EXPECT_EQ(again.includes().hashed, 0u);
      EXPECT_EQ(again.includes().files, 2u);
      // inc1/nested.cuh (<> skips the includer's directory), and inc0/nested.cuh
      EXPECT_EQ(again.includes().absent, s->what == edit::directory_created ? 2u : 1u);
    });
  }

  // The edits, each after its setup's manifest was made.
  temp_dir elsewhere;  // edit::moved_cwd: the same relative name in another directory
  for (auto& s : setups) {
    switch (s->what) {
      case edit::none:
        break;
      case edit::nested_edited:  // same size, another value
        write_text(s->inc2 / "nested.cuh", defines_value(s->value + 1));
        break;
      case edit::touched:  // rewritten with the same bytes: a new identity, the same key
        write_text(s->inc2 / "nested.cuh", defines_value(s->value));
        break;
      case edit::shadowed:  // a header appears where the walk found none
        write_text(s->inc1 / "nested.cuh", defines_value(s->value + 1));
        break;
      case edit::deleted:
        fs::remove(s->inc2 / "nested.cuh");
        break;
      case edit::link_retargeted: {
        const fs::path link = s->inc2 / "nested.cuh";
        fs::create_symlink(s->root / "real" / "b.cuh", s->inc2 / "nested.tmp");
        fs::rename(s->inc2 / "nested.tmp", link);
        break;
      }
      case edit::directory_created:  // an absent candidate's directory appears, with the header
        fs::create_directories(s->root / "inc0");
        write_text(s->root / "inc0" / "nested.cuh", defines_value(s->value + 1));
        break;
      case edit::moved_cwd:
        write_text(elsewhere / "local.cuh", defines_value(s->value + 1));
        s->src = elsewhere.path();
        break;
    }
  }

  for (auto& s : setups) {
    SCOPED_TRACE("edit " + std::to_string(static_cast<int>(s->what)));
    in_place(*s, [&] {
      const auto after = key_of(s->cache, s->code, s->options);
      if (s->what == edit::none) {
        EXPECT_TRUE(after.includes().reused_walk);
        EXPECT_EQ(after, *s->settled_key);
        expect_compile(s->cache, s->code, s->options, cache_outcome::hit);
        return;
      }
      EXPECT_FALSE(after.includes().reused_walk) << "a stat answered differently: walk again";
      if (s->what == edit::touched) {
        EXPECT_EQ(after, *s->settled_key);
        EXPECT_EQ(after.includes().hashed, 1u);
        expect_compile(s->cache, s->code, s->options, cache_outcome::hit);
        return;
      }
      EXPECT_NE(after, *s->settled_key);
      if (s->what == edit::deleted) {
        program p(s->code, source_type::cxx, s->options);
        EXPECT_THROW(p.compile(code_type::ptx, {}, &s->cache), compile_error);
        return;
      }
      const auto ptx = expect_miss_storing(s->cache, s->code, s->options, s->value + 1);
    });
  }
}

// The cubin target through a directory cache: the same oracle.
TEST_F(IncludeTrackingScenario, CubinThroughADirectoryCache) {
  temp_dir cache_dir;
  file_stream_program_cache cache(cache_dir / "cache");
  write_text(src_ / "h.cuh", defines_value(17001));
  const std::string code = value_kernel("#include \"h.cuh\"\n#include <cuda/std/cstdint>");
  auto first = expect_compile(cache, code, named(file_), cache_outcome::miss, code_type::cubin);
  expect_compile(cache, code, named(file_), cache_outcome::hit, code_type::cubin);
  write_text(src_ / "h.cuh", defines_value(17002));
  auto edited = expect_compile(cache, code, named(file_), cache_outcome::miss, code_type::cubin);
  EXPECT_FALSE(edited == first);
  {
    // Another cache object on the directory (its header digest memo read back from disk).
    file_stream_program_cache reopened(cache_dir / "cache");
    expect_compile(reopened, code, named(file_), cache_outcome::hit, code_type::cubin);
  }
}

}  // namespace
}  // namespace cucore
