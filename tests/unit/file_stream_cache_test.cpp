// The directory cache (file_stream_program_cache): real files in fresh temp directories, real
// child processes (fork), no mocks. Races with a peer are staged deterministically through the
// test hooks, which run at the exact point where another process could interleave. This file:
// entries, directories, modes and temp files, threads and processes; the rest by topic in
// file_stream_cache_{eviction,corruption,hostile}_test.cpp, the helpers in
// file_stream_test_support.hpp.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "file_stream_test_support.hpp"

namespace cucore {
namespace {

using namespace testing;  // file_stream_test_support.hpp and the shared test helpers

// `key` is a hit in `cache`: the entry named `name`, of `size` bytes.
void expect_entry(program_cache& cache, cache_key_ref key, std::string_view name,
                  std::size_t size) {
  auto hit = cache.get(key);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->name(), name);
  EXPECT_EQ(hit->size(), size);
}

// ---------------------------------------------------------------------------------------------
// CRUD and values

TEST(FileStreamCache, EmptyOnCreate) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.size_bytes(), 0u);
  EXPECT_FALSE(cache.get("missing"));
  EXPECT_EQ(cache.stats().misses, 1u);
  EXPECT_TRUE(fs::is_directory(dir / "entries"));
  EXPECT_TRUE(fs::is_directory(dir / "tmp"));
  EXPECT_EQ(cache.root(), dir.path());
  EXPECT_EQ(cache.description(), "directory " + dir.path().string());
}

TEST(FileStreamCache, RoundTripKeepsTheWholeObjectCode) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path());  // default options: fsync on
  testing::expect_round_trip(cache);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().puts, 1u);
  EXPECT_EQ(cache.stats().errors, 0u);
  EXPECT_TRUE(tmp_files(dir.path()).empty()) << "no temp file left behind";
}

TEST(FileStreamCache, EveryCodeTypeAndEmptyPayloadRoundTrip) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  const code_type types[] = {code_type::ptx,    code_type::cubin,  code_type::ltoir,
                             code_type::fatbin, code_type::object, code_type::library};
  for (code_type t : types) {
    object_code code(t, std::vector<std::byte>(17, std::byte{0x5a}), std::string(to_string(t)));
    cache.put(std::string(to_string(t)), code);
  }
  cache.put("empty", object_code(code_type::ptx, std::vector<std::byte>{}));
  for (code_type t : types) {
    auto hit = cache.get(std::string(to_string(t)));
    ASSERT_TRUE(hit) << to_string(t);
    EXPECT_EQ(hit->type(), t);
    EXPECT_EQ(hit->size(), 17u);
  }
  auto empty = cache.get("empty");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->size(), 0u);
}

TEST(FileStreamCache, LayoutIsSha256OfTheKey) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("abc", code_of(5));
  // SHA-256("abc"), the FIPS 180-2 test vector.
  const fs::path expected =
      dir / "entries/ba/7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  ASSERT_TRUE(fs::is_regular_file(expected));
  auto bytes = read_bytes(expected);
  ASSERT_GE(bytes.size(), 8u);
  EXPECT_EQ(std::memcmp(bytes.data(), "CUCOREPC", 8), 0) << "the entry format, header first";
  EXPECT_EQ(fs::file_size(expected), stored_size("abc", code_of(5)));
}

TEST(FileStreamCache, CompilerVersionMemoLivesBesideTheEntries) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(1 << 20));
  ASSERT_EQ(cache.compiler_version_memo(), dir / "compiler-versions");
  write_text(dir / "compiler-versions", "memo");
  cache.put("k", code_of(10));
  cache.clear();
  cache.trim(0);
  EXPECT_EQ(cache.verify(true).entries, 0u) << "not an entry";
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_TRUE(fs::exists(dir / "compiler-versions")) << "left alone by clear, trim and verify";
}

TEST(FileStreamCache, StringAndByteKeysAlias) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(3));
  std::vector<std::byte> bytes = {std::byte{'k'}};
  EXPECT_TRUE(cache.get(std::span<const std::byte>(bytes)));
  EXPECT_TRUE(cache.get(std::string("k")));
  EXPECT_EQ(cache.size(), 1u);
}

