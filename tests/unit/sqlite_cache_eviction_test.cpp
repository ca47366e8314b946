// The SQLite cache's size cap and recency: the hard cap, least recently read entries evicted,
// access times written back lazily and in bounded batches, page sizes, the file shrinking after
// evictions, and a full disk.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cache/sqlite/tuning.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/error.hpp"
#include "process_support.hpp"
#include "small_filesystem.hpp"
#include "sqlite_test_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using namespace testing;            // sqlite_test_support.hpp and the shared test helpers
namespace detail = cucore::detail;  // not testing::detail (small_filesystem.hpp)

// ---- size cap and LRU -----------------------------------------------------------------------

TEST_F(SqliteCache, HardCapHoldsAfterEveryPut) {
  const std::uint64_t cap = 64 * 1024;
  sqlite_program_cache cache(file, {.max_size_bytes = cap});
  std::mt19937 rng(42);
  for (int i = 0; i < 300; ++i) {
    const std::string key = "k" + std::to_string(rng() % 50);
    cache.put(key, code_of_size(rng() % 9000, key, i));
    ASSERT_LE(cache.size_bytes(), cap) << "after put " << i;
  }
  EXPECT_GT(cache.stats().evictions, 0u);
  testing::raw_db raw(file);
  EXPECT_EQ(raw.integer("SELECT coalesce(sum(size), 0) FROM entries"),
            static_cast<long long>(cache.size_bytes()));
  EXPECT_EQ(raw.integer("SELECT count(*) FROM blobs"), raw.integer("SELECT count(*) FROM entries"));
}

TEST_F(SqliteCache, LruEvictsLeastRecentlyReadFirst) {
  const auto c = code_of_size(1000);
  const std::uint64_t one = stored_size("a", c);
  sqlite_program_cache cache(file, {.max_size_bytes = 3 * one});
  cache.put("a", c);
  cache.put("b", c);
  cache.put("c", c);
  ASSERT_TRUE(cache.get("a"));  // a is now the most recently read: b is the oldest
  cache.put("d", c);
  EXPECT_TRUE(cache.get("a"));
  EXPECT_FALSE(cache.get("b"));
  EXPECT_TRUE(cache.get("c"));
  EXPECT_TRUE(cache.get("d"));
  EXPECT_EQ(cache.size_bytes(), 3 * one);
  EXPECT_EQ(cache.stats().evictions, 1u);
}

TEST_F(SqliteCache, ReadsArePromotedAcrossReopen) {
  const auto c = code_of_size(1000);
  const std::uint64_t one = stored_size("a", c);
  {
    sqlite_program_cache cache(file, {.max_size_bytes = {}, .touch_flush_interval = 1h});
    cache.put("a", c);
    cache.put("b", c);
    cache.put("c", c);
    ASSERT_TRUE(cache.get("a"));  // written back only by close
  }
  sqlite_program_cache cache(file, {.max_size_bytes = 3 * one});
  cache.put("d", c);
  EXPECT_TRUE(cache.get("a"));
  EXPECT_FALSE(cache.get("b"));
}

TEST_F(SqliteCache, ReadsInAnotherProcessCount) {
  const auto c = code_of_size(1000);
  const std::uint64_t one = stored_size("a", c);
  {
    sqlite_program_cache cache(file);
    cache.put("a", c);
    cache.put("b", c);
    cache.put("c", c);
  }
  testing::child_process reader([&]() -> std::string {
    sqlite_program_cache cache(file, {.max_size_bytes = {}, .touch_flush_interval = 1h});
    return cache.get("a") ? "" : "a missing in the child";
  });
  ASSERT_EQ(reader.wait(), "");
  sqlite_program_cache cache(file, {.max_size_bytes = 3 * one});
  cache.put("d", c);
  EXPECT_TRUE(cache.get("a"));
  EXPECT_FALSE(cache.get("b"));
}

