// The SQLite cache shared: locks held by others, read-only files and directories, threads and
// processes (sqlite_cache_test_support.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cache/entry_format.hpp"
#include "cache/sqlite/filesystem.hpp"
#include "cache/sqlite/tuning.hpp"
#include "cache_test_support.hpp"
#include "cache_workload.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "process_support.hpp"
#include "small_filesystem.hpp"
#include "sqlite_cache_test_support.hpp"
#include "sqlite_test_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace sqlite_testing;  // sqlite_cache_test_support.hpp

// ---- locks ----------------------------------------------------------------------------------

TEST_F(SqliteCache, LockedForWritingInWalModeReadsHitAndWritesAreSkipped) {
  populate(file, 5);
  testing::raw_db locker(file);
  locker.exec("BEGIN IMMEDIATE");
  locker.exec("INSERT INTO meta VALUES (0, 0)");  // an uncommitted write holds the write lock
  testing::log_capture logs;
  sqlite_program_cache cache(file, {.max_size_bytes = {}, .busy_timeout = 100ms});
  EXPECT_TRUE(cache.get("k1")) << "WAL readers are not blocked by a writer";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NO_THROW(cache.put("new", code_of_size(10)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 90ms);
  EXPECT_GE(logs.warnings("put failed"), 1u) << logs.all();
  EXPECT_FALSE(cache.erase("k2"));
  EXPECT_GE(cache.stats().errors, 2u);
  sqlite_program_cache strict(file, {.max_size_bytes = {},
                                     .busy_timeout = 100ms,
                                     .on_write_failure = write_failure_policy::strict});
  EXPECT_THROW(strict.put("new", code_of_size(10)), error);
  EXPECT_THROW(strict.clear(), error);
  locker.exec("ROLLBACK");
  EXPECT_TRUE(testing::moved_aside(file).empty());
  cache.put("new", code_of_size(10));
  EXPECT_TRUE(cache.get("new"));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(cache.get("k" + std::to_string(i)));
}

TEST_F(SqliteCache, ExclusiveLockMakesReadsMissWithoutTouchingTheFile) {
  {
    sqlite_program_cache cache(file, {.max_size_bytes = {}, .journal = sqlite_journal::rollback});
    for (int i = 0; i < 5; ++i) cache.put("k" + std::to_string(i), code_of_size(100, "n", i));
  }
  testing::raw_db locker(file);
  locker.exec("BEGIN EXCLUSIVE");
  locker.exec("INSERT INTO meta VALUES (0, 0)");
  testing::log_capture logs;
  {
    sqlite_program_cache cache(
        file, {.max_size_bytes = {}, .busy_timeout = 100ms, .journal = sqlite_journal::rollback});
    EXPECT_FALSE(cache.get("k1"));
    EXPECT_NO_THROW(cache.put("new", code_of_size(10)));
    EXPECT_THROW(cache.size(), error);
    EXPECT_GE(cache.stats().errors, 2u);
    EXPECT_GE(logs.warnings("locked"), 1u) << logs.all();
    locker.exec("ROLLBACK");
    // The same object recovers once the lock is gone.
    EXPECT_TRUE(cache.get("k1"));
    cache.put("new", code_of_size(10));
    EXPECT_TRUE(cache.get("new"));
  }
  EXPECT_TRUE(testing::moved_aside(file).empty());
  sqlite_program_cache cache(file);
  EXPECT_EQ(cache.size(), 6u);
}

TEST_F(SqliteCache, ExclusiveLockingModeInWalMakesReadsMiss) {
  populate(file, 3);
  {
    testing::raw_db locker(file);
    locker.exec("PRAGMA locking_mode = EXCLUSIVE");
    locker.exec("BEGIN EXCLUSIVE");
    locker.exec("INSERT INTO meta VALUES (0, 0)");
    testing::log_capture logs;
    sqlite_program_cache cache(file, {.max_size_bytes = {}, .busy_timeout = 100ms});
    EXPECT_FALSE(cache.get("k1"));
    EXPECT_NO_THROW(cache.put("x", code_of_size(10)));
    EXPECT_GE(logs.warnings("locked"), 1u) << logs.all();
    locker.exec("ROLLBACK");
  }  // closing the connection drops its exclusive lock
  EXPECT_TRUE(testing::moved_aside(file).empty());
  sqlite_program_cache cache(file);
  EXPECT_TRUE(cache.get("k1"));
  EXPECT_EQ(cache.size(), 3u);
}

// ---- read-only files and directories --------------------------------------------------------

// rwxr-xr-x: others may traverse and read, nobody but the owner may write (the trust rules refuse
// a world-writable cache directory or file).
constexpr fs::perms kTraversable = fs::perms::owner_all | fs::perms::group_read |
                                   fs::perms::group_exec | fs::perms::others_read |
                                   fs::perms::others_exec;

// As root, hands `path` to nobody (65534) and back: what an unprivileged child writes must be its
// own, since the trust rules refuse files of other users (root's excepted).
void give_to_nobody(const fs::path& path) {
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0) << path;
  }
}
void give_to_root(const fs::path& path) {
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(path.c_str(), 0, 0), 0) << path;
  }
}