TEST(FileStreamCache, LongAndBinaryKeys) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  const std::string long_key(100'000, 'x');  // far beyond any file name limit
  std::vector<std::byte> binary_key = {std::byte{0}, std::byte{0xff}, std::byte{'/'}, std::byte{0},
                                       std::byte{'.'}};
  cache.put(long_key, code_of(10, "long"));
  cache.put(std::span<const std::byte>(binary_key), code_of(11, "binary"));
  ASSERT_TRUE(cache.get(long_key));
  EXPECT_EQ(cache.get(long_key)->name(), "long");
  ASSERT_TRUE(cache.get(std::span<const std::byte>(binary_key)));
  EXPECT_EQ(cache.get(std::span<const std::byte>(binary_key))->name(), "binary");
  EXPECT_FALSE(cache.get(std::string(99'999, 'x')));
  for (const auto& f : entry_files(dir.path())) EXPECT_EQ(f.filename().string().size(), 62u);
}

TEST(FileStreamCache, OverwriteReplacesValue) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(10, "first"));
  cache.put("k", code_of(25, "second"));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.size_bytes(), stored_size("k", code_of(25, "second")));
  expect_entry(cache, "k", "second", 25);
}

TEST(FileStreamCache, EraseRemovesAndReportsMissing) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(1 << 20));
  cache.put("a", code_of(1));
  cache.put("b", code_of(2));
  EXPECT_TRUE(cache.erase("a"));
  EXPECT_FALSE(cache.erase("a")) << "second erase: nothing there";
  EXPECT_FALSE(cache.erase("never"));
  EXPECT_FALSE(cache.get("a"));
  EXPECT_TRUE(cache.get("b"));
  EXPECT_EQ(cache.size(), 1u);
}

TEST(FileStreamCache, SizeCountsEntriesAndSizeBytesSumsFiles) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  std::uint64_t expected = 0;
  for (int i = 0; i < 20; ++i) {
    const std::string key = "key-" + std::to_string(i);
    cache.put(key, code_of(static_cast<std::size_t>(i * 10), key));
    expected += stored_size(key, code_of(static_cast<std::size_t>(i * 10), key));
  }
  EXPECT_EQ(cache.size(), 20u);
  EXPECT_EQ(cache.size_bytes(), expected);
  write_text(dir / "tmp/entry-in-flight", std::string(1000, 'x'));
  EXPECT_EQ(cache.size_bytes(), expected) << "temp files are not entries";
  write_text(dir / "entries/stray", "x");
  EXPECT_EQ(cache.size(), 20u) << "a stray file at the top of entries/ is not an entry";
}

TEST(FileStreamCache, ClearRemovesEntries) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(1 << 20));
  for (int i = 0; i < 10; ++i) cache.put("k" + std::to_string(i), code_of(100));
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(cache.get("k3"));
  cache.put("again", code_of(3));
  EXPECT_TRUE(cache.get("again")) << "usable after clear";
}

TEST(FileStreamCache, PersistsAcrossReopen) {
  temp_dir dir;
  {
    file_stream_program_cache cache(dir.path());
    cache.put("persist", code_of(42, "p"));
  }
  file_stream_program_cache reopened(dir.path());
  expect_entry(reopened, "persist", "p", 42);
}

TEST(FileStreamCache, UpdateIsABulkPut) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  std::vector<std::pair<std::string, object_code>> items = {{"a", code_of(1)}, {"b", code_of(2)}};
  cache.update(items);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.get("b")->size(), 2u);
}

TEST(FileStreamCache, ZeroCapRejected) {
  temp_dir dir;
  EXPECT_THROW(file_stream_program_cache(dir.path(), fast(0)), invalid_argument);
}

TEST(FileStreamCache, EmptyPathRejected) {
  EXPECT_THROW(file_stream_program_cache(fs::path(), fast()), invalid_argument);
}

TEST(FileStreamCache, UseAfterCloseThrows) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(1));
  cache.close();
  EXPECT_THROW(cache.get("k"), error);
  EXPECT_THROW(cache.put("k", code_of(1)), error);
  EXPECT_THROW(cache.size(), error);
  EXPECT_EQ(cache.stats().puts, 1u) << "stats stay readable";
  EXPECT_NO_THROW(cache.close()) << "closing twice is fine";
}

TEST(FileStreamCache, RootIsMadeAbsoluteAndNormal) {
  temp_dir dir;
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  file_stream_program_cache relative("sub/cache/", fast());
  fs::current_path(cwd);
  EXPECT_EQ(relative.root(), dir / "sub/cache");
  relative.put("k", code_of(1));
  EXPECT_TRUE(relative.get("k")) << "still works after the working directory changed";
}

TEST(FileStreamCache, DefaultDirectoryComesFromTheEnvironment) {
  temp_dir dir;
  const char* old = std::getenv("CUCORE_CACHE_DIR");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("CUCORE_CACHE_DIR", (dir / "default").c_str(), 1);
  {
    file_stream_program_cache cache;
    EXPECT_EQ(cache.root(), dir / "default");
    EXPECT_TRUE(fs::is_directory(dir / "default/entries"));
  }
  if (old != nullptr) {
    ::setenv("CUCORE_CACHE_DIR", saved.c_str(), 1);
  } else {
    ::unsetenv("CUCORE_CACHE_DIR");
  }
}

