// Include tracking end to end (include_tracking_test_support.hpp: the oracle), against each kind
// of cache (in memory and a directory), and no store across a header's change during the compile
// (a concurrent writer). The scenarios with one cache are in include_tracking_scenario_test.cpp.
#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache_test_support.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/statistics.hpp"
#include "include_tracking_test_support.hpp"
#include "lease_writer.hpp"

namespace cucore {
namespace {

using namespace cucore::testing;  // NOLINT: the include tracking oracle and its helpers

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
  const std::string code = value_kernel("#include \"h.cuh\"");
  write_text(file, code);

  auto first = expect_miss_storing(cache(), code, named(file), 1001);
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
  const std::string code = value_kernel("#include \"h.cuh\"");
  const program_cache_key_inputs in = inputs_of(code, named(file));
  expect_digest_demanded(in, "a key for an include of a FIFO", {"h.cuh", "FIFO"});
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
  const std::string code = value_kernel("#include \"lib/a.cuh\"");

  auto first = expect_miss_then_hit(cache(), code, named(file), 2001);

  write_text(src_ / "lib" / "b.cuh", defines_value(2002));
  expect_miss_then_hit(cache(), code, named(file), 2002);

  // The middle header edited: it now sets the value itself after b.cuh.
  write_text(src_ / "lib" / "a.cuh",
             "#pragma once\n#include \"b.cuh\"\n#undef VALUE\n#define VALUE 2003\n");
  expect_miss_storing(cache(), code, named(file), 2003);

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
  const std::string code = value_kernel("#include \"h.cuh\"");
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
    const std::string code = value_kernel(spelling);
    // The angle and quoted spellings are two programs (two keys): each misses once.
    auto first = expect_miss_then_hit(cache(), code, o, 5001);

    write_text(inc / "inc.cuh", defines_value(5002));
    expect_miss_then_hit(cache(), code, o, 5002);
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
  const std::string code = value_kernel("#include \"h.cuh\"");

  auto from_b = expect_miss_then_hit(cache(), code, o, 6002);

  write_text(a / "h.cuh", defines_value(6001));
  auto from_a = expect_miss_then_hit(cache(), code, o, 6001);

  // And one beside the program shadows both.
  write_text(src_ / "h.cuh", defines_value(6000));
  expect_miss_storing(cache(), code, o, 6000);

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
  const std::string code = value_kernel("#include \"h.cuh\"");
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
  expect_miss_storing(cache(), code, named(file), 16001);
  // The new contents: not stored either, so a miss now, then a hit.
  write_text(header, defines_value(16002));
  expect_compile(cache(), code, named(file), cache_outcome::miss);
  expect_compile(cache(), code, named(file), cache_outcome::hit);
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
  const std::string code = value_kernel(
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
    expect_miss_then_hit(cache, code, o, 18001);
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
  const std::string code = value_kernel("#include \"h.cuh\"");
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