// Runs `body` in a child that file permissions apply to: as root, the child becomes nobody.
std::string run_unprivileged(const std::function<std::string()>& body) {
  return testing::run_in_child([&]() -> std::string {
    if (::geteuid() == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) return "SKIP cannot drop root privileges";
    }
    return body();
  });
}

// In the child: reads hit or miss (never a wrong value, never a throw), writes are skipped with a
// warning, or throw under strict; nothing is moved aside.
std::string read_only_checks(const fs::path& file) {
  testing::log_capture logs;
  sqlite_program_cache cache(file, {.max_size_bytes = {}, .busy_timeout = 200ms});
  for (int i = 0; i < 5; ++i) {
    auto hit = cache.get("k" + std::to_string(i));
    if (hit && !(*hit == code_of_size(1000, "n", i))) return "wrong value";
  }
  cache.put("new", code_of_size(10));
  if (cache.get("new")) return "a write to a read-only cache succeeded";
  if (logs.warnings() == 0) return "no warning for the skipped write";
  sqlite_program_cache strict(file, {.max_size_bytes = {},
                                     .busy_timeout = 200ms,
                                     .on_write_failure = write_failure_policy::strict});
  try {
    strict.put("new", code_of_size(10));
    return "strict put did not throw";
  } catch (const error&) {
  }
  if (!testing::moved_aside(file).empty()) return "moved aside";
  return "";
}

TEST_F(SqliteCache, ReadOnlyFileDegradesToSkippedWrites) {
  populate(file, 5);
  fs::permissions(dir.path(), kTraversable);  // traversable by the unprivileged child
  fs::permissions(dir.path() / "sub", kTraversable);
  // The directory is the child's (writable, and trusted by it: its own); the file root's,
  // read-only to the child.
  give_to_nobody(file.parent_path());
  fs::permissions(file, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const std::string result = run_unprivileged([&] { return read_only_checks(file); });
  give_to_root(file.parent_path());
  // SQLite side files the child left are the child's: the trust rules would refuse them to root.
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    if (fs::exists(file.string() + suffix)) give_to_root(file.string() + suffix);
  }
  if (result.rfind("SKIP", 0) == 0) GTEST_SKIP() << result;
  EXPECT_EQ(result, "");
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
  sqlite_program_cache cache(file);
  EXPECT_EQ(cache.size(), 5u);
  EXPECT_EQ(cache.verify(false).corrupt, 0u);
}

TEST_F(SqliteCache, ReadOnlyDirectoryDegradesToSkippedWrites) {
  populate(file, 5);
  fs::permissions(dir.path(), kTraversable);
  fs::permissions(dir.path() / "sub", kTraversable);
  // The file and its lock are the child's (writable by it, and trusted: its own); the directory
  // root's, read-only to the child.
  give_to_nobody(file);
  give_to_nobody(file.string() + ".lock");
  fs::permissions(file.parent_path(), kTraversable);
  const std::string result = run_unprivileged([&] { return read_only_checks(file); });
  give_to_root(file);
  give_to_root(file.string() + ".lock");
  fs::permissions(file.parent_path(), fs::perms::owner_all);
  if (result.rfind("SKIP", 0) == 0) GTEST_SKIP() << result;
  EXPECT_EQ(result, "");
  sqlite_program_cache cache(file);
  EXPECT_EQ(cache.size(), 5u);
}