TEST_F(SqliteCache, ReadsDoNotWriteUntilTheFlush) {
  {
    sqlite_program_cache cache(file);
    for (int i = 0; i < 5; ++i) cache.put("k" + std::to_string(i), code_of_size(100, "n", i));
  }
  testing::raw_db raw(file);
  const auto version = [&] { return raw.integer("PRAGMA data_version"); };
  const auto atime = [&] {
    return raw.integer("SELECT atime FROM entries WHERE key = CAST('k0' AS BLOB)");
  };
  const long long before = atime();
  {
    sqlite_program_cache cache(file, {.max_size_bytes = {}, .touch_flush_interval = 1h});
    const long long v0 = version();
    for (int round = 0; round < 50; ++round) {
      for (int i = 0; i < 5; ++i) ASSERT_TRUE(cache.get("k" + std::to_string(i)));
    }
    EXPECT_EQ(version(), v0) << "a read wrote to the database";
    EXPECT_EQ(atime(), before);
  }
  EXPECT_GT(atime(), before) << "close must write the access times back";
}

// A process that reads a hot entry once and exits (a CLI hit, a pytest-xdist worker, an MPI rank)
// writes nothing: the entry was read within the last minute, so its access time stands.
TEST_F(SqliteCache, ReadingARecentlyReadEntryWritesNothing) {
  {
    sqlite_program_cache cache(file);
    cache.put("k", code_of_size(100));
  }
  testing::raw_db raw(file);
  const auto version = [&] { return raw.integer("PRAGMA data_version"); };
  const auto atime = [&] {
    return raw.integer("SELECT atime FROM entries WHERE key = CAST('k' AS BLOB)");
  };
  const long long written = atime();
  {
    sqlite_program_cache first_reader(file);  // the first read since the write is recorded
    ASSERT_TRUE(first_reader.get("k"));
  }
  const long long read = atime();
  EXPECT_GT(read, written);
  const long long v0 = version();
  for (int process = 0; process < 3; ++process) {
    testing::child_process reader([&]() -> std::string {
      sqlite_program_cache cache(file, {.max_size_bytes = {}, .touch_flush_interval = 0ms});
      return cache.get("k") ? "" : "k missing in the child";
    });
    ASSERT_EQ(reader.wait(), "");
  }
  EXPECT_EQ(version(), v0) << "a read of a recently read entry wrote to the database";
  EXPECT_EQ(atime(), read);

  // Two minutes later (the last read moved back, still a read: an odd stamp) the next read is
  // recorded again.
  raw.exec("UPDATE entries SET atime = atime - 120000000 WHERE key = CAST('k' AS BLOB)");
  ASSERT_EQ(atime() % 2, 1);
  {
    sqlite_program_cache cache(file, {.max_size_bytes = {}, .touch_flush_interval = 0ms});
    ASSERT_TRUE(cache.get("k"));
  }
  EXPECT_GT(atime(), read);
}

TEST_F(SqliteCache, ZeroFlushIntervalWritesAccessTimesOnEveryRead) {
  sqlite_program_cache cache(file, {.max_size_bytes = {}, .touch_flush_interval = 0ms});
  cache.put("k", code_of_size(10));
  testing::raw_db raw(file);
  const auto atime = [&] {
    return raw.integer("SELECT atime FROM entries WHERE key = CAST('k' AS BLOB)");
  };
  const long long before = atime();
  ASSERT_TRUE(cache.get("k"));
  EXPECT_GT(atime(), before);
}

TEST_F(SqliteCache, AccessTimesNeverMoveBackwards) {
  {
    sqlite_program_cache cache(file);
    cache.put("k", code_of_size(10));
  }
  // An old reader's pending read is written back after a newer one: the newer time stays.
  sqlite_program_cache old_reader(file, {.max_size_bytes = {}, .touch_flush_interval = 1h});
  ASSERT_TRUE(old_reader.get("k"));
  std::this_thread::sleep_for(5ms);
  testing::raw_db raw(file);
  const auto atime = [&] {
    return raw.integer("SELECT atime FROM entries WHERE key = CAST('k' AS BLOB)");
  };
  {
    sqlite_program_cache new_reader(file, {.max_size_bytes = {}, .touch_flush_interval = 0ms});
    ASSERT_TRUE(new_reader.get("k"));
  }
  const long long newer = atime();
  old_reader.close();
  EXPECT_EQ(atime(), newer);
}

