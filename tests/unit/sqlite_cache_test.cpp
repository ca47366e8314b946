// The SQLite program cache: real SQLite files in fresh temp directories, real child processes
// (fork) where more than one process matters, raw SQLite connections to inspect, lock and damage
// the files. No mocks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
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
#include "sqlite_test_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

object_code code_of_size(std::size_t n, const std::string& name = "c", unsigned seed = 7) {
  std::vector<std::byte> bytes(n);
  std::mt19937 rng(seed);
  for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xff);
  return object_code(code_type::cubin, std::move(bytes), name);
}

// Bytes an entry takes in the cache (the entry format: header + code).
std::uint64_t stored_size(std::string_view key, const object_code& code) {
  return detail::encode_entry(std::as_bytes(std::span<const char>(key.data(), key.size())), code)
      .size();
}

std::uintmax_t size_on_disk(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

// Overwrites `bytes.size()` bytes at `offset` in place.
void patch_file(const fs::path& p, std::uintmax_t offset, const std::string& bytes) {
  std::fstream f(p, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A cache file with `n` entries "k0".."k<n-1>" of `size` bytes, closed (checkpointed, no -wal).
void populate(const fs::path& file, int n, std::size_t size = 1000) {
  sqlite_program_cache cache(file);
  for (int i = 0; i < n; ++i) cache.put("k" + std::to_string(i), code_of_size(size, "n", i));
}

struct cache_fixture : ::testing::Test {
  testing::temp_dir dir;
  fs::path file = dir.path() / "sub" / "dir" / "cache.db";
};

// ---- basics ---------------------------------------------------------------------------------

using SqliteCache = cache_fixture;

TEST_F(SqliteCache, EmptyOnCreateAndCreatesParentDirectories) {
  sqlite_program_cache cache(file);
  EXPECT_TRUE(fs::exists(file));
  EXPECT_TRUE(fs::exists(fs::path(file.string() + ".lock")));
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.size_bytes(), 0u);
  EXPECT_FALSE(cache.get("missing"));
  EXPECT_EQ(cache.stats().misses, 1u);
  EXPECT_EQ(cache.stats().errors, 0u);
  EXPECT_EQ(cache.file(), file);
  EXPECT_EQ(cache.description(), "sqlite " + file.string());
}

TEST_F(SqliteCache, RoundTripKeepsTheWholeObjectCode) {
  sqlite_program_cache cache(file);
  testing::expect_round_trip(cache);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().puts, 1u);
}

TEST_F(SqliteCache, EveryCodeTypeAndSizeRoundTrips) {
  sqlite_program_cache cache(file);
  const code_type types[] = {code_type::ptx,    code_type::cubin,  code_type::ltoir,
                             code_type::fatbin, code_type::object, code_type::library};
  const std::size_t sizes[] = {0, 1, 4095, 4096, 70000, 1 << 20};
  unsigned i = 0;
  for (auto t : types) {
    for (auto n : sizes) {
      const std::string key = "k" + std::to_string(i++);
      const object_code random = code_of_size(n, "", i);
      object_code code(t, std::vector<std::byte>(random.code().begin(), random.code().end()), key);
      cache.put(key, code);
      auto hit = cache.get(key);
      ASSERT_TRUE(hit) << key;
      EXPECT_EQ(*hit, code) << key;
    }
  }
}

TEST_F(SqliteCache, StringAndByteKeysAlias) {
  sqlite_program_cache cache(file);
  cache.put("k", code_of_size(3));
  std::vector<std::byte> bytes = {std::byte{'k'}};
  EXPECT_TRUE(cache.get(std::span<const std::byte>(bytes)));
  EXPECT_TRUE(cache.get(std::string("k")));
  cache.put(std::span<const std::byte>(bytes), code_of_size(5));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.get("k")->size(), 5u);
}

