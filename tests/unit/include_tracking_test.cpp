// Include tracking end to end: real NVRTC compiles of real files in fresh temp directories, through
// real caches (in memory and a directory).
//
// The oracle, after every edit of the files: the compile through the cache returns exactly the
// bytes a compile without the cache returns at that moment, and hits or misses as the scenario
// expects. Every header edit changes a constant that ends up in the PTX, so a stale hit would show.
#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache_test_support.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "cucore/program.hpp"
#include "cucore/toolkit.hpp"
#include "lease_writer.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::temp_dir;
using testing::write_text;

// A header that defines VALUE: the constant the kernels store, hence visible in the PTX.
std::string defines_value(int value) {
  return "#pragma once\n#define VALUE " + std::to_string(value) + "\n";
}

// A kernel that stores VALUE, after `prelude` (its includes).
std::string kernel(const std::string& prelude) {
  return prelude + "\nextern \"C\" __global__ void k(int* out) { out[0] = VALUE; }\n";
}

// The PTX stores `value` (as an immediate: "mov.u32 %r1, 1234;").
bool stores(const object_code& ptx, int value) {
  return contains(ptx.text(), ", " + std::to_string(value) + ";");
}

// Options as the CLI sets them: the program is named by its file's path.
program_options named(const fs::path& file) {
  program_options o;
  o.arch = testing::kArch;
  o.name = file.string();
  return o;
}

std::string outcome(const program& p) {
  return std::string(to_string(p.last_cache_outcome()));
}

// THE ORACLE. Compiles `code` under `options` through `cache` and without it, now: the two give
// the same bytes, and the cached compile had the `expected` outcome. The cached result.
object_code expect_compile(program_cache& cache, const std::string& code,
                           const program_options& options, cache_outcome expected,
                           code_type target = code_type::ptx) {
  program cached(code, source_type::cxx, options);
  object_code got = cached.compile(target, {}, &cache);
  EXPECT_EQ(outcome(cached), std::string(to_string(expected)));
  program uncached(code, source_type::cxx, options);
  const object_code reference = uncached.compile(target);
  if (target == code_type::ptx) {
    EXPECT_EQ(got.text(), reference.text()) << "the cached compile differs from an uncached one";
  }
  EXPECT_TRUE(got == reference) << "the cached compile differs from an uncached one";
  return got;
}

// The key the cached compile of `code` uses.
program_cache_key key_of(const program_cache& cache, const std::string& code,
                         const program_options& options, code_type target = code_type::ptx) {
  program_cache_key_inputs in;
  in.code = code;
  in.options = options;
  in.target = target;
  return make_program_cache_key(in, compiler_probes_for(cache));
}

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

// Sets a file's access and modification times to `seconds` since the epoch, contents untouched.
void set_times(const fs::path& file, time_t seconds) {
  struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0) << file;
}

// ---------------------------------------------------------------------------------------------
// Scenarios run against each kind of cache.

enum class cache_kind { memory, directory };

class IncludeTracking : public ::testing::TestWithParam<cache_kind> {
 protected:
  void SetUp() override { reopen(); }

  // A fresh cache object (for a directory cache: on the same directory).
  void reopen() {
    cache_.reset();
    if (GetParam() == cache_kind::memory) {
      if (!memory_) memory_ = std::make_unique<in_memory_program_cache>();
    } else {
      cache_ = std::make_unique<file_stream_program_cache>(cache_dir_ / "cache");
    }
  }
  program_cache& cache() { return cache_ ? *cache_ : *memory_; }

  temp_dir src_;        // the program's files
  temp_dir cache_dir_;  // the directory cache
  std::unique_ptr<in_memory_program_cache> memory_;
  std::unique_ptr<program_cache> cache_;
};

INSTANTIATE_TEST_SUITE_P(Caches, IncludeTracking,
                         ::testing::Values(cache_kind::memory, cache_kind::directory),
                         [](const auto& info) {
                           return info.param == cache_kind::memory ? "memory" : "directory";
                         });

