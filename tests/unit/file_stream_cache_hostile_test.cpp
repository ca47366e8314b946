// The directory cache in hostile directories: symbolic links, FIFOs and directories where entries
// belong, other users' directories (the trust rules), read-only caches, write failures and a full
// disk.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "file_stream_test_support.hpp"

namespace cucore {
namespace {

using namespace testing;  // file_stream_test_support.hpp and the shared test helpers

// Opening a cache at `root` is refused (invalid_argument) for `reason`; `accepted` says what went
// wrong where it is not.
void expect_refused(const fs::path& root, const std::string& reason, const char* accepted) {
  try {
    file_stream_program_cache cache(root, fast());
    FAIL() << accepted;
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

// Makes `dir` another user's (nobody's), with `mode`: needs root.
void give_to_another_user(const fs::path& dir, mode_t mode) {
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
}

// ---------------------------------------------------------------------------------------------
// Hostile directories

TEST(FileStreamCache, SymlinkAtAnEntryPathIsNotFollowed) {
  one_entry e(code_of(10, "real"));
  // A valid entry for "k" outside the cache, and a symlink to it where the entry should be.
  fs::rename(e.file, e.dir / "elsewhere");
  fs::create_symlink(e.dir / "elsewhere", e.file);
  log_capture logs;
  EXPECT_FALSE(e.cache.get("k")) << "O_NOFOLLOW: a symlink is never read through";
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(e.file))) << "the symlink was removed";
  EXPECT_TRUE(fs::exists(e.dir / "elsewhere")) << "its target was not touched";
  EXPECT_EQ(e.cache.stats().corrupt_dropped, 1u);
  EXPECT_EQ(logs.at(log_level::warning).size(), 1u);
  e.cache.put("k", code_of(10, "again"));
  EXPECT_EQ(e.cache.get("k")->name(), "again");
}

TEST(FileStreamCache, PutReplacesASymlinkInsteadOfWritingThroughIt) {
  one_entry e;
  write_text(e.dir / "victim", "precious");
  fs::remove(e.file);
  fs::create_symlink(e.dir / "victim", e.file);
  e.cache.put("k", code_of(11));
  EXPECT_EQ(read_bytes(e.dir / "victim").size(), 8u) << "the symlink's target is untouched";
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(e.file)));
  EXPECT_EQ(e.cache.get("k")->size(), 11u);
}

TEST(FileStreamCache, ScansDoNotFollowASymlinkedShard) {
  temp_dir dir;
  file_stream_program_cache cache(dir / "c", fast(1 << 20));
  cache.put("k", code_of(10));
  fs::create_directory(dir / "outside");
  write_text(dir / "outside/0123456789012345678901234567890123456789012345678901234567890a", "x");
  fs::create_directory_symlink(dir / "outside", dir / "c/entries/zz");
  EXPECT_EQ(cache.size(), 1u);
  cache.clear();
  cache.trim(0);
  EXPECT_EQ(
      fs::file_size(dir / "outside/0123456789012345678901234567890123456789012345678901234567890a"),
      1u)
      << "nothing outside the cache was removed";
  auto report = cache.verify(true);
  EXPECT_EQ(report.corrupt, 1u) << "the symlinked shard";
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(dir / "c/entries/zz")));
  EXPECT_TRUE(fs::exists(dir / "outside"));
}

TEST(FileStreamCache, FifoAtAnEntryPathDoesNotHang) {
  one_entry e;
  fs::remove(e.file);
  ASSERT_EQ(::mkfifo(e.file.c_str(), 0644), 0);
  EXPECT_FALSE(e.cache.get("k"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(e.file))) << "pruned";
}

// A directory where an entry belongs is a miss that get() names, with the fix, once; it is not
// counted as a dropped entry (nothing was dropped). The put that follows the miss clears it and
// stores the entry: the key does not miss forever.
TEST(FileStreamCache, DirectoryAtAnEntryPathIsReplacedByThePut) {
  one_entry e;
  fs::remove(e.file);
  fs::create_directories(e.file / "inside");
  write_text(e.file / "inside/file", "x");
  log_capture logs;
  EXPECT_FALSE(e.cache.get("k"));
  EXPECT_FALSE(e.cache.get("k"));
  EXPECT_TRUE(fs::is_directory(e.file / "inside")) << "a read does not remove it";
  EXPECT_EQ(e.cache.stats().corrupt_dropped, 0u) << "nothing was dropped";
  EXPECT_EQ(e.cache.stats().errors, 2u);
  ASSERT_EQ(logs.count(log_level::warning), 1u) << "warned once";
  const std::string warning = logs.at(log_level::warning)[0];
  EXPECT_NE(warning.find(e.file.string() + " is a directory, not an entry"), std::string::npos)
      << warning;
  EXPECT_NE(warning.find("cucore cache verify --cache " + e.dir.path().string()), std::string::npos)
      << warning;

  EXPECT_NO_THROW(e.cache.put("k", code_of(11)));
  EXPECT_EQ(e.cache.get("k"), code_of(11));
  EXPECT_EQ(e.cache.stats().corrupt_dropped, 1u);
  EXPECT_EQ(e.cache.stats().errors, 2u) << "the put did not fail";
  EXPECT_EQ(logs.count(log_level::warning, "removed " + e.file.string()), 1u);
  EXPECT_TRUE(tmp_files(e.dir.path()).empty());
  EXPECT_EQ(e.cache.verify(true).corrupt, 0u);
}