// ---------------------------------------------------------------------------------------------
// Directories, modes, temp files

TEST(FileStreamCache, TmpIsOwnerOnlyAndFilesFollowTheUmask) {
  temp_dir dir;
  const mode_t old = ::umask(022);
  {
    file_stream_program_cache cache(dir / "c", fast());
    cache.put("k", code_of(1));
    EXPECT_EQ(lstat_of(dir / "c/tmp").st_mode & 07777, 0700u);
    EXPECT_EQ(lstat_of(dir / "c/entries").st_mode & 07777, 0755u);
    EXPECT_EQ(lstat_of(entry_file(dir / "c", "k")).st_mode & 07777, 0644u);
  }
  ::umask(077);
  {
    file_stream_program_cache cache(dir / "private", fast());
    cache.put("k", code_of(1));
    EXPECT_EQ(lstat_of(dir / "private/entries").st_mode & 07777, 0700u);
    EXPECT_EQ(lstat_of(entry_file(dir / "private", "k")).st_mode & 07777, 0600u);
  }
  ::umask(0);
  {
    file_stream_program_cache cache(dir / "open", fast());
    cache.put("k", code_of(1));
    EXPECT_EQ(lstat_of(entry_file(dir / "open", "k")).st_mode & 07777, 0644u)
        << "entry files are never group- or world-writable, whatever the umask";
    EXPECT_EQ(lstat_of(dir / "open/tmp").st_mode & 07777, 0700u);
  }
  ::umask(old);
}

TEST(FileStreamCache, PreexistingSharedRootUsedAsIs) {
  // A group-shared root (the user opted in to a shared cache): used with the mode it has.
  temp_dir dir;
  fs::create_directory(dir / "shared");
  ::chmod((dir / "shared").c_str(), 0775);
  file_stream_cache_options shared = fast();
  shared.access = cache_access::shared;
  file_stream_program_cache cache(dir / "shared", shared);
  cache.put("k", code_of(1));
  EXPECT_TRUE(cache.get("k"));
  EXPECT_EQ(lstat_of(dir / "shared").st_mode & 07777, 0775u) << "no chmod of an existing root";
  EXPECT_EQ(lstat_of(dir / "shared/tmp").st_mode & 07777, 0775u) << "the group writes there too";
  // A private cache refuses it (cache_trust_test has the rest of the trust rules).
  EXPECT_THROW(file_stream_program_cache(dir / "shared", fast()), invalid_argument);
}

TEST(FileStreamCache, ExistingTmpModeIsLeftAlone) {
  temp_dir dir;
  fs::create_directories(dir / "c/tmp");
  ::chmod((dir / "c/tmp").c_str(), 0750);
  file_stream_program_cache cache(dir / "c", fast());
  EXPECT_EQ(lstat_of(dir / "c/tmp").st_mode & 07777, 0750u);
}

TEST(FileStreamCache, RecreatesTmpDirIfMissing) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  fs::remove_all(dir / "tmp");
  cache.put("k", code_of(5));
  EXPECT_TRUE(cache.get("k"));
  EXPECT_TRUE(fs::is_directory(dir / "tmp"));
  EXPECT_EQ(lstat_of(dir / "tmp").st_mode & 07777, 0700u);
  EXPECT_EQ(cache.stats().errors, 0u);
}

TEST(FileStreamCache, RecreatesEntriesShardAndRootIfMissing) {
  temp_dir dir;
  file_stream_program_cache cache(dir / "root", fast(1 << 20));
  cache.put("a", code_of(5));
  fs::remove_all(entry_file(dir / "root", "a").parent_path());  // the shard directory
  cache.put("a", code_of(6));
  ASSERT_TRUE(cache.get("a"));
  fs::remove_all(dir / "root/entries");
  EXPECT_FALSE(cache.get("a")) << "a missing entries/ is a miss";
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.verify(true).entries, 0u);
  EXPECT_TRUE(cache.list().empty());
  cache.put("b", code_of(7));
  EXPECT_TRUE(cache.get("b"));
  fs::remove_all(dir / "root");
  cache.put("c", code_of(8));
  EXPECT_TRUE(cache.get("c")) << "the whole root is recreated";
  EXPECT_EQ(cache.stats().errors, 0u);
}

