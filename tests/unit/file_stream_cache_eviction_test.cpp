// The directory cache's recency and size cap: reads recorded as access times, least recently read
// entries evicted, the running size estimate, and the races of eviction with a peer (staged through
// the test hooks).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>

#include "file_stream_test_support.hpp"

namespace cucore {
namespace {

using namespace testing;  // file_stream_test_support.hpp and the shared test helpers

// Four entries of this size exceed a 4000-byte cap; three fit under 90% of it.
constexpr std::size_t kPayload = 1000;
std::uint64_t entry_bytes(const std::string& key) {
  return stored_size(key, code_of(kPayload, key));
}

// Puts `keys` (kPayload bytes each, named as their key) in `cache` at `root`, then makes them read
// (and, with `written_too`, written) 100 s apart: the first the longest ago, the last 100 s ago.
void put_aged(file_stream_program_cache& cache, const fs::path& root,
              std::initializer_list<const char*> keys, bool written_too = false) {
  for (const char* k : keys) cache.put(k, code_of(kPayload, k));
  double age = 100.0 * static_cast<double>(keys.size());
  for (const char* k : keys) {
    set_times(entry_file(root, k), age, written_too ? std::optional<double>(age) : std::nullopt);
    age -= 100;
  }
}

// After "d" went over the cap with "a", "b" and "c" in `cache`: "a" was kept (`a_kept` says why),
// "b" evicted (`b_gone`), "c" and "d" kept, in one eviction.
void expect_b_evicted(file_stream_program_cache& cache, const char* a_kept, const char* b_gone) {
  EXPECT_TRUE(cache.get("a")) << a_kept;
  EXPECT_FALSE(cache.get("b")) << b_gone;
  EXPECT_TRUE(cache.get("c"));
  EXPECT_TRUE(cache.get("d"));
  EXPECT_EQ(cache.stats().evictions, 1u);
}

// A cap that two 600-byte entries are over and one is far under.
std::uint64_t cap_under_two() {
  return 2 * stored_size("old", code_of(600, "old")) - 100;
}

// Puts "old" (600 bytes) in `cache` at `root`, read 100 s ago: the first eviction candidate. Its
// file.
fs::path put_old(file_stream_program_cache& cache, const fs::path& root) {
  cache.put("old", code_of(600, "old"));
  const fs::path file = entry_file(root, "old");
  set_times(file, 100);
  return file;
}

// ---------------------------------------------------------------------------------------------
// Stat guards and recency

TEST(FileStreamCache, ReadRecordsRecencyAndKeepsMtime) {
  one_entry e;
  set_times(e.file, 500, 400);
  const struct stat before = lstat_of(e.file);
  const std::int64_t t0 = now_ns();
  ASSERT_TRUE(e.cache.get("k"));
  const struct stat after = lstat_of(e.file);
  EXPECT_GE(ns(after.st_atim), t0 - 1'000'000) << "atime set to the time of the read";
  EXPECT_EQ(ns(after.st_mtim), ns(before.st_mtim)) << "mtime untouched";
  EXPECT_EQ(after.st_ino, before.st_ino) << "no rewrite";
}

TEST(FileStreamCache, RepeatedReadsWithinASecondAreRecordedOnce) {
  one_entry e;
  ASSERT_TRUE(e.cache.get("k"));
  const std::int64_t first = ns(lstat_of(e.file).st_atim);
  ASSERT_TRUE(e.cache.get("k"));
  EXPECT_EQ(ns(lstat_of(e.file).st_atim), first);
}

TEST(FileStreamCache, TouchRecordsOnlyTheFileThatWasRead) {
  // A peer replaces the entry between our read and our recording of it: the file we read gets
  // the new atime, the peer's file is left alone.
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  file_stream_program_cache peer(dir.path(), fast());
  cache.put("k", code_of(10, "old"));
  const fs::path file = entry_file(dir.path(), "k");
  set_times(file, 600, 600);
  std::int64_t peer_atime = 0;
  {
    hooks_scope hooks([&](detail::file_stream_test_hooks& h) {
      h.after_read = [&](const std::string& path) {
        fs::create_hard_link(path, dir / "read-inode");
        peer.put("k", code_of(11, "new"));
        set_times(path, 300, 300);
        peer_atime = ns(lstat_of(path).st_atim);
      };
    });
    auto hit = cache.get("k");
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->name(), "old") << "the bytes read before the replacement";
  }
  EXPECT_EQ(ns(lstat_of(file).st_atim), peer_atime) << "the peer's file was not touched";
  EXPECT_GT(ns(lstat_of(dir / "read-inode").st_atim), now_ns() - 60'000'000'000)
      << "the file that was read was";
  EXPECT_EQ(cache.get("k")->name(), "new");
}

TEST(FileStreamCache, PruneOnlyIfStatUnchanged) {
  // get() reads a damaged file; before it prunes, a peer replaces the entry with a good one.
  // The good one must survive.
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  file_stream_program_cache peer(dir.path(), fast());
  cache.put("k", code_of(100));
  const fs::path file = entry_file(dir.path(), "k");
  auto bytes = read_bytes(file);
  bytes.back() ^= std::byte{1};
  write_bytes(file, bytes);
  {
    hooks_scope hooks([&](detail::file_stream_test_hooks& h) {
      h.after_read = [&](const std::string&) { peer.put("k", code_of(7, "good")); };
    });
    EXPECT_FALSE(cache.get("k")) << "what was read is damaged: a miss";
  }
  EXPECT_EQ(cache.stats().corrupt_dropped, 0u) << "the peer replaced it: nothing was dropped";
  expect_named(cache, "k", "good", "the peer's replacement was not pruned");
  EXPECT_TRUE(tmp_files(dir.path()).empty()) << "nothing left aside in tmp/";
}

TEST(FileStreamCache, ClearDoesNotUnlinkAReplacedFile) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  file_stream_program_cache peer(dir.path(), fast());
  cache.put("replaced", code_of(10, "v1"));
  cache.put("other", code_of(10));
  const fs::path replaced = entry_file(dir.path(), "replaced");
  {
    hooks_scope hooks = on_removing(replaced, [&] { peer.put("replaced", code_of(12, "v2")); });
    cache.clear();
  }
  expect_named(cache, "replaced", "v2", "an entry a peer wrote during clear() survives");
  EXPECT_FALSE(cache.get("other"));
  EXPECT_TRUE(tmp_files(dir.path()).empty());
}

// ---------------------------------------------------------------------------------------------
// Size cap and eviction

TEST(FileStreamCache, SizeCapEvictsLeastRecentlyRead) {
  temp_dir dir;
  ASSERT_GT(4 * entry_bytes("a"), 4000u);
  ASSERT_LE(3 * entry_bytes("a"), 3600u);
  file_stream_program_cache cache(dir.path(), fast(4000));
  put_aged(cache, dir.path(), {"a", "b", "c"});  // "a" written first...
  ASSERT_TRUE(cache.get("a"));                   // ...but read last
  cache.put("d", code_of(kPayload, "d"));
  expect_b_evicted(cache, "read recently: survives although written first",
                   "least recently read: evicted");
  EXPECT_LE(cache.size_bytes(), 4000u);
}

TEST(FileStreamCache, WithoutReadsTheOldestWrittenGoesFirst) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(4000));
  put_aged(cache, dir.path(), {"a", "b", "c"}, true);
  cache.put("d", code_of(kPayload, "d"));
  EXPECT_FALSE(cache.get("a"));
  EXPECT_TRUE(cache.get("b"));
  EXPECT_TRUE(cache.get("c"));
  EXPECT_TRUE(cache.get("d"));
}