TEST_F(SqliteCache, EmptyAndBinaryKeysAreOrdinaryKeys) {
  sqlite_program_cache cache(file);
  cache.put("", code_of_size(4, "empty"));
  const std::vector<std::byte> binary = {std::byte{0}, std::byte{0xff}, std::byte{0}};
  cache.put(std::span<const std::byte>(binary), code_of_size(6, "binary"));
  ASSERT_TRUE(cache.get(""));
  EXPECT_EQ(cache.get("")->name(), "empty");
  ASSERT_TRUE(cache.get(std::span<const std::byte>(binary)));
  EXPECT_EQ(cache.get(std::span<const std::byte>(binary))->name(), "binary");
  EXPECT_FALSE(cache.get(std::span<const std::byte>(binary).first(2)));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_TRUE(cache.erase(""));
  EXPECT_EQ(cache.size(), 1u);
}

TEST_F(SqliteCache, OverwriteReplacesValueAndSize) {
  sqlite_program_cache cache(file);
  cache.put("k", code_of_size(10, "first"));
  cache.put("k", code_of_size(2500, "second"));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.size_bytes(), stored_size("k", code_of_size(2500, "second")));
  EXPECT_EQ(cache.get("k")->name(), "second");
  cache.put("k", code_of_size(7, "third"));
  EXPECT_EQ(cache.get("k")->name(), "third");
  EXPECT_EQ(cache.size_bytes(), stored_size("k", code_of_size(7, "third")));
}

TEST_F(SqliteCache, EraseAndClear) {
  sqlite_program_cache cache(file);
  cache.put("a", code_of_size(1));
  cache.put("b", code_of_size(2));
  EXPECT_TRUE(cache.erase("a"));
  EXPECT_FALSE(cache.erase("a"));
  EXPECT_FALSE(cache.get("a"));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.size_bytes(), stored_size("b", code_of_size(2)));
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.size_bytes(), 0u);
  EXPECT_FALSE(cache.get("b"));
  cache.put("c", code_of_size(3));
  EXPECT_TRUE(cache.get("c"));
}

TEST_F(SqliteCache, PersistsAcrossReopen) {
  {
    sqlite_program_cache cache(file);
    cache.put("a", code_of_size(100, "A"));
    cache.put("b", code_of_size(200, "B", 3));
  }
  sqlite_program_cache cache(file);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(*cache.get("a"), code_of_size(100, "A"));
  EXPECT_EQ(*cache.get("b"), code_of_size(200, "B", 3));
}

TEST_F(SqliteCache, SizeBytesIsTheSumOfStoredEntries) {
  sqlite_program_cache cache(file);
  std::uint64_t expected = 0;
  for (int i = 0; i < 20; ++i) {
    const std::string key = "key-" + std::to_string(i);
    const auto code = code_of_size(static_cast<std::size_t>(i) * 333, "n" + std::to_string(i));
    cache.put(key, code);
    expected += stored_size(key, code);
  }
  EXPECT_EQ(cache.size(), 20u);
  EXPECT_EQ(cache.size_bytes(), expected);
  testing::raw_db raw(file);
  EXPECT_EQ(raw.integer("SELECT sum(length(value)) FROM blobs"), static_cast<long long>(expected));
}

TEST_F(SqliteCache, UpdateTakesPairs) {
  sqlite_program_cache cache(file);
  std::vector<std::pair<std::string, object_code>> items = {{"a", code_of_size(1)},
                                                            {"b", code_of_size(2)}};
  cache.update(items);
  EXPECT_EQ(cache.size(), 2u);
}

TEST_F(SqliteCache, RejectsBadOptions) {
  EXPECT_THROW(sqlite_program_cache(file, {.max_size_bytes = 0}), invalid_argument);
  EXPECT_THROW(sqlite_program_cache(file, {.max_size_bytes = {}, .busy_timeout = -1ms}),
               invalid_argument);
  EXPECT_THROW(sqlite_program_cache(file, {.max_size_bytes = {}, .touch_flush_interval = -1ms}),
               invalid_argument);
  EXPECT_THROW(sqlite_program_cache(file, {.max_size_bytes = {}, .mmap_size_bytes = ~0ull}),
               invalid_argument);
  EXPECT_THROW(sqlite_program_cache(""), invalid_argument);
}

// Whether this process has `file` itself (not its -shm) memory-mapped: what PRAGMA mmap_size
// does once a read goes through the map.
bool mapped(const fs::path& file) {
  const std::string path = fs::canonical(file).string();
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.size() >= path.size() &&
        line.compare(line.size() - path.size(), path.size(), path) == 0)
      return true;
  }
  return false;
}

