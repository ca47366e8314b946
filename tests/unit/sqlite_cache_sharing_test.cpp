// The SQLite cache shared with other programs and users: the journal mode on local and network
// filesystems, locks held by other connections, read-only files and directories.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "cache/sqlite/filesystem.hpp"
#include "cache_test_support.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/error.hpp"
#include "process_support.hpp"
#include "sqlite_test_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using namespace testing;  // sqlite_test_support.hpp and the shared test helpers

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

}  // namespace
}  // namespace cucore
