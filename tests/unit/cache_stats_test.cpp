// Persistent cache statistics (cucore/cache/statistics.hpp): counts kept in the cache's own
// stats directory, summed over real processes, exact under concurrency, zeroed, robust to
// damaged, planted and read-only files; the tiered cache's remote tier and program::compile's
// compile-level counts.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cache_test_support.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using testing::temp_dir;

object_code sample(std::size_t n = 64, std::byte fill = std::byte{7}) {
  return object_code(code_type::cubin, std::vector<std::byte>(n, fill), "sample");
}

file_stream_cache_options fast() {
  file_stream_cache_options o;
  o.fsync = false;
  return o;
}

std::string shard_path(const fs::path& dir, unsigned index) {
  char name[16];
  std::snprintf(name, sizeof name, "shard-%02u", index);
  return (dir / name).string();
}

unsigned my_shard() {
  return static_cast<unsigned>(::getpid()) % 16;
}

// --- storage level ------------------------------------------------------------------------

TEST(PersistentStats, NothingIsCreatedUntilTheFirstEvent) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  ASSERT_TRUE(cache.statistics());
  EXPECT_EQ(cache.statistics()->directory(), dir.path() / "stats");
  EXPECT_FALSE(fs::exists(dir.path() / "stats"));
  const persistent_cache_stats p = cache.statistics()->read();
  EXPECT_EQ(p.shards, 0u);
  EXPECT_EQ(p.local.hits + p.local.misses, 0u);
  EXPECT_FALSE(p.zeroed_at);
}

TEST(PersistentStats, DirectoryCacheCountsSurviveTheProcess) {
  temp_dir dir;
  const std::string report = testing::run_in_child([&] {
    file_stream_program_cache cache(dir.path(), fast());
    cache.put("k", sample());
    for (int i = 0; i < 5; ++i) {
      if (!cache.get("k")) return std::string("miss on a stored key");
    }
    if (cache.get("absent")) return std::string("hit on an absent key");
    return std::string();
  });
  ASSERT_EQ(report, "");
  // A new process (and object): the counts are the child's, read from the cache.
  file_stream_program_cache cache(dir.path(), fast());
  const persistent_cache_stats p = cache.statistics()->read();
  EXPECT_EQ(p.local.hits, 5u);
  EXPECT_EQ(p.local.misses, 1u);
  EXPECT_EQ(p.local.puts, 1u);
  EXPECT_EQ(p.local.errors, 0u);
  EXPECT_EQ(p.remote.hits + p.remote.misses, 0u);
  EXPECT_EQ(p.shards, 1u);
  // This process's own counts (stats()) are its own: none yet.
  EXPECT_EQ(cache.stats().hits, 0u);
  ASSERT_TRUE(cache.get("k"));
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.statistics()->read().local.hits, 6u);
}

// 8 processes x N hits on one cache: every hit counted, none twice, whatever shard each uses.
template <class Open>
void hammer(const Open& open_cache) {
  constexpr int kProcesses = 8;
  constexpr int kHits = 300;
  {
    auto cache = open_cache();
    cache->put("k", sample());
  }
  const auto reports = testing::run_children(kProcesses, [&](int) {
    auto cache = open_cache();
    for (int i = 0; i < kHits; ++i) {
      if (!cache->get("k")) return std::string("a miss on a stored key");
    }
    if (cache->get("absent")) return std::string("a hit on an absent key");
    return std::string();
  });
  for (const auto& r : reports) ASSERT_EQ(r, "");
  auto cache = open_cache();
  const persistent_cache_stats p = cache->statistics()->read();
  EXPECT_EQ(p.local.hits, std::uint64_t{kProcesses} * kHits);
  EXPECT_EQ(p.local.misses, std::uint64_t{kProcesses});
  EXPECT_EQ(p.local.puts, 1u);
  EXPECT_GE(p.shards, 1u);
  EXPECT_LE(p.shards, 16u);
  EXPECT_EQ(p.shards_ignored, 0u);
}

TEST(PersistentStats, EightProcessesOnADirectoryCacheCountExactly) {
  temp_dir dir;
  hammer([&] { return std::make_unique<file_stream_program_cache>(dir.path(), fast()); });
  EXPECT_TRUE(fs::is_directory(dir.path() / "stats"));
}

TEST(PersistentStats, EightProcessesOnAnSqliteCacheCountExactly) {
  temp_dir dir;
  const fs::path file = dir.path() / "c.db";
  hammer([&] { return std::make_unique<sqlite_program_cache>(file); });
  EXPECT_TRUE(fs::is_directory(dir.path() / "c.db.stats"));
  EXPECT_EQ(sqlite_program_cache(file).statistics()->directory(), dir.path() / "c.db.stats");
}

