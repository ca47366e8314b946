// The SQLite program cache: real SQLite files in fresh temp directories, real child processes
// (fork) where more than one process matters, raw SQLite connections to inspect, lock and damage
// the files. No mocks. This file: entries, list, verify and trim, threads and processes; the rest
// by topic in sqlite_cache_{eviction,damage,sharing}_test.cpp, the helpers and the fixture in
// sqlite_test_support.hpp.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cache_test_support.hpp"
#include "cache_workload.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/error.hpp"
#include "process_support.hpp"
#include "sqlite_test_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using namespace testing;  // sqlite_test_support.hpp and the shared test helpers

// ---- basics ---------------------------------------------------------------------------------

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

}  // namespace
}  // namespace cucore