// A put whose directory cannot be cleared fails (per on_write_failure) with a message that names
// the path and says how to remove it; strict throws it.
TEST(FileStreamCache, PutNamesADirectoryItCannotClear) {
  expect_as_nobody([](const fs::path& root, const fs::path& file) -> std::string {
    file_stream_program_cache cache(root, strict_fast());
    cache.put("other", code_of(1));
    fs::create_directories(file / "locked");
    write_text(file / "locked/stuck", "x");
    CHILD_EXPECT(::chmod((file / "locked").c_str(), 0500) == 0);
    // The shard is not writable either: nothing can be moved or removed there.
    CHILD_EXPECT(::chmod(file.parent_path().c_str(), 0500) == 0);
    try {
      cache.put("k", code_of(2));
      return "the put did not throw";
    } catch (const error& e) {
      const std::string what = e.what();
      if (what.find("a directory, not an entry") == std::string::npos) return what;
      CHILD_EXPECT(what.find("could not move the new entry into " + file.string()) !=
                   std::string::npos);
      CHILD_EXPECT(what.find("a directory, not an entry") != std::string::npos);
      CHILD_EXPECT(what.find("rm -rf " + file.string()) != std::string::npos);
    }
    CHILD_EXPECT(cache.stats().corrupt_dropped == 0u);
    CHILD_EXPECT(::chmod(file.parent_path().c_str(), 0755) == 0);
    CHILD_EXPECT(::chmod((file / "locked").c_str(), 0755) == 0);
    return "";
  });
}

// Something that is not a directory where a shard directory belongs blocks every key of that
// shard: a put removes it and makes the shard.
TEST(FileStreamCache, PutClearsAFileWhereTheShardBelongs) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  const fs::path shard = entry_file(dir.path(), "k").parent_path();
  fs::create_directories(dir / "entries");
  write_text(shard, "not a shard");
  EXPECT_FALSE(cache.get("k"));
  cache.put("k", code_of(10));
  EXPECT_EQ(cache.get("k"), code_of(10));
  EXPECT_TRUE(fs::is_directory(fs::symlink_status(shard)));
  EXPECT_EQ(cache.stats().corrupt_dropped, 1u);
  EXPECT_EQ(cache.stats().errors, 0u);
}

// A drop is counted when something was dropped: a symlink get() cannot remove (its shard is not
// writable) is not.
TEST(FileStreamCache, GetCountsADropOnlyWhenItRemovedSomething) {
  expect_as_nobody([](const fs::path& root, const fs::path& file) -> std::string {
    file_stream_program_cache cache(root, fast());
    cache.put("k", code_of(10));
    fs::remove(file);
    fs::create_symlink(root / "elsewhere", file);
    CHILD_EXPECT(::chmod(file.parent_path().c_str(), 0555) == 0);
    CHILD_EXPECT(!cache.get("k"));
    CHILD_EXPECT(fs::is_symlink(fs::symlink_status(file)));
    CHILD_EXPECT(cache.stats().corrupt_dropped == 0u);
    CHILD_EXPECT(cache.stats().errors == 1u);
    CHILD_EXPECT(::chmod(file.parent_path().c_str(), 0755) == 0);
    CHILD_EXPECT(!cache.get("k"));
    CHILD_EXPECT(!fs::exists(fs::symlink_status(file)));
    CHILD_EXPECT(cache.stats().corrupt_dropped == 1u);
    return "";
  });
}

TEST(FileStreamCache, SymlinkedSubdirectoryIsRefused) {
  temp_dir dir;
  fs::create_directories(dir / "c");
  fs::create_directory(dir / "real-entries");
  fs::create_directory_symlink(dir / "real-entries", dir / "c/entries");
  expect_refused(dir / "c", "symbolic link", "a symlinked entries/ was accepted");
}