TEST_F(SqliteCache, MemoryMapIsOffByDefault) {
  populate(file, 3);
  sqlite_program_cache cache(file);
  EXPECT_EQ(cache.get("k1"), code_of_size(1000, "n", 1));
  EXPECT_FALSE(mapped(file));
}

TEST_F(SqliteCache, MemoryMapWhenAskedReadsTheSameValues) {
  populate(file, 3);
  {
    sqlite_program_cache cache(file, {.max_size_bytes = {}, .mmap_size_bytes = 64 << 20});
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(cache.get("k" + std::to_string(i)), code_of_size(1000, "n", i));
    EXPECT_TRUE(mapped(file));
    cache.put("k3", code_of_size(5000, "n", 3));
    EXPECT_EQ(cache.get("k3"), code_of_size(5000, "n", 3));
    EXPECT_EQ(cache.verify(false).corrupt, 0u);
  }
  EXPECT_FALSE(mapped(file)) << "closing the cache unmaps the file";
}

TEST_F(SqliteCache, ClosedCacheThrowsAndCloseIsIdempotent) {
  sqlite_program_cache cache(file);
  cache.put("a", code_of_size(1));
  cache.close();
  cache.close();
  EXPECT_THROW(cache.get("a"), error);
  EXPECT_THROW(cache.put("a", code_of_size(1)), error);
  EXPECT_THROW(cache.size(), error);
  EXPECT_EQ(cache.stats().puts, 1u);
  sqlite_program_cache again(file);
  EXPECT_TRUE(again.get("a"));
}

TEST_F(SqliteCache, ListVerifyTrimDescription) {
  sqlite_program_cache cache(file);
  cache.put("a",
            object_code(code_type::ptx, std::vector<std::byte>(10), "A", symbol_map{{"x", "_Zx"}}));
  cache.put("b", code_of_size(20, "B"));
  auto entries = cache.list();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].name, "B");  // most recently used first
  EXPECT_EQ(entries[1].name, "A");
  EXPECT_EQ(entries[1].type, code_type::ptx);
  EXPECT_EQ(entries[1].symbol_count, 1u);
  EXPECT_EQ(entries[1].payload_bytes, 10u);
  EXPECT_EQ(entries[1].stored_bytes, stored_size("a", cache.get("a").value()));
  EXPECT_EQ(
      std::string(reinterpret_cast<const char*>(entries[1].key.data()), entries[1].key.size()),
      "a");
  ASSERT_TRUE(entries[1].last_used);
  EXPECT_LT(std::chrono::system_clock::now() - *entries[1].last_used, 1min);
  // The read of "a" just above counts even before it is written back.
  EXPECT_EQ(cache.list()[0].name, "A");

  auto report = cache.verify(true);
  EXPECT_EQ(report.entries, 2u);
  EXPECT_EQ(report.ok, 2u);
  EXPECT_EQ(report.corrupt, 0u);
  EXPECT_EQ(cache.trim(cache.size_bytes()), 0u);
  EXPECT_EQ(cache.trim(stored_size("a", cache.get("a").value())), 1u);  // b is older now
  EXPECT_TRUE(cache.get("a"));
  EXPECT_FALSE(cache.get("b"));
  EXPECT_EQ(cache.trim(0), 1u);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.stats().evictions, 2u);
}

TEST_F(SqliteCache, ListAndVerifyWalkManyEntriesInBatches) {
  sqlite_program_cache cache(file);
  for (int i = 0; i < 300; ++i) cache.put("k" + std::to_string(i), code_of_size(50, "n", i));
  EXPECT_EQ(cache.list().size(), 300u);
  auto report = cache.verify(false);
  EXPECT_EQ(report.entries, 300u);
  EXPECT_EQ(report.ok, 300u);
}

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

// ---- journal mode and filesystems -----------------------------------------------------------