TEST(PersistentStats, ThreadsOfOneProcessCountExactly) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", sample());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) (void)cache.get("k");
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(cache.statistics()->read().local.hits, 800u);
  EXPECT_EQ(cache.stats().hits, 800u);
}

TEST(PersistentStats, ZeroResetsAndLiveProcessesKeepCounting) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", sample());
  ASSERT_TRUE(cache.get("k"));
  (void)cache.get("absent");
  const auto before = std::chrono::system_clock::now() - std::chrono::seconds(1);
  // Zeroed from another object (as `cucore cache stats --zero` does from another process).
  cache_statistics(dir.path() / "stats").zero();
  persistent_cache_stats p = cache.statistics()->read();
  EXPECT_EQ(p.local.hits + p.local.misses + p.local.puts, 0u);
  ASSERT_TRUE(p.zeroed_at);
  EXPECT_GT(*p.zeroed_at, before);
  // The object that had its shard mapped goes on counting into it.
  ASSERT_TRUE(cache.get("k"));
  p = cache.statistics()->read();
  EXPECT_EQ(p.local.hits, 1u);
  EXPECT_TRUE(p.zeroed_at);
  // In-process counts are not persistent ones: untouched.
  EXPECT_EQ(cache.stats().hits, 2u);
}

TEST(PersistentStats, ZeroOfAFreshCacheRecordsWhen) {
  temp_dir dir;
  cache_statistics stats(dir.path() / "stats");
  stats.zero();
  const persistent_cache_stats p = stats.read();
  EXPECT_TRUE(p.zeroed_at);
  EXPECT_EQ(p.shards, 1u);
}

TEST(PersistentStats, DamagedShardIsIgnoredSkippedAndReplacedOnZero) {
  temp_dir dir;
  const fs::path stats_dir = dir.path() / "stats";
  fs::create_directory(stats_dir);
  // The shard this process would use: too short, then another with a foreign magic.
  testing::write_text(shard_path(stats_dir, my_shard()), "not a shard");
  testing::write_text(shard_path(stats_dir, (my_shard() + 1) % 16), std::string(4096, 'x'));
  {
    file_stream_program_cache cache(dir.path(), fast());
    cache.put("k", sample());
    ASSERT_TRUE(cache.get("k"));
    const persistent_cache_stats p = cache.statistics()->read();
    EXPECT_EQ(p.local.hits, 1u);  // counted in the next usable shard
    EXPECT_EQ(p.local.puts, 1u);
    EXPECT_EQ(p.shards, 1u);
    EXPECT_EQ(p.shards_ignored, 2u);
    EXPECT_EQ(testing::read_text(shard_path(stats_dir, my_shard())), "not a shard");
    EXPECT_TRUE(fs::exists(shard_path(stats_dir, (my_shard() + 2) % 16)));
  }
  cache_statistics stats(stats_dir);
  stats.zero();
  const persistent_cache_stats p = stats.read();
  EXPECT_EQ(p.shards_ignored, 0u);
  EXPECT_EQ(p.shards, 3u);
  EXPECT_EQ(fs::file_size(shard_path(stats_dir, my_shard())), 4096u);
  EXPECT_EQ(p.local.hits, 0u);
}

// A process that died between writing a fresh shard and renaming it in leaves ".new-*" behind:
// zero() removes such leftovers once they are old, and leaves a young one (a peer may be about to
// rename it) and every shard alone.
TEST(PersistentStats, ZeroRemovesTemporaryShardsLeftByDeadProcesses) {
  temp_dir dir;
  const fs::path stats_dir = dir.path() / "stats";
  {
    file_stream_program_cache cache(dir.path(), fast());
    cache.put("k", sample());
  }
  const fs::path old_temp = stats_dir / ".new-123-456";
  const fs::path young_temp = stats_dir / ".new-789-12";
  testing::write_text(old_temp, std::string(4096, '\0'));
  testing::write_text(young_temp, std::string(4096, '\0'));
  fs::last_write_time(old_temp, fs::file_time_type::clock::now() - std::chrono::hours(1));
  fs::last_write_time(young_temp, fs::file_time_type::clock::now() - std::chrono::minutes(1));
  cache_statistics stats(stats_dir);
  stats.zero();
  EXPECT_FALSE(fs::exists(old_temp)) << "an hour-old temporary shard is a leftover";
  EXPECT_TRUE(fs::exists(young_temp)) << "a minute-old one may still be renamed by its writer";
  const persistent_cache_stats p = stats.read();
  EXPECT_EQ(p.shards, 1u);
  EXPECT_EQ(p.shards_ignored, 0u);
  EXPECT_TRUE(p.zeroed_at);
}