TEST(FileStreamCache, RootThatIsAFileIsRefused) {
  temp_dir dir;
  write_text(dir / "file", "x");
  EXPECT_THROW(file_stream_program_cache(dir / "file", fast()), invalid_argument);
}

TEST(FileStreamCache, OwnSymlinkToARootIsFollowed) {
  temp_dir dir;
  fs::create_directory(dir / "real");
  fs::create_directory_symlink(dir / "real", dir / "link");
  file_stream_program_cache cache(dir / "link", fast());
  cache.put("k", code_of(3));
  EXPECT_TRUE(fs::is_directory(dir / "real/entries"));
  EXPECT_TRUE(cache.get("k"));
}

TEST(FileStreamCache, SymlinkOwnedByAnotherUserIsRefused) {
  if (!running_as_root()) GTEST_SKIP() << "needs root to create a symlink owned by another user";
  temp_dir dir;
  fs::create_directory(dir / "real");
  fs::create_directory_symlink(dir / "real", dir / "link");
  ASSERT_EQ(::lchown((dir / "link").c_str(), 65534, 65534), 0);
  expect_refused(dir / "link", "owned by another user",
                 "followed a symlink planted by another user");
  EXPECT_FALSE(fs::exists(dir / "real/entries")) << "nothing created through it";
}

TEST(FileStreamCache, OtherUsersWorldWritableRootWithoutStickyIsRefused) {
  if (!running_as_root()) GTEST_SKIP() << "needs root to create a directory owned by another user";
  temp_dir dir;
  fs::create_directory(dir / "theirs");
  give_to_another_user(dir / "theirs", 0777);
  expect_refused(dir / "theirs", "world-writable",
                 "accepted a world-writable directory of another user");
  // The sticky bit (like /tmp) does not make another user's directory ours: still refused.
  ASSERT_EQ(::chmod((dir / "theirs").c_str(), 01777), 0);
  EXPECT_THROW(file_stream_program_cache(dir / "theirs", fast()), invalid_argument);
}

TEST(FileStreamCache, OtherUsersCacheIsRefusedUnlessShared) {
  // A cache of another user (not world-writable) could hold anything that user planted: refused,
  // unless the reader opts in to a shared cache.
  if (!running_as_root()) GTEST_SKIP() << "needs root to create a directory owned by another user";
  temp_dir dir;
  {
    file_stream_program_cache cache(dir / "theirs", fast());
    cache.put("k", code_of(5));
  }
  for (const auto& p : fs::recursive_directory_iterator(dir / "theirs")) {
    ASSERT_EQ(::lchown(p.path().c_str(), 65534, 65534), 0);
  }
  ASSERT_EQ(::chown((dir / "theirs").c_str(), 65534, 65534), 0);
  expect_refused(dir / "theirs", "belongs to another user", "accepted another user's cache");
  file_stream_cache_options shared = fast();
  shared.access = cache_access::shared;
  file_stream_program_cache cache(dir / "theirs", shared);
  EXPECT_TRUE(cache.get("k"));
}

TEST(FileStreamCache, OtherUsersWorldWritableEntriesDirIsRefused) {
  if (!running_as_root()) GTEST_SKIP() << "needs root to create a directory owned by another user";
  temp_dir dir;
  fs::create_directories(dir / "c/entries");
  give_to_another_user(dir / "c/entries", 0777);
  EXPECT_THROW(file_stream_program_cache(dir / "c", fast()), invalid_argument);
}