// 1.
TEST_P(IncludeTracking, QuotedHeaderBesideTheFile) {
  const fs::path file = src_ / "k.cu";
  write_text(src_ / "h.cuh", defines_value(1001));
  const std::string code = kernel("#include \"h.cuh\"");
  write_text(file, code);

  auto first = expect_compile(cache(), code, named(file), cache_outcome::miss);
  EXPECT_TRUE(stores(first, 1001)) << first.text();
  auto again = expect_compile(cache(), code, named(file), cache_outcome::hit);
  EXPECT_TRUE(again == first);

  const auto key = key_of(cache(), code, named(file));
  EXPECT_TRUE(key.includes().tracked);
  EXPECT_EQ(key.includes().files, 1u);
  EXPECT_EQ(key.includes().absent, 0u);

  // A cache opened again (for a directory cache: in effect another process) hits too.
  reopen();
  expect_compile(cache(), code, named(file), cache_outcome::hit);
}

// 2.
// A FIFO where NVRTC looks for a header: NVRTC opens it and compiles whatever a writer sends
// (measured: with no writer it waits forever; a character device it refuses as absent). The key
// cannot name that, so it refuses instead of recording the path as absent.
TEST_P(IncludeTracking, FifoWhereAHeaderIsLookedForIsRefused) {
  temp_dir src;
  const fs::path file = src / "k.cu";
  ASSERT_EQ(::mkfifo((src / "h.cuh").c_str(), 0600), 0);
  const std::string code = kernel("#include \"h.cuh\"");
  program_cache_key_inputs in;
  in.code = code;
  in.options = named(file);
  in.target = code_type::ptx;
  try {
    (void)make_program_cache_key(in);
    ADD_FAILURE() << "a key for an include of a FIFO";
  } catch (const extra_digest_required& e) {
    EXPECT_TRUE(contains(e.what(), "h.cuh")) << e.what();
    EXPECT_TRUE(contains(e.what(), "FIFO")) << e.what();
  }
  // Once a regular file replaces it, the key tracks it as any header.
  fs::remove(src / "h.cuh");
  write_text(src / "h.cuh", defines_value(7101));
  EXPECT_NO_THROW((void)make_program_cache_key(in));
}

TEST_P(IncludeTracking, NestedHeaderEditedMisses) {
  // k.cu -> "lib/a.cuh" -> "b.cuh", found beside a.cuh (its includer), not beside k.cu.
  const fs::path file = src_ / "k.cu";
  fs::create_directory(src_ / "lib");
  write_text(src_ / "lib" / "a.cuh", "#pragma once\n#include \"b.cuh\"\n");
  write_text(src_ / "lib" / "b.cuh", defines_value(2001));
  const std::string code = kernel("#include \"lib/a.cuh\"");

  auto first = expect_compile(cache(), code, named(file), cache_outcome::miss);
  EXPECT_TRUE(stores(first, 2001)) << first.text();
  expect_compile(cache(), code, named(file), cache_outcome::hit);

  write_text(src_ / "lib" / "b.cuh", defines_value(2002));
  auto edited = expect_compile(cache(), code, named(file), cache_outcome::miss);
  EXPECT_TRUE(stores(edited, 2002)) << edited.text();
  expect_compile(cache(), code, named(file), cache_outcome::hit);

  // The middle header edited: it now sets the value itself after b.cuh.
  write_text(src_ / "lib" / "a.cuh",
             "#pragma once\n#include \"b.cuh\"\n#undef VALUE\n#define VALUE 2003\n");
  auto middle = expect_compile(cache(), code, named(file), cache_outcome::miss);
  EXPECT_TRUE(stores(middle, 2003)) << middle.text();

  // Back to the first contents: the first key again, a hit with the first bytes.
  write_text(src_ / "lib" / "a.cuh", "#pragma once\n#include \"b.cuh\"\n");
  write_text(src_ / "lib" / "b.cuh", defines_value(2001));
  auto back = expect_compile(cache(), code, named(file), cache_outcome::hit);
  EXPECT_TRUE(back == first);
}