TEST_F(SqliteCache, UncreatableDirectoryDegradesOrThrowsWhenStrict) {
  fs::permissions(dir.path(), fs::perms::all);
  const fs::path ro = dir.path() / "ro";
  fs::create_directories(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::others_read |
                          fs::perms::others_exec);
  const std::string result = run_unprivileged([&]() -> std::string {
    testing::log_capture logs;
    const fs::path f = ro / "deeper" / "cache.db";
    {
      sqlite_program_cache cache(f);
      if (cache.get("k")) return "hit in a cache that cannot exist";
      cache.put("k", code_of_size(10));
      if (logs.warnings() == 0) return "no warning";
    }
    try {
      sqlite_program_cache strict(
          f, {.max_size_bytes = {}, .on_write_failure = write_failure_policy::strict});
      return "strict constructor did not throw";
    } catch (const error&) {
    }
    return "";
  });
  if (result.rfind("SKIP", 0) == 0) GTEST_SKIP() << result;
  EXPECT_EQ(result, "");
}

// ---- threads and processes ------------------------------------------------------------------

TEST_F(SqliteCache, ThreadsShareOneCache) {
  sqlite_program_cache cache(file, {.max_size_bytes = 1 << 20});
  const auto results = testing::run_workload_in_threads(cache, 4, 0, 32, 300);
  testing::expect_clean(results);
  EXPECT_EQ(cache.stats().errors, 0u);
  EXPECT_LE(cache.size_bytes(), 1u << 20);
}

TEST_F(SqliteCache, ThreadsWithTheirOwnCacheObjects) {
  { sqlite_program_cache create(file); }
  std::vector<std::thread> threads;
  std::vector<testing::workload_result> results(4);
  std::vector<cache_stats> stats(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      sqlite_program_cache cache(
          file, {.max_size_bytes = 1 << 20, .on_write_failure = write_failure_policy::strict});
      results[t] = testing::run_workload(cache, 100 + t, 32, 300);
      stats[t] = cache.stats();
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(results[t].wrong, 0u);
    EXPECT_EQ(results[t].errors, 0u);
    EXPECT_EQ(stats[t].errors, 0u);
  }
  sqlite_program_cache cache(file);
  EXPECT_LE(cache.size_bytes(), 1u << 20);
  EXPECT_EQ(cache.verify(false).corrupt, 0u);
}

TEST_F(SqliteCache, ProcessesCreatingTheFileTogether) {
  const auto reports = testing::run_children(6, [&](int p) -> std::string {
    testing::log_capture logs;
    sqlite_program_cache cache(
        file, {.max_size_bytes = {}, .on_write_failure = write_failure_policy::strict});
    const std::string key = "p" + std::to_string(p);
    cache.put(key, code_of_size(100, key));
    if (!cache.get(key)) return "own entry missing";
    if (logs.warnings() != 0) return "warnings: " + logs.all();
    return "";
  });
  for (const auto& r : reports) EXPECT_EQ(r, "");
  sqlite_program_cache cache(file);
  EXPECT_EQ(cache.size(), 6u);
  EXPECT_TRUE(testing::moved_aside(file).empty());
}

// Rows cucore never writes, whose key or write id is of another SQL type (another program's, a
// damaged file's), are corrupt and removed by verify(true): they were counted corrupt on every run
// and never removed (the typed delete could not match them). The counters count the removals.
TEST_F(SqliteCache, VerifyRemovesRowsOfForeignTypes) {
  {
    sqlite_program_cache cache(file);
    cache.put("good", code_of_size(10, "good"));
  }
  {
    testing::raw_db raw(file);
    raw.exec(
        "INSERT INTO blobs(id, value) VALUES (1000, x'00'), (1001, x'00');"
        "INSERT INTO entries(key, id, size, atime, written) VALUES ('text key', 1000, 1, 0, 5);"
        "INSERT INTO entries(key, id, size, atime, written) VALUES (x'6b6b', 1001, 1, 0, 'abc');");
  }
  sqlite_program_cache cache(file);
  cache_verify_report report = cache.verify(false);
  EXPECT_EQ(report.entries, 3u);
  EXPECT_EQ(report.corrupt, 2u);
  report = cache.verify(true);
  EXPECT_EQ(report.corrupt, 2u);
  EXPECT_EQ(report.removed, 2u);
  EXPECT_EQ(cache.stats().corrupt_dropped, 2u);
  report = cache.verify(true);
  EXPECT_EQ(report.entries, 1u);
  EXPECT_EQ(report.corrupt, 0u);
  EXPECT_EQ(report.removed, 0u);
  EXPECT_EQ(cache.stats().corrupt_dropped, 2u) << "nothing more was dropped";
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_TRUE(cache.get("good"));
}

}  // namespace
}  // namespace cucore