TEST(FileStreamCache, ReadOnlyCacheServesReadsAndDegradesWrites) {
  // Modes do not stop root: the body runs in a child that drops to nobody when we are root.
  temp_dir dir;
  const fs::path root = dir / "ro";
  {
    file_stream_program_cache cache(root, fast(1 << 20));
    cache.put("k", code_of(10, "stored"));
    set_times(entry_file(root, "k"), 100);
  }
  const fs::path entry = entry_file(root, "k");
  for (const auto& p : fs::recursive_directory_iterator(root)) {
    if (running_as_root()) ::lchown(p.path().c_str(), 65534, 65534);
  }
  if (running_as_root()) ::chown(root.c_str(), 65534, 65534);
  if (running_as_root()) ::chown(dir.path().c_str(), 65534, 65534);
  for (const auto& p : fs::recursive_directory_iterator(root)) {
    if (p.is_directory()) ::chmod(p.path().c_str(), 0500);
  }
  ::chmod(root.c_str(), 0500);

  const std::string result = run_as_nobody([&]() -> std::string {
    log_capture logs;
    file_stream_program_cache cache(root, fast(1 << 20));
    auto hit = cache.get("k");
    CHILD_EXPECT(hit && hit->name() == "stored");
    cache.put("new", code_of(10));  // warn: no exception
    CHILD_EXPECT(!cache.get("new"));
    CHILD_EXPECT(cache.stats().errors == 1);
    CHILD_EXPECT(logs.at(log_level::warning).size() == 1);
    CHILD_EXPECT(logs.at(log_level::warning)[0].find("Permission denied") != std::string::npos);
    CHILD_EXPECT(!cache.erase("k"));  // cannot remove: false, and counted
    CHILD_EXPECT(cache.get("k"));
    file_stream_program_cache strict_cache(root, strict_fast());
    try {
      strict_cache.put("new", code_of(10));
      return "strict put did not throw";
    } catch (const error& e) {
      CHILD_EXPECT(std::string(e.what()).find(root.string()) != std::string::npos);
    }
    return "";
  });
  EXPECT_EQ(result, "");
}

TEST(FileStreamCache, WriteFailureWarnLogsAndCarriesOn) {
  temp_dir dir;
  log_capture logs;
  file_stream_program_cache cache(dir.path(), fast());
  // Make staging impossible, even for root: tmp/ is a regular file.
  fs::remove_all(dir / "tmp");
  write_text(dir / "tmp", "in the way");
  EXPECT_NO_THROW(cache.put("k", code_of(10)));
  EXPECT_FALSE(cache.get("k"));
  EXPECT_EQ(cache.stats().errors, 1u);
  EXPECT_EQ(cache.stats().puts, 0u);
  auto warnings = logs.at(log_level::warning);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find((dir / "tmp").string()), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("Not a directory"), std::string::npos)
      << "errno text: " << warnings[0];
  cache.put("k2", code_of(10));
  EXPECT_EQ(cache.stats().errors, 2u);
  EXPECT_EQ(logs.at(log_level::warning).size(), 1u) << "the same failure again: debug level";
  EXPECT_EQ(logs.at(log_level::debug).size(), 1u);
}

TEST(FileStreamCache, WriteFailureStrictThrows) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), strict_fast());
  fs::remove_all(dir / "tmp");
  write_text(dir / "tmp", "in the way");
  try {
    cache.put("k", code_of(10));
    FAIL() << "strict put did not throw";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("tmp"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.stats().errors, 1u);
}

TEST(FileStreamCache, UncreatableRootWarnsOrThrows) {
  temp_dir dir;
  write_text(dir / "file", "x");
  const fs::path root = dir / "file/cache";  // below a regular file: ENOTDIR
  {
    log_capture logs;
    file_stream_program_cache cache(root, fast());
    EXPECT_EQ(logs.at(log_level::warning).size(), 1u);
    EXPECT_FALSE(cache.get("k"));
    cache.put("k", code_of(1));
    EXPECT_EQ(cache.stats().errors, 2u);
  }
  EXPECT_THROW(file_stream_program_cache(root, strict_fast()), error);
}

TEST(FileStreamCache, DiskFullLeavesNoTempFile) {
  // RLIMIT_FSIZE makes write(2) fail with EFBIG past the limit, like a full disk (ENOSPC) would:
  // a partial temp file exists at the moment of failure and must be removed.
  temp_dir dir;
  { file_stream_program_cache cache(dir.path(), fast()); }
  const std::string result = run_in_child([&]() -> std::string {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{16 * 1024, 16 * 1024};
    CHILD_EXPECT(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
    log_capture logs;
    file_stream_program_cache cache(dir.path(), fast());
    cache.put("small", code_of(100));
    cache.put("big", code_of(100 * 1024));
    CHILD_EXPECT(cache.get("small"));
    CHILD_EXPECT(!cache.get("big"));
    CHILD_EXPECT(cache.stats().errors == 1);
    CHILD_EXPECT(logs.at(log_level::warning).size() == 1);
    CHILD_EXPECT(logs.at(log_level::warning)[0].find("File too large") != std::string::npos);
    CHILD_EXPECT(tmp_files(dir.path()).empty());
    file_stream_program_cache strict_cache(dir.path(), strict_fast());
    try {
      strict_cache.put("big", code_of(100 * 1024));
      return "strict put did not throw";
    } catch (const error&) {
    }
    CHILD_EXPECT(tmp_files(dir.path()).empty());
    return "";
  });
  EXPECT_EQ(result, "");
}

}  // namespace
}  // namespace cucore