// 3.
TEST_P(IncludeTracking, HeaderTouchedWithoutChangeStillHits) {
  const fs::path file = src_ / "k.cu";
  const fs::path header = src_ / "h.cuh";
  write_text(header, defines_value(3001));
  const std::string code = kernel("#include \"h.cuh\"");
  expect_compile(cache(), code, named(file), cache_outcome::miss);
  const auto before = key_of(cache(), code, named(file));

  // New times (ctime moves too); the same contents.
  set_times(header, 1'000'000'000);
  expect_compile(cache(), code, named(file), cache_outcome::hit);
  set_times(header, ::time(nullptr) + 3600);
  expect_compile(cache(), code, named(file), cache_outcome::hit);
  EXPECT_EQ(key_of(cache(), code, named(file)), before);

  // Rewritten with the same bytes (a new write, same contents): still a hit.
  write_text(header, defines_value(3001));
  expect_compile(cache(), code, named(file), cache_outcome::hit);
  // Replaced by another file (another inode) with the same bytes: still a hit.
  write_text(src_ / "h.cuh.new", defines_value(3001));
  fs::rename(src_ / "h.cuh.new", header);
  expect_compile(cache(), code, named(file), cache_outcome::hit);
}

// 5.
TEST_P(IncludeTracking, IncludePathHeaderEditedMisses) {
  temp_dir inc;
  const fs::path file = src_ / "k.cu";
  write_text(inc / "inc.cuh", defines_value(5001));
  auto o = named(file);
  o.include_path = {inc.path().string()};
  for (const char* spelling : {"#include <inc.cuh>", "#include \"inc.cuh\""}) {
    SCOPED_TRACE(spelling);
    write_text(inc / "inc.cuh", defines_value(5001));
    const std::string code = kernel(spelling);
    // The angle and quoted spellings are two programs (two keys): each misses once.
    auto first = expect_compile(cache(), code, o, cache_outcome::miss);
    EXPECT_TRUE(stores(first, 5001)) << first.text();
    expect_compile(cache(), code, o, cache_outcome::hit);

    write_text(inc / "inc.cuh", defines_value(5002));
    auto edited = expect_compile(cache(), code, o, cache_outcome::miss);
    EXPECT_TRUE(stores(edited, 5002)) << edited.text();
    expect_compile(cache(), code, o, cache_outcome::hit);
  }
}

// 6.
TEST_P(IncludeTracking, HeaderAddedEarlierInTheSearchPathShadows) {
  temp_dir a;
  temp_dir b;
  const fs::path file = src_ / "k.cu";
  write_text(b / "h.cuh", defines_value(6002));
  auto o = named(file);
  o.include_path = {a.path().string(), b.path().string()};
  const std::string code = kernel("#include \"h.cuh\"");

  auto from_b = expect_compile(cache(), code, o, cache_outcome::miss);
  EXPECT_TRUE(stores(from_b, 6002)) << from_b.text();
  expect_compile(cache(), code, o, cache_outcome::hit);

  write_text(a / "h.cuh", defines_value(6001));
  auto from_a = expect_compile(cache(), code, o, cache_outcome::miss);
  EXPECT_TRUE(stores(from_a, 6001)) << from_a.text();
  expect_compile(cache(), code, o, cache_outcome::hit);

  // And one beside the program shadows both.
  write_text(src_ / "h.cuh", defines_value(6000));
  auto beside = expect_compile(cache(), code, o, cache_outcome::miss);
  EXPECT_TRUE(stores(beside, 6000)) << beside.text();

  // Removed again, in turn: back to dirA's, then dirB's (hits with those bytes).
  fs::remove(src_ / "h.cuh");
  auto a_again = expect_compile(cache(), code, o, cache_outcome::hit);
  EXPECT_TRUE(a_again == from_a);
  fs::remove(a / "h.cuh");
  auto b_again = expect_compile(cache(), code, o, cache_outcome::hit);
  EXPECT_TRUE(b_again == from_b);
}

// 16. The header changes after the key was derived and before NVRTC reads it: the result comes
// from contents the key does not name, so it must not be stored. The cache's get() (called between
// the key and the compile) does the edit.
class editing_cache final : public testing::forwarding_cache {
 public:
  editing_cache(program_cache& inner, fs::path header, std::string contents)
      : forwarding_cache(inner), header_(std::move(header)), contents_(std::move(contents)) {}
  std::optional<object_code> get(cache_key_ref key) override {
    if (armed) {
      armed = false;
      write_text(header_, contents_);
    }
    return forwarding_cache::get(key);
  }
  bool armed = true;

 private:
  fs::path header_;
  std::string contents_;
};

TEST_P(IncludeTracking, HeaderChangedDuringTheCompileIsNotStored) {
  const fs::path file = src_ / "k.cu";
  const fs::path header = src_ / "h.cuh";
  write_text(header, defines_value(16001));
  const std::string code = kernel("#include \"h.cuh\"");
  editing_cache editing(cache(), header, defines_value(16002));
  const std::size_t entries_before = cache().size();

  testing::log_capture logs;
  program p(code, source_type::cxx, named(file));
  const object_code got = p.compile(code_type::ptx, {}, &editing);
  EXPECT_FALSE(editing.armed);
  EXPECT_EQ(outcome(p), "miss");
  // NVRTC read the new contents; the key named the old ones.
  EXPECT_TRUE(stores(got, 16002)) << got.text();
  EXPECT_TRUE(got == program(code, source_type::cxx, named(file)).compile(code_type::ptx));
  EXPECT_EQ(cache().size(), entries_before) << "stored under a key naming other header contents";
  EXPECT_EQ(logs.warnings("changed during the compile"), 1u) << logs.all();
  ASSERT_TRUE(p.last_store_refusal());
  EXPECT_EQ(p.last_store_refusal()->reason, cache_skip_reason::header_changed);
  EXPECT_EQ(p.last_store_refusal()->path, header.string());

  // Under the old contents' key nothing was stored: with the old contents back, a miss that
  // compiles the old value.
  write_text(header, defines_value(16001));
  auto old = expect_compile(cache(), code, named(file), cache_outcome::miss);
  EXPECT_TRUE(stores(old, 16001)) << old.text();
  // The new contents: not stored either, so a miss now, then a hit.
  write_text(header, defines_value(16002));
  expect_compile(cache(), code, named(file), cache_outcome::miss);
  expect_compile(cache(), code, named(file), cache_outcome::hit);
}

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

// 16. The reused walk. Once every file of a closure has settled, a walk leaves a manifest of each
// path it stat'd; the next derivation re-stats them and, if each answers as before, reuses the
// closure without resolving anything. Each edit below happens after the manifest exists, and the
// next derivation must see it (a fresh walk, and the compiler's bytes through the cache).
TEST(IncludeTrackingScenario, ReusedWalkSeesEveryEditMadeAfterIt) {
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
    s->code = kernel("#include \"local.cuh\"");
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
    in_place(*s, [&] {
      const auto ptx = expect_compile(s->cache, s->code, s->options, cache_outcome::miss);
      EXPECT_TRUE(stores(ptx, s->value));
    });
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
      const auto ptx = expect_compile(s->cache, s->code, s->options, cache_outcome::miss);
      EXPECT_TRUE(stores(ptx, s->value + 1)) << ptx.text();
    });
  }
}

