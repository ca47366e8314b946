// The SQLite cache's journal mode on the filesystems it may find itself on
// (sqlite_cache_test_support.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

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

}  // namespace
}  // namespace cucore