// A read that finds touch_flush_interval passed writes at most kMaxTouchesPerReadFlush access
// times; the following reads write the rest, batch by batch, without waiting for the interval.
// (Random reads over many entries record one access time per hit: without the bound, one read
// would write a second's worth of them, tens of thousands.)
TEST_F(SqliteCache, AReadWritesBackABoundedNumberOfAccessTimes) {
  constexpr auto cap = static_cast<long long>(detail::sqlite::kMaxTouchesPerReadFlush);
  constexpr int n = 3 * cap + 17;
  {
    sqlite_program_cache cache(file, {.max_size_bytes = {}, .touch_flush_interval = 1h});
    for (int i = 0; i < n; ++i) cache.put("k" + std::to_string(i), code_of_size(10, "n", i));
  }
  testing::raw_db raw(file);
  // Rows whose access time is a read's (odd): the reads written back so far.
  const auto read_rows = [&] {
    return raw.integer("SELECT count(*) FROM entries WHERE atime % 2 = 1");
  };
  ASSERT_EQ(read_rows(), 0);
  sqlite_program_cache cache(file, {.max_size_bytes = {}, .touch_flush_interval = 1h});
  for (int i = 0; i < n; ++i) ASSERT_TRUE(cache.get("k" + std::to_string(i)));
  ASSERT_EQ(read_rows(), 0) << "the interval has not passed: nothing written yet";

  detail::sqlite::advance_touch_clock_for_testing(2h);
  std::vector<long long> written;
  for (int read = 0; read < 5; ++read) {
    ASSERT_TRUE(cache.get("k0"));  // pending, or once written, read within the minute: no new time
    written.push_back(read_rows());
  }
  EXPECT_EQ(written, (std::vector<long long>{cap, 2 * cap, 3 * cap, n, n}));
  // Everything written: the next interval's read has nothing to write.
  const long long version = raw.integer("PRAGMA data_version");
  detail::sqlite::advance_touch_clock_for_testing(2h);
  ASSERT_TRUE(cache.get("k1"));
  EXPECT_EQ(raw.integer("PRAGMA data_version"), version);
}

// Writes and close are not bounded: each writes every pending access time before it returns.
TEST_F(SqliteCache, WritesAndCloseWriteBackEveryAccessTime) {
  constexpr int n = 2 * static_cast<int>(detail::sqlite::kMaxTouchesPerReadFlush) + 5;
  {
    sqlite_program_cache cache(file, {.max_size_bytes = {}, .touch_flush_interval = 1h});
    for (int i = 0; i < n; ++i) cache.put("k" + std::to_string(i), code_of_size(10, "n", i));
  }
  testing::raw_db raw(file);
  const auto read_rows = [&] {
    return raw.integer("SELECT count(*) FROM entries WHERE atime % 2 = 1");
  };
  {
    sqlite_program_cache cache(file, {.max_size_bytes = {}, .touch_flush_interval = 1h});
    for (int i = 0; i < n; ++i) ASSERT_TRUE(cache.get("k" + std::to_string(i)));
    ASSERT_EQ(read_rows(), 0);
    cache.put("new", code_of_size(10));
    EXPECT_EQ(read_rows(), n);
  }
  // Made written (even) and two minutes old again: the next reads are recorded, and close writes
  // them all.
  raw.exec("UPDATE entries SET atime = atime - atime % 2 - 120000000");
  ASSERT_EQ(read_rows(), 0);
  {
    sqlite_program_cache cache(file, {.max_size_bytes = {}, .touch_flush_interval = 1h});
    for (int i = 0; i < n; ++i) ASSERT_TRUE(cache.get("k" + std::to_string(i)));
    detail::sqlite::advance_touch_clock_for_testing(2h);
    ASSERT_TRUE(cache.get("k0"));
    EXPECT_EQ(read_rows(), static_cast<long long>(detail::sqlite::kMaxTouchesPerReadFlush));
  }
  EXPECT_EQ(read_rows(), n);
}

