// Include tracking end to end: real NVRTC compiles of real files in fresh temp directories, through
// real caches (in memory and a directory).
//
// The oracle, after every edit of the files: the compile through the cache returns exactly the
// bytes a compile without the cache returns at that moment, and hits or misses as the scenario
// expects. Every header edit changes a constant that ends up in the PTX, so a stale hit would show.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "include_tracking_test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using namespace include_tracking_testing;  // include_tracking_test_support.hpp
using include_tracking_testing::kernel;    // not cucore::kernel, the runtime's

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

}  // namespace
}  // namespace cucore