// The cubin target through a directory cache: the same oracle.
TEST(IncludeTrackingScenario, CubinThroughADirectoryCache) {
  temp_dir src;
  temp_dir cache_dir;
  file_stream_program_cache cache(cache_dir / "cache");
  const fs::path file = src / "k.cu";
  write_text(src / "h.cuh", defines_value(17001));
  const std::string code = kernel("#include \"h.cuh\"\n#include <cuda/std/cstdint>");
  auto first = expect_compile(cache, code, named(file), cache_outcome::miss, code_type::cubin);
  expect_compile(cache, code, named(file), cache_outcome::hit, code_type::cubin);
  write_text(src / "h.cuh", defines_value(17002));
  auto edited = expect_compile(cache, code, named(file), cache_outcome::miss, code_type::cubin);
  EXPECT_FALSE(edited == first);
  {
    // Another cache object on the directory (its header digest memo read back from disk).
    file_stream_program_cache reopened(cache_dir / "cache");
    expect_compile(reopened, code, named(file), cache_outcome::hit, code_type::cubin);
  }
}

// ---------------------------------------------------------------------------------------------
// No store across a change (program_cache_key::check_store): a concurrent writer that acts at the
// moments NVRTC opens the headers (lease_writer.hpp: NVRTC's open waits in the kernel until the
// writer's action is done), so every interleaving below is the kernel's, not a sleep's.