TEST(PersistentStats, APlantedSymlinkIsNotFollowed) {
  temp_dir dir;
  const fs::path stats_dir = dir.path() / "stats";
  fs::create_directory(stats_dir);
  const fs::path victim = dir.path() / "victim";
  testing::write_text(victim, std::string(4096, '\0'));
  fs::create_symlink(victim, shard_path(stats_dir, my_shard()));
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", sample());
  ASSERT_TRUE(cache.get("k"));
  EXPECT_EQ(testing::read_text(victim), std::string(4096, '\0'));
  const persistent_cache_stats p = cache.statistics()->read();
  EXPECT_EQ(p.local.hits, 1u);
  EXPECT_EQ(p.shards_ignored, 1u);
  cache.statistics()->zero();  // replaces the link, not its target
  EXPECT_FALSE(fs::is_symlink(shard_path(stats_dir, my_shard())));
  EXPECT_EQ(testing::read_text(victim), std::string(4096, '\0'));
}

// Makes the cache under `root` read-only for the caller: as root (who writes anything), by
// becoming nobody in this (child) process; else by removing write permission.
std::string become_read_only_user(const fs::path& root, bool chmod_root) {
  if (::geteuid() == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return "cannot become nobody";
    return {};
  }
  if (chmod_root && ::chmod(root.c_str(), 0555) != 0) return "chmod failed";
  return {};
}

TEST(PersistentStats, AReadOnlyCacheStillHitsAndCountsNothing) {
  temp_dir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);  // nobody must reach it
  {
    file_stream_program_cache cache(dir.path(), fast());
    cache.put("k", sample());
  }
  // No stats/ yet, and the root read-only: statistics cannot be created.
  std::string report = testing::run_in_child([&] {
    if (auto why = become_read_only_user(dir.path(), true); !why.empty()) return why;
    testing::log_capture log;
    {
      file_stream_program_cache cache(dir.path(), fast());
      for (int i = 0; i < 3; ++i) {
        if (!cache.get("k")) return std::string("a miss in a read-only cache");
      }
      if (cache.stats().hits != 3) return std::string("in-process hits not 3");
      if (cache.statistics()->read().local.hits != 0) return std::string("counted somewhere");
      try {
        cache.statistics()->zero();
        return std::string("zero() of a read-only cache did not throw");
      } catch (const cucore::error&) {
      }
    }
    if (log.warnings() != 0) return "warned: " + log.all();
    if (log.count(log_level::debug, "cache statistics") != 1) return "not said once: " + log.all();
    return std::string();
  });
  ASSERT_EQ(report, "");
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);

  // A read-only stats/ with a shard: read, not written, and the gets still hit.
  {
    file_stream_program_cache cache(dir.path(), fast());
    ASSERT_TRUE(cache.get("k"));
  }
  report = testing::run_in_child([&] {
    if (::geteuid() != 0) {
      ::chmod((dir.path() / "stats").c_str(), 0555);
      for (const auto& e : fs::directory_iterator(dir.path() / "stats")) {
        ::chmod(e.path().c_str(), 0444);
      }
    }
    if (auto why = become_read_only_user(dir.path(), false); !why.empty()) return why;
    file_stream_program_cache cache(dir.path(), fast());
    for (int i = 0; i < 3; ++i) {
      if (!cache.get("k")) return std::string("miss");
    }
    if (cache.statistics()->read().local.hits != 1) return std::string("hits not 1");
    return std::string();
  });
  EXPECT_EQ(report, "");
  file_stream_program_cache cache(dir.path(), fast());
  EXPECT_EQ(cache.statistics()->read().local.hits, 1u);
}

