// The SQLite cache's damaged and foreign files: garbage, damaged pages, foreign and other-version
// schemas moved aside (never while another program has them open), damaged and misplaced rows
// dropped, symbolic links refused, files deleted or replaced under an open cache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "cache_test_support.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/error.hpp"
#include "process_support.hpp"
#include "sqlite_test_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using namespace testing;  // sqlite_test_support.hpp and the shared test helpers

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

// A cache file of `entries` entries (with none, an empty SQLite file) that `sql` makes foreign or
// of another version is moved aside (expect_moved_aside_and_fresh).
void expect_moved_aside_after(const fs::path& file, int entries, const std::string& sql) {
  if (entries > 0) {
    populate(file, entries);
  } else {
    fs::create_directories(file.parent_path());
  }
  testing::raw_db(file).exec(sql);
  expect_moved_aside_and_fresh(file);
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
  expect_moved_aside_after(file, 0,
                           "CREATE TABLE users(name TEXT); INSERT INTO users VALUES ('alice')");
  testing::raw_db moved(testing::moved_aside(file).at(0));
  EXPECT_EQ(moved.text("SELECT name FROM users"), "alice") << "the moved file is intact";
}

TEST_F(SqliteCache, ForeignUserVersionIsMovedAside) {
  expect_moved_aside_after(file, 0, "PRAGMA user_version = 7");
}

TEST_F(SqliteCache, OlderSchemaVersionIsMovedAside) {
  expect_moved_aside_after(file, 2, "PRAGMA user_version = 0");
}

TEST_F(SqliteCache, ChangedSchemaIsMovedAside) {
  expect_moved_aside_after(file, 2, "CREATE TABLE extra(x)");
}

TEST_F(SqliteCache, NewerSchemaIsLeftAlone) {
  populate(file, 2);
  testing::raw_db(file).exec("PRAGMA user_version = 2");
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

// Rows cucore never writes, whose key or write id is of another SQL type (another program's, a
// damaged file's), are corrupt and removed by verify(true): they were counted corrupt on every run
// and never removed (the typed delete could not match them). The counters count the removals.
TEST_F(SqliteCache, VerifyRemovesRowsOfForeignTypes) {
  {
    sqlite_program_cache cache(file);
    cache.put("good", code_of_size(10, "good"));
  }
  testing::raw_db(file).exec(
      "INSERT INTO blobs(id, value) VALUES (1000, x'00'), (1001, x'00');"
      "INSERT INTO entries(key, id, size, atime, written) VALUES ('text key', 1000, 1, 0, 5);"
      "INSERT INTO entries(key, id, size, atime, written) VALUES (x'6b6b', 1001, 1, 0, 'abc');");
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
