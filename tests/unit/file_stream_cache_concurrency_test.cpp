// The directory cache shared by threads of one process and by processes
// (file_stream_cache_test_support.hpp).
#include <gtest/gtest.h>

#include <string>

#include "cache/entry_format.hpp"
#include "cache_test_support.hpp"
#include "cache_workload.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "file_stream_cache_test_support.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // file_stream_cache_test_support.hpp and the shared test helpers

// ---------------------------------------------------------------------------------------------
// Concurrency: threads of one process, and processes

TEST(FileStreamCache, ThreadsShareOneCache) {
  temp_dir dir;
  // A cap of about a third of the working set: eviction runs in every thread.
  file_stream_program_cache cache(dir.path(), fast(512 * 1024));
  const auto results = testing::run_workload_in_threads(cache, 6, 100, 48, 300);
  testing::expect_clean(results);
  EXPECT_GT(cache.stats().evictions, 0u);
  EXPECT_EQ(cache.stats().errors, 0u);
  EXPECT_EQ(cache.stats().corrupt_dropped, 0u);
}

TEST(FileStreamCache, ProcessesWritingOneKeyLeaveOneWholeValue) {
  temp_dir dir;
  { file_stream_program_cache cache(dir.path(), fast()); }
  auto reports = run_children(6, [&](int i) -> std::string {
    file_stream_program_cache cache(dir.path());
    for (int j = 0; j < 20; ++j)
      cache.put("shared", workload_value(0, static_cast<std::uint32_t>(i)));
    return cache.stats().errors == 0 ? "" : "errors";
  });
  for (const auto& r : reports) EXPECT_EQ(r, "");
  file_stream_program_cache cache(dir.path(), fast());
  auto hit = cache.get("shared");
  ASSERT_TRUE(hit);
  EXPECT_TRUE(testing::is_valid_workload_value(0, *hit)) << "one writer's value, whole";
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_TRUE(tmp_files(dir.path()).empty());
}

TEST(FileStreamCache, ProcessesWritingDistinctKeysAllSurvive) {
  temp_dir dir;
  { file_stream_program_cache cache(dir.path(), fast()); }
  auto reports = run_children(4, [&](int i) -> std::string {
    file_stream_program_cache cache(dir.path(), fast());
    for (int j = 0; j < 25; ++j) {
      const auto index = static_cast<std::uint32_t>(i * 100 + j);
      cache.put(workload_key(index), workload_value(index, 1));
    }
    return "";
  });
  for (const auto& r : reports) EXPECT_EQ(r, "");
  file_stream_program_cache cache(dir.path(), fast());
  EXPECT_EQ(cache.size(), 100u);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 25; ++j) {
      const auto index = static_cast<std::uint32_t>(i * 100 + j);
      auto hit = cache.get(workload_key(index));
      ASSERT_TRUE(hit) << index;
      EXPECT_EQ(*hit, workload_value(index, 1));
    }
  }
}

TEST(FileStreamCache, ReaderProcessNeverSeesATornFile) {
  temp_dir dir;
  {
    file_stream_program_cache cache(dir.path(), fast());
    cache.put(workload_key(0), workload_value(0, 0));
  }
  auto reports = run_children(2, [&](int role) -> std::string {
    file_stream_program_cache cache(dir.path(), fast());
    if (role == 0) {  // writer: rewrites key 0 and churns others
      for (std::uint32_t j = 0; j < 200; ++j) {
        cache.put(workload_key(0), workload_value(0, j % 4));
        cache.put(workload_key(1 + j % 20), workload_value(1 + j % 20, j));
      }
      return "";
    }
    int hits = 0;
    for (int j = 0; j < 200; ++j) {
      auto hit = cache.get(workload_key(0));
      if (!hit) return "miss on a key that is always present";
      if (!testing::is_valid_workload_value(0, *hit)) return "wrong value";
      ++hits;
    }
    return hits == 200 && cache.stats().corrupt_dropped == 0 ? "" : "torn read";
  });
  for (const auto& r : reports) EXPECT_EQ(r, "");
}

}  // namespace
}  // namespace cucore