TEST_F(SqliteCache, UsesWalOnALocalFilesystem) {
  auto kind = detail::sqlite::filesystem_of(dir.path());
  ASSERT_TRUE(kind);
  if (kind->network) GTEST_SKIP() << "the temp directory is on " << kind->name;
  sqlite_program_cache cache(file);
  cache.put("k", code_of_size(10));
  testing::raw_db raw(file);
  EXPECT_EQ(raw.text("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.text("PRAGMA auto_vacuum"), "2");  // incremental
  EXPECT_EQ(raw.text("PRAGMA application_id"), std::to_string(0x43554350));
  EXPECT_EQ(raw.text("PRAGMA user_version"), "1");
}

TEST_F(SqliteCache, RollbackJournalWhenAsked) {
  sqlite_program_cache cache(file, {.max_size_bytes = {}, .journal = sqlite_journal::rollback});
  cache.put("k", code_of_size(10));
  EXPECT_TRUE(cache.get("k"));
  testing::raw_db raw(file);
  EXPECT_EQ(raw.text("PRAGMA journal_mode"), "delete");
  EXPECT_FALSE(fs::exists(file.string() + "-wal"));
}

TEST_F(SqliteCache, SwitchesAnExistingWalFileToARollbackJournalWhenAsked) {
  populate(file, 3);
  sqlite_program_cache cache(file, {.max_size_bytes = {}, .journal = sqlite_journal::rollback});
  EXPECT_TRUE(cache.get("k1"));
  testing::raw_db raw(file);
  EXPECT_EQ(raw.text("PRAGMA journal_mode"), "delete");
}

// Makes every directory look like NFS for the scope.
struct pretend_nfs {
  pretend_nfs() {
    detail::sqlite::override_filesystem_for_testing(detail::sqlite::filesystem_kind{"nfs", true});
  }
  ~pretend_nfs() { detail::sqlite::override_filesystem_for_testing(std::nullopt); }
  pretend_nfs(const pretend_nfs&) = delete;
  pretend_nfs& operator=(const pretend_nfs&) = delete;
};

TEST_F(SqliteCache, MemoryMapIsIgnoredOnANetworkFilesystem) {
  populate(file, 3);
  pretend_nfs nfs;
  sqlite_program_cache cache(file, {.max_size_bytes = {}, .mmap_size_bytes = 64 << 20});
  EXPECT_EQ(cache.get("k1"), code_of_size(1000, "n", 1));
  EXPECT_FALSE(mapped(file));
}

TEST_F(SqliteCache, NetworkFilesystemGetsARollbackJournalAndAWarning) {
  pretend_nfs nfs;
  testing::log_capture logs;
  sqlite_program_cache cache(file);
  EXPECT_GE(logs.warnings("network filesystem (nfs)"), 1u) << logs.all();
  cache.put("k", code_of_size(10));
  EXPECT_TRUE(cache.get("k"));
  testing::raw_db raw(file);
  EXPECT_EQ(raw.text("PRAGMA journal_mode"), "delete");
}

TEST_F(SqliteCache, NetworkFilesystemSwitchesAnExistingWalFile) {
  populate(file, 3);
  pretend_nfs nfs;
  sqlite_program_cache cache(file);
  EXPECT_TRUE(cache.get("k2"));
  testing::raw_db raw(file);
  EXPECT_EQ(raw.text("PRAGMA journal_mode"), "delete");
}

TEST_F(SqliteCache, NetworkFilesystemLeavesAWalFileOthersHaveOpenAlone) {
  populate(file, 3);
  int go[2];
  int ready[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(ready), 0);
  testing::child_process other([&]() -> std::string {
    testing::raw_db raw(file);  // a WAL reader on the same host
    raw.text("SELECT count(*) FROM entries");
    char c = 1;
    testing::write_all(ready[1], &c, 1);
    if (::read(go[0], &c, 1) != 1) return "no go";
    return "";
  });
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  {
    pretend_nfs nfs;
    testing::log_capture logs;
    sqlite_program_cache cache(file);
    EXPECT_FALSE(cache.get("k1"));
    EXPECT_NO_THROW(cache.put("x", code_of_size(10)));
    EXPECT_GE(logs.warnings("could not be switched"), 1u) << logs.all();
  }
  testing::write_all(go[1], &c, 1);
  EXPECT_EQ(other.wait(), "");
  for (int fd : {go[0], go[1], ready[0], ready[1]}) ::close(fd);
  EXPECT_TRUE(testing::moved_aside(file).empty());
  testing::raw_db raw(file);
  EXPECT_EQ(raw.text("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.text("SELECT count(*) FROM entries"), "3");
}

TEST_F(SqliteCache, WalWhenAskedEvenOnANetworkFilesystem) {
  pretend_nfs nfs;
  sqlite_program_cache cache(file, {.max_size_bytes = {}, .journal = sqlite_journal::wal});
  cache.put("k", code_of_size(10));
  testing::raw_db raw(file);
  EXPECT_EQ(raw.text("PRAGMA journal_mode"), "wal");
}

TEST(SqliteFilesystems, NetworkFilesystemsAreRecognised) {
  using detail::sqlite::classify_filesystem;
  EXPECT_TRUE(classify_filesystem(0x6969).network);  // NFS
  EXPECT_EQ(classify_filesystem(0x6969).name, "nfs");
  EXPECT_TRUE(classify_filesystem(0xFF534D42).network);   // CIFS
  EXPECT_TRUE(classify_filesystem(0xFE534D42).network);   // SMB2
  EXPECT_TRUE(classify_filesystem(0x517B).network);       // SMB
  EXPECT_TRUE(classify_filesystem(0x65735546).network);   // FUSE
  EXPECT_TRUE(classify_filesystem(0x01021997).network);   // 9p
  EXPECT_TRUE(classify_filesystem(0x0BD00BD0).network);   // Lustre
  EXPECT_FALSE(classify_filesystem(0xEF53).network);      // ext4
  EXPECT_FALSE(classify_filesystem(0x01021994).network);  // tmpfs
  EXPECT_FALSE(classify_filesystem(0x58465342).network);  // xfs
  EXPECT_FALSE(classify_filesystem(0x9123683E).network);  // btrfs
  EXPECT_FALSE(classify_filesystem(0x794C7630).network);  // overlayfs
}

// ---- damaged and foreign files --------------------------------------------------------------

// Opens the damaged file: it must be moved aside (still there, under another name), a warning
// logged, and a fresh, working cache created in its place.
void expect_moved_aside_and_fresh(const fs::path& file) {
  testing::log_capture logs;
  sqlite_program_cache cache(file);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(cache.get("k" + std::to_string(i)));
  const auto aside = testing::moved_aside(file);
  ASSERT_EQ(aside.size(), 1u) << logs.all();
  EXPECT_TRUE(fs::exists(aside[0]));
  EXPECT_GT(size_on_disk(aside[0]), 0u);
  EXPECT_GE(logs.warnings("moved it to"), 1u) << logs.all();
  cache.put("fresh", code_of_size(10));
  EXPECT_TRUE(cache.get("fresh"));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.verify(false).corrupt, 0u);
}

TEST_F(SqliteCache, GarbageFileIsMovedAside) {
  fs::create_directories(file.parent_path());
  std::string garbage(8192, '\0');
  std::mt19937 rng(1);
  for (auto& ch : garbage) ch = static_cast<char>(rng());
  testing::write_text(file, garbage);
  expect_moved_aside_and_fresh(file);
}

TEST_F(SqliteCache, ShortTextFileIsMovedAside) {
  fs::create_directories(file.parent_path());
  testing::write_text(file, "hello, not a database\n");
  expect_moved_aside_and_fresh(file);
}

TEST_F(SqliteCache, ZeroedHeaderIsMovedAside) {
  populate(file, 10);
  patch_file(file, 0, std::string(100, '\0'));
  expect_moved_aside_and_fresh(file);
}

TEST_F(SqliteCache, TruncatedDatabaseIsMovedAside) {
  populate(file, 40, 4000);
  fs::resize_file(file, size_on_disk(file) / 2);
  expect_moved_aside_and_fresh(file);
}

TEST_F(SqliteCache, DamagedPagesFoundByAReadAreConfirmedAndMovedAside) {
  populate(file, 40, 4000);
  // Scribble over pages 3-5 (b-tree pages), the header intact.
  std::string junk(3 * 4096, '\x5a');
  patch_file(file, 4096 * 2, junk);
  testing::log_capture logs;
  sqlite_program_cache cache(file);
  for (int i = 0; i < 40; ++i) {
    auto hit = cache.get("k" + std::to_string(i));
    if (hit) {
      EXPECT_EQ(*hit, code_of_size(4000, "n", i)) << "a wrong value is never acceptable";
    }
  }
  // SQLite reports SQLITE_CORRUPT on a damaged b-tree page; PRAGMA integrity_check confirms it.
  EXPECT_EQ(testing::moved_aside(file).size(), 1u) << logs.all();
  EXPECT_GE(logs.warnings("integrity_check"), 1u) << logs.all();
  cache.put("fresh", code_of_size(10));
  EXPECT_TRUE(cache.get("fresh"));
}

TEST_F(SqliteCache, ManyProcessesFindingOneDamagedFileMoveItAsideOnce) {
  fs::create_directories(file.parent_path());
  testing::write_text(file, std::string(10000, 'x'));
  const auto reports = testing::run_children(6, [&](int p) -> std::string {
    testing::log_capture logs;
    sqlite_program_cache cache(file);
    const std::string key = "p" + std::to_string(p);
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      cache.put(key, code_of_size(100, key));
      if (cache.get(key)) return "";
      std::this_thread::sleep_for(20ms);
    }
    return "never got a working cache:\n" + logs.all();
  });
  for (const auto& r : reports) EXPECT_EQ(r, "");
  EXPECT_EQ(testing::moved_aside(file).size(), 1u);
  sqlite_program_cache cache(file);
  EXPECT_EQ(cache.size(), 6u);
}

TEST_F(SqliteCache, ForeignDatabaseIsMovedAside) {
  fs::create_directories(file.parent_path());
  {
    testing::raw_db raw(file);
    raw.exec("CREATE TABLE users(name TEXT); INSERT INTO users VALUES ('alice')");
  }
  expect_moved_aside_and_fresh(file);
  testing::raw_db moved(testing::moved_aside(file).at(0));
  EXPECT_EQ(moved.text("SELECT name FROM users"), "alice") << "the moved file is intact";
}

TEST_F(SqliteCache, ForeignUserVersionIsMovedAside) {
  fs::create_directories(file.parent_path());
  {
    testing::raw_db raw(file);
    raw.exec("PRAGMA user_version = 7");
  }
  expect_moved_aside_and_fresh(file);
}

TEST_F(SqliteCache, OlderSchemaVersionIsMovedAside) {
  populate(file, 2);
  {
    testing::raw_db raw(file);
    raw.exec("PRAGMA user_version = 0");
  }
  expect_moved_aside_and_fresh(file);
}

TEST_F(SqliteCache, ChangedSchemaIsMovedAside) {
  populate(file, 2);
  {
    testing::raw_db raw(file);
    raw.exec("CREATE TABLE extra(x)");
  }
  expect_moved_aside_and_fresh(file);
}

TEST_F(SqliteCache, NewerSchemaIsLeftAlone) {
  populate(file, 2);
  {
    testing::raw_db raw(file);
    raw.exec("PRAGMA user_version = 2");
  }
  testing::log_capture logs;
  sqlite_program_cache cache(file);
  EXPECT_FALSE(cache.get("k0"));
  EXPECT_NO_THROW(cache.put("k9", code_of_size(10)));
  EXPECT_GE(logs.warnings("newer cucore"), 1u) << logs.all();
  EXPECT_TRUE(testing::moved_aside(file).empty());
  sqlite_program_cache strict(
      file, {.max_size_bytes = {}, .on_write_failure = write_failure_policy::strict});
  EXPECT_THROW(strict.put("k9", code_of_size(10)), error);
  testing::raw_db raw(file);
  EXPECT_EQ(raw.text("SELECT count(*) FROM entries"), "2");
}

TEST_F(SqliteCache, DamagedFileOpenInAnotherCacheIsNotMovedUntilItCloses) {
  populate(file, 3);
  auto holder = std::make_unique<sqlite_program_cache>(file);  // holds the file open
  ASSERT_TRUE(holder->get("k0"));
  patch_file(file, 0, std::string(100, '\0'));
  testing::log_capture logs;
  sqlite_program_cache cache(file);
  EXPECT_FALSE(cache.get("k1"));
  EXPECT_TRUE(testing::moved_aside(file).empty()) << "renamed under a live connection";
  EXPECT_GE(logs.warnings("other processes have it open"), 1u) << logs.all();
  holder.reset();
  // Retried after 1-1.5 s.
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (testing::moved_aside(file).empty() && std::chrono::steady_clock::now() < deadline) {
    EXPECT_FALSE(cache.get("k1"));
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(testing::moved_aside(file).size(), 1u) << logs.all();
  cache.put("fresh", code_of_size(10));
  EXPECT_TRUE(cache.get("fresh"));
}

TEST_F(SqliteCache, ForeignDatabaseOpenInAnotherProgramIsNotMoved) {
  fs::create_directories(file.parent_path());
  {
    testing::raw_db raw(file);
    raw.exec("PRAGMA journal_mode = WAL; CREATE TABLE users(name TEXT)");
  }
  int go[2];
  int ready[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(ready), 0);
  testing::child_process other([&]() -> std::string {
    testing::raw_db raw(file);
    raw.text("SELECT count(*) FROM users");
    char c = 1;
    testing::write_all(ready[1], &c, 1);
    ::read(go[0], &c, 1);  // hold the connection until told
    return "";
  });
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  {
    testing::log_capture logs;
    sqlite_program_cache cache(file);
    EXPECT_FALSE(cache.get("k"));
    EXPECT_TRUE(testing::moved_aside(file).empty());
    EXPECT_GE(logs.warnings("another program has it open"), 1u) << logs.all();
  }
  testing::write_all(go[1], &c, 1);
  EXPECT_EQ(other.wait(), "");
  for (int fd : {go[0], go[1], ready[0], ready[1]}) ::close(fd);
  expect_moved_aside_and_fresh(file);
}

TEST_F(SqliteCache, DamagedRowIsAMissAndIsRemoved) {
  {
    sqlite_program_cache cache(file);
    cache.put("good", code_of_size(3000, "good"));
    cache.put("bad", code_of_size(3000, "bad"));
    cache.put("bad2", code_of_size(3000, "bad2"));
  }
  {
    testing::raw_db raw(file);
    // Flip bits in the payload of two rows.
    for (const char* key : {"bad", "bad2"}) {
      raw.exec(std::string("UPDATE blobs SET value = substr(value, 1, 200) || "
                           "x'DEADBEEF' || substr(value, 205) WHERE id = (SELECT id FROM entries "
                           "WHERE key = CAST('") +
               key + "' AS BLOB))");
    }
  }
  testing::log_capture logs;
  sqlite_program_cache cache(file);
  EXPECT_FALSE(cache.get("bad"));
  EXPECT_EQ(cache.stats().corrupt_dropped, 1u);
  EXPECT_GE(logs.warnings("checksum mismatch"), 1u) << logs.all();
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.size_bytes(), stored_size("good", code_of_size(3000, "good")) +
                                    stored_size("bad2", code_of_size(3000, "bad2")));

  auto report = cache.verify(false);
  EXPECT_EQ(report.entries, 2u);
  EXPECT_EQ(report.ok, 1u);
  EXPECT_EQ(report.corrupt, 1u);
  EXPECT_EQ(report.removed, 0u);
  report = cache.verify(true);
  EXPECT_EQ(report.corrupt, 1u);
  EXPECT_EQ(report.removed, 1u);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.verify(false).corrupt, 0u);
  EXPECT_TRUE(cache.get("good"));
  EXPECT_TRUE(testing::moved_aside(file).empty());
}

TEST_F(SqliteCache, DamagedLargeRowIsAMissAndIsRemoved) {
  // Values over 128 KiB are read with incremental blob I/O: the same verification applies.
  {
    sqlite_program_cache cache(file);
    cache.put("big", code_of_size(300000, "big"));
    cache.put("big2", code_of_size(300000, "big2", 2));
    testing::raw_db raw(file);
    raw.exec(
        "UPDATE blobs SET value = substr(value, 1, 250000) || x'00' || substr(value, 250002) "
        "WHERE id = (SELECT id FROM entries WHERE key = CAST('big' AS BLOB))");
  }
  testing::log_capture logs;
  sqlite_program_cache cache(file);
  EXPECT_FALSE(cache.get("big"));
  EXPECT_EQ(cache.stats().corrupt_dropped, 1u);
  EXPECT_EQ(cache.size(), 1u);
  ASSERT_TRUE(cache.get("big2"));
  EXPECT_EQ(*cache.get("big2"), code_of_size(300000, "big2", 2));
}

TEST_F(SqliteCache, EntryUnderTheWrongKeyIsAMiss) {
  {
    sqlite_program_cache cache(file);
    cache.put("a", code_of_size(100, "A"));
    cache.put("b", code_of_size(100, "B"));
    testing::raw_db raw(file);
    // Point a's row at b's blob: a valid entry, for another key.
    raw.exec(
        "UPDATE blobs SET value = (SELECT value FROM blobs WHERE id = (SELECT id FROM entries "
        "WHERE key = CAST('b' AS BLOB))) WHERE id = (SELECT id FROM entries WHERE key = "
        "CAST('a' AS BLOB))");
  }
  testing::log_capture logs;
  sqlite_program_cache cache(file);
  EXPECT_FALSE(cache.get("a"));
  EXPECT_GE(logs.warnings("key mismatch"), 1u);
  EXPECT_EQ(cache.get("b")->name(), "B");
}

TEST_F(SqliteCache, DamagedRowRewrittenByAPeerSurvives) {
  sqlite_program_cache cache(file);
  cache.put("k", code_of_size(100, "old"));
  testing::raw_db raw(file);
  raw.exec("UPDATE blobs SET value = x'00'");
  // A peer rewrote the row (new write id) after this process read the damaged value: the guarded
  // delete must not remove it. Simulated by replacing the row between the read and the delete is
  // not possible from here, so check the guard directly: a delete with a stale write id is a no-op.
  const long long stale = raw.integer("SELECT written FROM entries");
  {
    sqlite_program_cache peer(file);
    peer.put("k", code_of_size(100, "new"));
  }
  raw.exec("DELETE FROM entries WHERE key = CAST('k' AS BLOB) AND written = " +
           std::to_string(stale));
  EXPECT_EQ(cache.get("k")->name(), "new");
}

TEST_F(SqliteCache, SymlinkIsRefusedAndItsTargetLeftAlone) {
  const fs::path target = dir.path() / "target.db";
  populate(target, 2);
  fs::create_directories(file.parent_path());
  fs::create_symlink(target, file);
  testing::log_capture logs;
  {
    sqlite_program_cache cache(file);
    EXPECT_FALSE(cache.get("k0"));
    EXPECT_NO_THROW(cache.put("x", code_of_size(10)));
    EXPECT_GE(logs.warnings(), 1u);
  }
  EXPECT_TRUE(fs::is_symlink(file));
  EXPECT_TRUE(testing::moved_aside(file).empty());
  sqlite_program_cache direct(target);
  EXPECT_EQ(direct.size(), 2u);
  EXPECT_FALSE(direct.get("x"));
}

TEST_F(SqliteCache, FileDeletedUnderAnOpenCacheIsRecreated) {
  sqlite_program_cache cache(file);
  cache.put("a", code_of_size(10));
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(file.string() + suffix);
  testing::log_capture logs;
  cache.put("b", code_of_size(10));  // notices, and writes to a fresh cache at the path
  EXPECT_TRUE(fs::exists(file));
  EXPECT_TRUE(cache.get("b"));
  EXPECT_FALSE(cache.get("a"));
  sqlite_program_cache other(file);
  EXPECT_TRUE(other.get("b"));
  EXPECT_EQ(cache.stats().errors, 0u);
}

TEST_F(SqliteCache, ReaderNoticesAReplacedFileWithinASecond) {
  sqlite_program_cache reader(file);
  {
    sqlite_program_cache writer(file);
    writer.put("a", code_of_size(10));
  }
  ASSERT_TRUE(reader.get("a"));
  const fs::path other = dir.path() / "other.db";
  {
    sqlite_program_cache writer(other);
    writer.put("b", code_of_size(10));
  }
  for (const char* suffix : {"-wal", "-shm"}) fs::remove(file.string() + suffix);
  fs::rename(other, file);  // replaced by a different database
  std::this_thread::sleep_for(1100ms);
  EXPECT_TRUE(reader.get("b"));
  EXPECT_FALSE(reader.get("a"));
}

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