TEST(PersistentStats, FilesGetTheCachesModes) {
  temp_dir dir;
  file_stream_cache_options o = fast();
  o.access = cache_access::shared;
  o.umask = 002;
  const fs::path root = dir.path() / "shared";
  file_stream_program_cache cache(root, o);
  cache.put("k", sample());
  struct stat st {};
  ASSERT_EQ(::stat((root / "stats").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0775u);
  ASSERT_EQ(::stat(shard_path(root / "stats", my_shard()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0664u);

  file_stream_cache_options p = fast();
  p.umask = 077;
  file_stream_program_cache mine(dir.path() / "private", p);
  mine.put("k", sample());
  ASSERT_EQ(::stat((dir.path() / "private" / "stats").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(shard_path(dir.path() / "private" / "stats", my_shard()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(PersistentStats, AGroupWritableShardIsNotTrustedInPrivateMode) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", sample());
  const std::string shard = shard_path(dir.path() / "stats", my_shard());
  ASSERT_EQ(::chmod(shard.c_str(), 0666), 0);
  const persistent_cache_stats p = cache.statistics()->read();
  EXPECT_EQ(p.shards, 0u);
  EXPECT_EQ(p.shards_ignored, 1u);
}

TEST(PersistentStats, TieredCacheCountsTheRemoteTierInTheLocalTiersStatistics) {
  temp_dir dir;
  // The remote tier is a second directory cache here: what matters is where its counts go.
  auto remote = std::make_unique<file_stream_program_cache>(dir.path() / "remote", fast());
  remote->put("k", sample());
  tiered_cache_options o;
  o.write_behind = false;
  tiered_program_cache tiered(
      std::make_unique<file_stream_program_cache>(dir.path() / "local", fast()), std::move(remote),
      o);
  ASSERT_EQ(tiered.statistics(), tiered.local().statistics());
  ASSERT_TRUE(tiered.get("k"));      // remote hit, backfilled
  ASSERT_TRUE(tiered.get("k"));      // local hit
  ASSERT_FALSE(tiered.get("none"));  // missed by both
  const persistent_cache_stats p = tiered.statistics()->read();
  EXPECT_EQ(p.local.hits, 1u);
  EXPECT_EQ(p.local.misses, 2u);
  EXPECT_EQ(p.local.puts, 1u);  // the backfill
  EXPECT_EQ(p.remote.hits, 1u);
  EXPECT_EQ(p.remote.misses, 1u);
  EXPECT_EQ(p.remote.puts, 0u);
}

TEST(PersistentStats, CompileLevelCountsAndTheSavedEstimate) {
  persistent_cache_stats p;
  EXPECT_FALSE(p.compile_time_saved());
  p.compiles = 2;
  p.compile_ns = 3'000'000;
  p.compile_hits = 4;
  EXPECT_EQ(p.compile_time_saved(), std::chrono::nanoseconds(6'000'000));

  temp_dir dir;
  cache_statistics stats(dir.path() / "s");
  stats.record_compile(std::chrono::milliseconds(10));
  stats.record_compile_hit();
  stats.record_skip(cache_skip_reason::header_changed);
  stats.record_skip(cache_skip_reason::needs_extra_digest);
  stats.record_skip(cache_skip_reason::needs_extra_digest);
  const persistent_cache_stats r = stats.read();
  EXPECT_EQ(r.compiles, 1u);
  EXPECT_EQ(r.compile_ns, 10'000'000u);
  EXPECT_EQ(r.compile_hits, 1u);
  EXPECT_EQ(r.skips[static_cast<std::size_t>(cache_skip_reason::needs_extra_digest)], 2u);
  EXPECT_EQ(r.skips[static_cast<std::size_t>(cache_skip_reason::header_changed)], 1u);
  EXPECT_EQ(r.skips_total(), 3u);
  EXPECT_EQ(to_string(cache_skip_reason::uncacheable_options), "uncacheable_options");
}

TEST(PersistentStats, ProgramCompileCountsCompilesAndHits) {
  temp_dir dir;
  constexpr const char* kSource = "extern \"C\" __global__ void k(float* x) { x[0] = 2.0f; }\n";
  program_options o;
  o.arch = testing::kArch;
  std::optional<object_code> compiled;
  {
    file_stream_program_cache cache(dir.path(), fast());
    program p(kSource, source_type::cxx, o);
    compiled = p.compile(code_type::cubin, cache);
    ASSERT_EQ(p.last_cache_outcome(), cache_outcome::miss);
  }
  file_stream_program_cache cache(dir.path(), fast());
  program p(kSource, source_type::cxx, o);
  EXPECT_EQ(p.compile(code_type::cubin, cache), *compiled);
  ASSERT_EQ(p.last_cache_outcome(), cache_outcome::hit);
  // The oracle for the cached bytes: an uncached compile of the same inputs.
  EXPECT_EQ(program(kSource, source_type::cxx, o).compile(code_type::cubin), *compiled);
  const persistent_cache_stats s = cache.statistics()->read();
  EXPECT_EQ(s.compiles, 1u);
  EXPECT_EQ(s.compile_hits, 1u);
  EXPECT_GT(s.compile_ns, 0u);
  ASSERT_TRUE(s.compile_time_saved());
  EXPECT_EQ(s.compile_time_saved()->count(), static_cast<std::int64_t>(s.compile_ns));
  EXPECT_EQ(s.local.hits, 1u);
  EXPECT_EQ(s.local.misses, 1u);
  EXPECT_EQ(s.local.puts, 1u);
}

}  // namespace
}  // namespace cucore