TEST(FileStreamCache, SweepsStaleTmpFilesOnOpen) {
  temp_dir dir;
  { file_stream_program_cache cache(dir.path(), fast()); }
  write_text(dir / "tmp/entry-stale", "old");
  write_text(dir / "tmp/entry-young", "new");
  set_times(dir / "tmp/entry-stale", 7200, 7200);  // two hours old
  set_times(dir / "tmp/entry-young", 1800, 1800);  // half an hour old: a slow write, maybe
  file_stream_program_cache cache(dir.path(), fast());
  EXPECT_FALSE(fs::exists(dir / "tmp/entry-stale"));
  EXPECT_TRUE(fs::exists(dir / "tmp/entry-young"));
}

TEST(FileStreamCache, TempFileOfADeadWriterIsSweptAtOnce) {
  // A writer dies between writing its temp file and renaming it: the file can never be committed.
  // Its name says which process on this host made it, so the next sweep removes it without
  // waiting an hour (it would otherwise count against the size cap all that time).
  temp_dir dir;
  { file_stream_program_cache cache(dir.path(), fast()); }
  const std::string result = run_in_child([&]() -> std::string {
    file_stream_program_cache cache(dir.path(), fast());
    hooks_scope hooks([&](detail::file_stream_test_hooks& h) {
      h.before_commit = [](const std::string&) { ::_exit(0); };
    });
    cache.put("k", code_of(1000));
    return "put went on after the simulated crash";
  });
  EXPECT_EQ(result, "");
  ASSERT_EQ(tmp_files(dir.path()).size(), 1u) << "the dead writer's temp file";
  file_stream_program_cache cache(dir.path(), fast());
  EXPECT_TRUE(tmp_files(dir.path()).empty()) << "swept on open";
  EXPECT_FALSE(cache.get("k"));
}

TEST(FileStreamCache, TempFileOfALiveWriterSurvivesSweepsAndClear) {
  // A peer process is stopped between writing and renaming; an open, a clear() and an eviction
  // pass meanwhile must leave its temp file alone, and its put then completes.
  temp_dir dir;
  { file_stream_program_cache cache(dir.path(), fast()); }
  int go[2];
  int ready[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    file_stream_program_cache cache(dir.path(), fast());
    hooks_scope hooks([&](detail::file_stream_test_hooks& h) {
      h.before_commit = [&](const std::string&) {
        char c = 1;
        (void)!::write(ready[1], &c, 1);
        (void)!::read(go[0], &c, 1);
      };
    });
    cache.put("slow", code_of(1000, "slow"));
    ::_exit(cache.stats().errors == 0 ? 0 : 1);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(tmp_files(dir.path()).size(), 1u);
  {
    file_stream_program_cache cache(dir.path(), fast(100));  // opening sweeps
    cache.clear();
    cache.trim(0);
    cache.put("tiny", code_of(0));  // the temp file puts the total over the cap: eviction runs
    EXPECT_EQ(cache.stats().evictions, 1u) << "it evicted what it could: its own entry";
  }
  EXPECT_EQ(tmp_files(dir.path()).size(), 1u) << "the live writer's temp file was kept";
  ASSERT_EQ(::write(go[1], &c, 1), 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  file_stream_program_cache cache(dir.path(), fast());
  expect_named(cache, "slow", "slow", "the peer's put completed");
  for (int fd : {go[0], go[1], ready[0], ready[1]}) ::close(fd);
}

TEST(FileStreamCache, ClearPreservesYoungTmpFilesAndSweepsStaleOnes) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(3));
  write_text(dir / "tmp/entry-young", "in flight");
  write_text(dir / "tmp/entry-stale", "crashed");
  set_times(dir / "tmp/entry-stale", 4000, 4000);
  cache.clear();
  EXPECT_TRUE(fs::exists(dir / "tmp/entry-young")) << "a peer's write in progress";
  EXPECT_FALSE(fs::exists(dir / "tmp/entry-stale"));
  EXPECT_EQ(cache.size(), 0u);
}

TEST(FileStreamCache, AtomicNoHalfWrittenFile) {
  // A reader thread hammers one key while a writer alternates two large values: every hit is one
  // of them, whole.
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  const object_code a = code_of(3 << 20, "a", std::byte{1});
  const object_code b = code_of(2 << 20, "b", std::byte{2});
  cache.put("big", a);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::atomic<int> hits{0};
  std::thread reader([&] {
    while (!stop.load()) {
      if (auto hit = cache.get("big")) {
        ++hits;
        if (!(*hit == a) && !(*hit == b)) ++bad;
      }
    }
  });
  for (int i = 0; i < 20; ++i) cache.put("big", i % 2 ? a : b);
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(hits.load(), 0);
  EXPECT_EQ(cache.stats().corrupt_dropped, 0u);
  EXPECT_TRUE(tmp_files(dir.path()).empty());
}

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