// New files get kPageSize pages whatever the SQLite build's default; a file with another page size
// (another build's default, a file converted by hand) keeps it and works as usual.
TEST_F(SqliteCache, NewFilesGetThePageSizeAndOtherPageSizesStillWork) {
  const auto small = code_of_size(100, "small");
  const auto page_sized = code_of_size(4096, "page");
  const auto large = code_of_size(200000, "large");
  const int other_page_size = detail::sqlite::kPageSize == 16384 ? 1024 : 16384;
  {
    sqlite_program_cache cache(file);
    cache.put("small", small);
    cache.put("page", page_sized);
    cache.put("large", large);
  }
  {
    testing::raw_db raw(file);
    ASSERT_EQ(raw.integer("PRAGMA page_size"), detail::sqlite::kPageSize);
    // The same content in pages of another size: 16384 bytes, or 1024 were 16384 the default.
    raw.exec("PRAGMA journal_mode = DELETE");
    raw.exec("PRAGMA page_size = " + std::to_string(other_page_size));
    raw.exec("VACUUM");
    raw.exec("PRAGMA journal_mode = WAL");
    ASSERT_EQ(raw.integer("PRAGMA page_size"), other_page_size);
  }
  {
    sqlite_program_cache cache(file, {.max_size_bytes = 400000});
    EXPECT_EQ(cache.get("small"), small);
    EXPECT_EQ(cache.get("page"), page_sized);
    EXPECT_EQ(cache.get("large"), large);
    for (int i = 0; i < 40; ++i) cache.put("new" + std::to_string(i), code_of_size(4096, "n", i));
    EXPECT_LE(cache.size_bytes(), 400000u);
    EXPECT_EQ(cache.get("new39"), code_of_size(4096, "n", 39));
    const std::size_t stored = cache.size();
    EXPECT_EQ(cache.trim(0), stored);
    EXPECT_EQ(cache.size(), 0u);
    cache.put("again", page_sized);
    EXPECT_EQ(cache.get("again"), page_sized);
  }
  testing::raw_db raw(file);
  EXPECT_EQ(raw.integer("PRAGMA page_size"), other_page_size);
  EXPECT_EQ(raw.text("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(raw.text("PRAGMA application_id"), std::to_string(0x43554350));
}

TEST_F(SqliteCache, FileShrinksAfterEvictions) {
  {
    sqlite_program_cache cache(file);
    for (int i = 0; i < 64; ++i)
      cache.put("k" + std::to_string(i), code_of_size(64 * 1024, "n", i));
  }
  const auto big = size_on_disk(file);
  EXPECT_GT(big, 4u << 20);
  const std::uint64_t cap = 256 * 1024;
  {
    sqlite_program_cache cache(file, {.max_size_bytes = cap});
    cache.put("new", code_of_size(1000));
    EXPECT_LE(cache.size_bytes(), cap);
    EXPECT_TRUE(cache.get("new"));
  }
  const auto small = size_on_disk(file);
  EXPECT_LT(small, cap + cap / 4 + 64 * 1024)
      << "file of " << small << " bytes for a cap of " << cap;
  testing::raw_db raw(file);
  EXPECT_EQ(raw.text("PRAGMA auto_vacuum"), "2");
  EXPECT_EQ(raw.text("PRAGMA freelist_count"), "0");
}

TEST_F(SqliteCache, TrimAndEraseGiveSpaceBack) {
  sqlite_program_cache cache(file);
  for (int i = 0; i < 32; ++i) cache.put("k" + std::to_string(i), code_of_size(64 * 1024, "n", i));
  EXPECT_EQ(cache.trim(128 * 1024), 31u);
  for (int i = 0; i < 32; ++i) cache.erase("k" + std::to_string(i));
  cache.close();
  EXPECT_LT(size_on_disk(file), 64u * 1024);
}

TEST_F(SqliteCache, OversizedEntryIsNotStoredAndDoesNotLeaveTheOldValue) {
  sqlite_program_cache cache(file, {.max_size_bytes = 4096});
  cache.put("small", code_of_size(100));
  cache.put("k", code_of_size(100, "old"));
  cache.put("k", code_of_size(5000, "huge"));
  EXPECT_FALSE(cache.get("k")) << "the replaced value must not outlive the put";
  EXPECT_TRUE(cache.get("small")) << "an entry that can never fit evicts nothing";
  EXPECT_LE(cache.size_bytes(), 4096u);
  cache.put("other", code_of_size(5000));
  EXPECT_FALSE(cache.get("other"));
  EXPECT_EQ(cache.stats().errors, 0u);
}

// A full disk (a real one: a small tmpfs) is named as such, with the file, not as SQLite's
// "database or disk is full" (SQLITE_FULL) or "disk I/O error" (SQLITE_IOERR_* with errno ENOSPC:
// growing the WAL index of a cache reopened on a full disk).
TEST_F(SqliteCache, AFullDiskSaysNoSpaceLeftOnDevice) {
  const fs::path mount = dir.path() / "small";
  fs::create_directory(mount);
  const std::string report = testing::run_in_child([&]() -> std::string {
    if (std::string why = testing::mount_small_tmpfs(mount, 256 * 1024); !why.empty()) {
      return "skip: " + why;
    }
    // The first put that fails, or the open (strict: it throws too).
    auto first_failure = [&](sqlite_journal journal, int full_before) -> std::string {
      const fs::path db = mount / "cache" / "cache.db";
      fs::create_directories(db.parent_path());
      if (full_before == 2) populate(db, 2);  // an existing cache, reopened on a full disk
      if (full_before > 0) {                  // every byte left taken by another file
        std::ofstream filler(mount / "filler", std::ios::binary);
        const std::string chunk(4096, 'x');
        while (filler.write(chunk.data(), static_cast<std::streamsize>(chunk.size()))) {
        }
      }
      std::string message = "no put failed";
      try {
        sqlite_program_cache cache(
            db, {.on_write_failure = write_failure_policy::strict, .journal = journal});
        for (int i = 0; i < 100; ++i) {
          cache.put("k" + std::to_string(i), code_of_size(16 * 1024, "n", i));
        }
      } catch (const std::exception& e) {
        message = e.what();
      }
      fs::remove_all(db.parent_path());
      fs::remove(mount / "filler");
      return message;
    };
    std::string out = "messages:\n";
    // 0: the puts fill it; 1: full before the cache is created; 2: full before it is reopened.
    for (const int full_before : {0, 1, 2}) {
      out += first_failure(sqlite_journal::wal, full_before) + "\n";
      out += first_failure(sqlite_journal::rollback, full_before) + "\n";
    }
    return out;
  });
  if (report.starts_with("skip: ")) GTEST_SKIP() << report.substr(6);
  ASSERT_TRUE(report.starts_with("messages:\n")) << report;
  std::istringstream lines(report.substr(10));
  std::string line;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(std::getline(lines, line)) << report;
    EXPECT_TRUE(testing::contains(line, "no space left on device")) << line;
    EXPECT_TRUE(testing::contains(line, (mount / "cache" / "cache.db").string())) << line;
    EXPECT_FALSE(testing::contains(line, "disk I/O error")) << line;
    EXPECT_FALSE(testing::contains(line, "database or disk is full")) << line;
  }
}

}  // namespace
}  // namespace cucore