TEST(FileStreamCache, UnboundedByDefault) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  for (int i = 0; i < 200; ++i) cache.put("k" + std::to_string(i), code_of(10'000));
  EXPECT_EQ(cache.size(), 200u);
  EXPECT_EQ(cache.stats().evictions, 0u);
}

TEST(FileStreamCache, EntryLargerThanTheCapIsNotStored) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(4000));
  cache.put("small", code_of(100));
  cache.put("huge", code_of(5000));
  EXPECT_FALSE(cache.get("huge"));
  EXPECT_TRUE(cache.get("small")) << "a too-large entry does not flush the cache";
  EXPECT_EQ(cache.stats().errors, 0u);
}

TEST(FileStreamCache, WritesSkipTheScanUnderTheCapAndScanOverIt) {
  counted_scans c(1 << 20);
  EXPECT_EQ(c.scans, 1) << "the constructor seeds the estimate";
  for (int i = 0; i < 50; ++i) c.cache.put("k" + std::to_string(i), code_of(100));
  EXPECT_EQ(c.scans, 1) << "50 small puts: the running estimate suffices";
  c.cache.put("big", code_of((1 << 20) - 100));
  EXPECT_EQ(c.scans, 2) << "over the cap: scan and evict";
  EXPECT_GT(c.cache.stats().evictions, 0u);
}

