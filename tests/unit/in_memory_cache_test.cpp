// The in-memory LRU cache.
#include <gtest/gtest.h>

#include "cache_workload.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/error.hpp"

namespace cucore {
namespace {

object_code code_of_size(std::size_t n, const std::string& name = "c") {
  return object_code(code_type::cubin, std::vector<std::byte>(n, std::byte{7}), name);
}

TEST(InMemoryCache, EmptyOnCreate) {
  in_memory_program_cache cache;
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.size_bytes(), 0u);
  EXPECT_FALSE(cache.get("missing"));
  EXPECT_EQ(cache.stats().misses, 1u);
}

TEST(InMemoryCache, RoundTripKeepsTheWholeObjectCode) {
  in_memory_program_cache cache;
  object_code code(code_type::ptx, {std::byte{1}, std::byte{2}}, "kernel.cu",
                   symbol_map{{"k<float>", "_Z1kIfEvv"}});
  cache.put("key", code);
  auto hit = cache.get("key");
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, code);
  EXPECT_EQ(hit->symbol("k<float>"), "_Z1kIfEvv");
  EXPECT_EQ(hit->code().data(), code.code().data()) << "hits share the stored bytes";
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().puts, 1u);
}

TEST(InMemoryCache, StringAndByteKeysAlias) {
  in_memory_program_cache cache;
  cache.put("k", code_of_size(3));
  std::vector<std::byte> bytes = {std::byte{'k'}};
  EXPECT_TRUE(cache.get(std::span<const std::byte>(bytes)));
  EXPECT_TRUE(cache.get(std::string("k")));
}

TEST(InMemoryCache, OverwriteReplacesValueAndSize) {
  in_memory_program_cache cache;
  cache.put("k", code_of_size(10));
  cache.put("k", code_of_size(25));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.size_bytes(), 25u);
  EXPECT_EQ(cache.get("k")->size(), 25u);
}

TEST(InMemoryCache, EraseAndClear) {
  in_memory_program_cache cache;
  cache.put("a", code_of_size(1));
  cache.put("b", code_of_size(2));
  EXPECT_TRUE(cache.erase("a"));
  EXPECT_FALSE(cache.erase("a"));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.size_bytes(), 2u);
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.size_bytes(), 0u);
}

TEST(InMemoryCache, RejectsZeroCaps) {
  EXPECT_THROW(in_memory_program_cache({.max_entries = 0}), invalid_argument);
  EXPECT_THROW(in_memory_program_cache({.max_size_bytes = 0}), invalid_argument);
}

TEST(InMemoryCache, SizeCapEvictsLeastRecentlyUsed) {
  in_memory_program_cache cache({.max_size_bytes = 30});
  cache.put("a", code_of_size(10));
  cache.put("b", code_of_size(10));
  cache.put("c", code_of_size(10));
  ASSERT_TRUE(cache.get("a"));  // promote a: b is now the oldest
  cache.put("d", code_of_size(10));
  EXPECT_TRUE(cache.get("a"));
  EXPECT_FALSE(cache.get("b"));
  EXPECT_TRUE(cache.get("c"));
  EXPECT_TRUE(cache.get("d"));
  EXPECT_EQ(cache.size_bytes(), 30u);
  EXPECT_EQ(cache.stats().evictions, 1u);
}

TEST(InMemoryCache, EntryCapEvictsLeastRecentlyUsed) {
  in_memory_program_cache cache({.max_entries = 2});
  cache.put("a", code_of_size(1));
  cache.put("b", code_of_size(1));
  ASSERT_TRUE(cache.get("a"));
  cache.put("c", code_of_size(1));
  EXPECT_TRUE(cache.get("a"));
  EXPECT_FALSE(cache.get("b"));
  EXPECT_EQ(cache.size(), 2u);
}

TEST(InMemoryCache, OversizedWriteEvictsItself) {
  in_memory_program_cache cache({.max_size_bytes = 10});
  cache.put("small", code_of_size(5));
  cache.put("huge", code_of_size(11));
  EXPECT_FALSE(cache.get("huge"));
  EXPECT_FALSE(cache.get("small"));
  EXPECT_EQ(cache.size_bytes(), 0u);
}

TEST(InMemoryCache, UnboundedByDefault) {
  in_memory_program_cache cache;
  for (int i = 0; i < 1000; ++i) cache.put(std::to_string(i), code_of_size(100));
  EXPECT_EQ(cache.size(), 1000u);
  EXPECT_EQ(cache.size_bytes(), 100000u);
}

TEST(InMemoryCache, UpdateTakesPairs) {
  in_memory_program_cache cache;
  std::vector<std::pair<std::string, object_code>> items = {{"a", code_of_size(1)},
                                                            {"b", code_of_size(2)}};
  cache.update(items);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(InMemoryCache, ListVerifyTrim) {
  in_memory_program_cache cache;
  cache.put("a", code_of_size(10, "A"));
  cache.put("b", code_of_size(20, "B"));
  auto entries = cache.list();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].name, "B");  // most recent first
  auto report = cache.verify(true);
  EXPECT_EQ(report.entries, 2u);
  EXPECT_EQ(report.ok, 2u);
  EXPECT_EQ(cache.trim(20), 1u);
  EXPECT_FALSE(cache.get("a"));
  EXPECT_TRUE(cache.get("b"));
}

TEST(InMemoryCache, ConcurrentThreadsStayConsistent) {
  in_memory_program_cache cache({.max_size_bytes = 2 << 20});
  const auto results = testing::run_workload_in_threads(cache, 8, 0, 64, 3000);
  testing::expect_clean(results);
  EXPECT_LE(cache.size_bytes(), std::uint64_t{2 << 20});
}

}  // namespace
}  // namespace cucore