// Arms a lease_writer when the compile looks the key up (after the key's walk, before NVRTC
// runs), and counts into the real cache's persistent statistics.
class writer_arming_cache final : public testing::forwarding_cache {
 public:
  writer_arming_cache(program_cache& inner, std::vector<testing::lease_writer::step> steps)
      : forwarding_cache(inner), inner_(inner), steps_(std::move(steps)) {}
  std::optional<object_code> get(cache_key_ref key) override {
    if (!writer) writer = std::make_unique<testing::lease_writer>(std::move(steps_));
    return forwarding_cache::get(key);
  }
  std::shared_ptr<cache_statistics> statistics() const override { return inner_.statistics(); }
  std::unique_ptr<testing::lease_writer> writer;

 private:
  program_cache& inner_;
  std::vector<testing::lease_writer::step> steps_;
};

std::uint64_t skips(const program_cache& cache, cache_skip_reason reason) {
  return cache.statistics()->read().skips[static_cast<std::size_t>(reason)];
}

// The header NVRTC reads first is emptied when NVRTC opens it (truncate: the first half of an
// editor's or git checkout's rewrite), and written back with the same bytes — and its old mtime —
// when NVRTC opens the next header, having read the first. NVRTC compiled the empty header; the
// header holds its old bytes again, so a key derived anew equals the first. The result is
// returned, but not stored: the header is not the file the key's walk saw (its ctime moved).
// Then the same with other contents of the same size (changed, and changed back).
TEST(NoStoreAcrossAChange, ConcurrentWriterWhileNvrtcReads) {
  const fs::path parent = testing::lease_parent();
  ASSERT_FALSE(parent.empty()) << "no file system here grants write leases (F_SETLEASE): set "
                                  "TMPDIR to an ext4, xfs, btrfs or tmpfs directory";
  temp_dir src(parent);
  temp_dir cache_dir;
  file_stream_program_cache cache(cache_dir / "cache");
  const fs::path file = src / "k.cu";
  const fs::path header = src / "h.cuh";
  const fs::path later = src / "later.cuh";
  const std::string original = defines_value(18001);
  write_text(later, "#pragma once\n");
  // VALUE falls back to 18009 when the header defines none (NVRTC read it empty).
  const std::string code = kernel(
      "#include \"h.cuh\"\n#include \"later.cuh\"\n#ifndef VALUE\n#define VALUE 18009\n#endif");
  program_options o = named(file);
  o.auto_pch = false;  // one NVRTC compile per program::compile: the writer's opens are NVRTC's

  struct scenario {
    const char* what;
    std::string meanwhile;  // what NVRTC reads
    int value;              // what it compiles to
  };
  for (const scenario& sc : {scenario{"truncated, then the same bytes", "", 18009},
                             scenario{"changed, then changed back", defines_value(18002), 18002}}) {
    SCOPED_TRACE(sc.what);
    write_text(header, original);
    struct stat before {};
    ASSERT_EQ(::stat(header.c_str(), &before), 0);
    const std::uint64_t changed_before = skips(cache, cache_skip_reason::header_changed);
    writer_arming_cache arming(
        cache, {{header, [&](int fd) { testing::rewrite_fd(fd, sc.meanwhile); }},
                {later, [&](int) {
                   // NVRTC has read h.cuh: its old bytes and mtime go back.
                   const int fd = ::open(header.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
                   ASSERT_GE(fd, 0);
                   testing::rewrite_fd(fd, original);
                   const struct timespec times[2] = {{0, UTIME_OMIT}, before.st_mtim};
                   ASSERT_EQ(::futimens(fd, times), 0);
                   ::close(fd);
                 }}});

    testing::log_capture logs;
    program p(code, source_type::cxx, o);
    const object_code got = p.compile(code_type::ptx, {}, &arming);
    ASSERT_TRUE(arming.writer && arming.writer->ok()) << arming.writer->error();
    EXPECT_EQ(arming.writer->done(), 2u) << "NVRTC opened both headers, each after its action";
    arming.writer.reset();
    EXPECT_EQ(outcome(p), "miss");
    EXPECT_TRUE(stores(got, sc.value)) << got.text();

    // Nothing under the key, whose headers hold the original bytes again (the same key anew).
    const program_cache_key key = *p.last_cache_key();
    EXPECT_EQ(key_of(cache, code, o), key) << "content digests cannot see this change";
    EXPECT_FALSE(cache.get(key)) << "stored under a key naming other header contents";
    EXPECT_TRUE(p.last_store_refusal());
    if (p.last_store_refusal()) {
      EXPECT_EQ(p.last_store_refusal()->reason, cache_skip_reason::header_changed);
      EXPECT_EQ(p.last_store_refusal()->path, header.string());
    }
    EXPECT_EQ(logs.warnings(header.string() + " changed during the compile"), 1u) << logs.all();
    EXPECT_EQ(skips(cache, cache_skip_reason::header_changed), changed_before + 1);

    // The result is what an uncached compile of what NVRTC read gives.
    write_text(header, sc.meanwhile);
    EXPECT_TRUE(got == program(code, source_type::cxx, o).compile(code_type::ptx));
    // And with the original contents, settled: a miss that stores, then a hit, both 18001.
    write_text(header, original);
    auto fresh = expect_compile(cache, code, o, cache_outcome::miss);
    EXPECT_TRUE(stores(fresh, 18001)) << fresh.text();
    expect_compile(cache, code, o, cache_outcome::hit);
    cache.clear();
  }
}

// The "too new" rule: a header whose mtime is not older than the walk's start minus its
// timestamp granularity (here: in the future, as after `touch -d` or from a clock ahead) is not
// stored even though nothing changed during the compile: a change within one timestamp tick
// would leave every stat field as it was. Once it has settled (an old mtime, and the ctime that
// setting it moved a tick in the past), the next compile stores.
TEST(NoStoreAcrossAChange, TooNewHeaderIsStoredOnceItHasSettled) {
  temp_dir src;
  temp_dir cache_dir;
  file_stream_program_cache cache(cache_dir / "cache");
  const fs::path file = src / "k.cu";
  const fs::path header = src / "h.cuh";
  write_text(header, defines_value(19001));
  const std::string code = kernel("#include \"h.cuh\"");
  program_options o = named(file);
  set_times(header, ::time(nullptr) + 3600);
  testing::settle(header, /*mtime_too=*/false);  // the ctime old enough: only the mtime too new

  testing::log_capture logs;
  program p(code, source_type::cxx, o);
  const object_code got = p.compile(code_type::ptx, {}, &cache);
  EXPECT_EQ(outcome(p), "miss");
  EXPECT_TRUE(stores(got, 19001)) << got.text();
  EXPECT_TRUE(got == program(code, source_type::cxx, o).compile(code_type::ptx));
  ASSERT_TRUE(p.last_store_refusal());
  EXPECT_EQ(p.last_store_refusal()->reason, cache_skip_reason::header_too_new);
  EXPECT_EQ(p.last_store_refusal()->path, header.string());
  EXPECT_TRUE(contains(p.last_store_refusal()->message, "before the key was made"))
      << p.last_store_refusal()->message;
  EXPECT_EQ(logs.warnings(header.string() + " was modified"), 1u) << logs.all();
  EXPECT_FALSE(cache.get(*p.last_cache_key()));
  EXPECT_EQ(skips(cache, cache_skip_reason::header_too_new), 1u);
  EXPECT_EQ(skips(cache, cache_skip_reason::header_changed), 0u);

  // An old mtime; the ctime is now, so not yet; settled, the same key stores, then hits.
  set_times(header, ::time(nullptr) - 3600);
  testing::settle(header);
  auto stored = expect_compile(cache, code, o, cache_outcome::miss);
  EXPECT_TRUE(stored == got);
  expect_compile(cache, code, o, cache_outcome::hit);
  EXPECT_EQ(skips(cache, cache_skip_reason::header_too_new), 1u);
}

}  // namespace
}  // namespace cucore