TEST(FileStreamCache, ScansAfterAnEighthOfTheCapWrittenEvenUnderIt) {
  // Several processes each under the cap can together be far over it: each rescans after
  // writing cap/8 bytes, which catches the others' writes.
  counted_scans c(80'000);
  file_stream_program_cache peer(c.dir.path(), fast());
  for (int i = 0; i < 20; ++i) peer.put("peer" + std::to_string(i), code_of(4000));  // 80 KB+
  c.scans = 0;
  c.cache.put("mine", code_of(11'000));
  EXPECT_EQ(c.scans, 1);
  EXPECT_LE(c.cache.size_bytes(), 80'000u) << "the peers' bytes were found and evicted";
}

TEST(FileStreamCache, TrackerReconcilesAfterExternalDrift) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(4000));
  for (const char* k : {"a", "b", "c"}) cache.put(k, code_of(kPayload, k));
  // Someone removes two entries behind the cache's back: its estimate is now too high.
  fs::remove(entry_file(dir.path(), "a"));
  fs::remove(entry_file(dir.path(), "b"));
  cache.put("d", code_of(kPayload, "d"));
  cache.put("e", code_of(kPayload, "e"));
  EXPECT_EQ(cache.stats().evictions, 0u) << "the scan found the real total under the cap";
  EXPECT_TRUE(cache.get("c"));
  EXPECT_TRUE(cache.get("d"));
  EXPECT_TRUE(cache.get("e"));
}

TEST(FileStreamCache, TrackerNeverNegativeUnderDeleteRace) {
  // The cache opens an empty directory (estimate 0); a peer writes an entry; the cache erases
  // it. Subtracting its size must stop at zero, not wrap around to a huge estimate that would
  // make every later put scan and evict.
  counted_scans c(1 << 20);
  file_stream_program_cache peer(c.dir.path(), fast());
  peer.put("k", code_of(50'000));
  EXPECT_TRUE(c.cache.erase("k"));
  EXPECT_FALSE(c.cache.erase("k"));
  c.scans = 0;
  c.cache.put("small", code_of(100));
  EXPECT_EQ(c.scans, 0) << "estimate clamped at zero";
  EXPECT_TRUE(c.cache.get("small"));
}

TEST(FileStreamCache, ClearWithACapResetsTheEstimate) {
  counted_scans c(1 << 20);
  for (int i = 0; i < 9; ++i) c.cache.put("k" + std::to_string(i), code_of(100'000));
  c.cache.clear();
  c.scans = 0;
  c.cache.put("small", code_of(100));
  EXPECT_EQ(c.scans, 0) << "after clear() the estimate is what is left (nothing), not 900 KB";
  EXPECT_EQ(c.cache.stats().evictions, 0u);
}

TEST(FileStreamCache, OverEvictionRaceAPeerRemovesTheCandidateFirst) {
  // The review finding on the reference design: after the scan, a peer removes the eviction
  // candidate; if the lost race is not subtracted from the total, eviction goes on and removes
  // the entry just written. Here the peer wins the race at exactly that point.
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(cap_under_two()));
  const fs::path old_path = put_old(cache, dir.path());
  int peer_removals = 0;
  {
    hooks_scope hooks = on_removing(old_path, [&] {
      if (peer_removals++ == 0) fs::remove(old_path);  // the peer wins the race
    });
    cache.put("new", code_of(600, "new"));
  }
  EXPECT_EQ(peer_removals, 1) << "eviction did try the old entry first";
  EXPECT_FALSE(cache.get("old"));
  expect_named(cache, "new", "new",
               "over-eviction: the fresh entry was removed after a lost unlink race");
  EXPECT_EQ(cache.stats().evictions, 0u) << "the peer removed it, not us";
}

TEST(FileStreamCache, EvictionKeepsAnEntryAPeerReplacedAfterTheScan) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(cap_under_two()));
  file_stream_program_cache peer(dir.path(), fast());
  const fs::path old_path = put_old(cache, dir.path());
  {
    hooks_scope hooks = on_removing(old_path, [&] { peer.put("old", code_of(600, "rewritten")); });
    cache.put("new", code_of(600, "new"));
  }
  expect_named(cache, "old", "rewritten",
               "the entry a peer rewrote after the scan was not evicted");
  EXPECT_TRUE(tmp_files(dir.path()).empty()) << "nothing left aside in tmp/";
  EXPECT_LE(cache.size_bytes(), cap_under_two()) << "the cap still holds: another entry went";
}

TEST(FileStreamCache, EvictionSparesAnEntryReadAfterTheScan) {
  // The scan saw "a" as least recently read, but a peer reads it before it is removed: it is now
  // the most recently read, so the next candidate goes instead.
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(4000));
  file_stream_program_cache peer(dir.path(), fast());
  put_aged(cache, dir.path(), {"a", "b", "c"}, true);
  const fs::path a_path = entry_file(dir.path(), "a");
  {
    hooks_scope hooks = on_removing(a_path, [&] { EXPECT_TRUE(peer.get("a")); });
    cache.put("d", code_of(kPayload, "d"));
  }
  expect_b_evicted(cache, "read after the scan: kept", "the next least recently read went instead");
  EXPECT_TRUE(tmp_files(dir.path()).empty());
}

TEST(FileStreamCache, SizeCapCountsTmpFiles) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(4000));
  cache.put("a", code_of(kPayload, "a"));
  write_text(dir / "tmp/entry-peer-in-flight", std::string(2500, 'x'));
  cache.put("b", code_of(kPayload, "b"));  // entries 2 × ~1.07 KB + 2.5 KB in tmp/ > 4000
  EXPECT_GE(cache.stats().evictions, 1u);
  EXPECT_FALSE(cache.get("a"));
  EXPECT_TRUE(fs::exists(dir / "tmp/entry-peer-in-flight")) << "young temp files are not evicted";
}

TEST(FileStreamCache, TrimEvictsLeastRecentlyReadDownToTheLimit) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  put_aged(cache, dir.path(), {"a", "b", "c", "d"});
  ASSERT_TRUE(cache.get("a"));
  EXPECT_EQ(cache.trim(2 * entry_bytes("a")), 2u);
  EXPECT_TRUE(cache.get("a"));
  EXPECT_TRUE(cache.get("d"));
  EXPECT_FALSE(cache.get("b"));
  EXPECT_FALSE(cache.get("c"));
  EXPECT_EQ(cache.trim(0), 2u);
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace cucore
