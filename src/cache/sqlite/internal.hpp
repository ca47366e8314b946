// Internals of the SQLite program cache shared by its source files (see
// include/cucore/cache/sqlite.hpp for the guarantees):
//   cache.cpp        construction, close, statistics, claims
//   entries.cpp      get, put, erase: one entry at a time
//   maintenance.cpp  size, clear, trim, list, verify
//   eviction.cpp     access times (recency), least-recently-used eviction, free pages
//   open.cpp         opening the connection, journal mode, availability
//   recovery.cpp     confirming a damaged or foreign file and moving it aside
//   coordination.cpp lock waits between processes, the <file>.lock shared lock
//   schema.cpp       the schema: creating it, recognising it
//   filesystem.cpp   which filesystem holds the cache
//
// Schema (user_version 1, application_id "CUCP"):
//   entries  key → (blob id, stored size, access time in µs since the epoch, write id); small rows,
//            WITHOUT ROWID, indexed by access time for eviction. Recording a read rewrites only
//            this row, never the blob.
//   blobs    id → the entry-format bytes.
//   meta     one row: total stored bytes and entry count, kept by triggers on `entries` (which
//            also delete an entry's blob), so the cap check is O(1) per write.
//
// Every write is one BEGIN IMMEDIATE transaction: flush this object's pending access times,
// evict least-recently-used rows until the new total fits the cap, upsert, return free pages
// to the filesystem (incremental_vacuum), commit.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "cache/sqlite/filesystem.hpp"
#include "cache/sqlite/handles.hpp"
#include "cache/sqlite/tuning.hpp"
#include "cache/trust.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"

namespace cucore::detail::sqlite {

using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

inline constexpr std::int64_t kApplicationId = 0x43554350;  // "CUCP"
inline constexpr std::int64_t kSchemaVersion = 1;
// The -wal file is truncated back to this after checkpoints.
inline constexpr std::int64_t kJournalSizeLimit = 4 << 20;
// Values larger than this are read with sqlite3_blob_read (see select_hit).
inline constexpr std::int64_t kBlobReadThreshold = 128 << 10;
// Access times recorded but not yet written back; beyond this many, they are dropped.
inline constexpr std::size_t kMaxPendingTouches = 1 << 16;
// A row read again within this long of its last recorded read keeps that access time: eviction
// order is exact up to a minute, and a hot entry costs no write per read (nor per process).
inline constexpr std::chrono::microseconds kTouchGranularity = std::chrono::minutes(1);
// The longest a read waits to write access times back (the write itself waits for busy_timeout).
inline constexpr milliseconds kTouchFlushBusyTimeout{20};
inline constexpr milliseconds kJournalSwitchBusyTimeout{200};
// While unavailable: how long before trying again (plus up to 50%). A lock timeout retries at once.
inline constexpr milliseconds kRetryAfterCorruption{1000};
inline constexpr milliseconds kRetryWhenDisabled{10000};
// A reported corruption that integrity_check did not confirm is not checked again for this long.
inline constexpr std::chrono::minutes kRecheckCorruptionAfter{1};

// One connection per object, used under its mutex: SQLite's own per-connection mutex is not
// needed. No symlinks (like the directory backend's O_NOFOLLOW): in a shared directory a planted
// link would redirect writes, and the journals and the lock file would not follow it.
inline constexpr int kOpenFlags = SQLITE_OPEN_NOMUTEX
#ifdef SQLITE_OPEN_NOFOLLOW
                                  | SQLITE_OPEN_NOFOLLOW
#endif
#ifdef SQLITE_OPEN_EXRESCODE
                                  | SQLITE_OPEN_EXRESCODE
#endif
    ;

// The clock of reads' write-backs: steady_clock, plus what tests advanced it by.
steady::time_point touch_clock_now() noexcept;

// Microseconds since the epoch: the unit of entries.atime.
inline std::int64_t now_stamp() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline std::span<const std::byte> as_bytes(std::string_view s) noexcept {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

inline std::int64_t to_int64(std::uint64_t v) {
  return v > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(v);
}

std::string errno_text(int err);

// ---- schema.cpp

std::int64_t pragma_int(sqlite3* db, const char* sql);
std::string pragma_text(sqlite3* db, const char* sql);

// What is at the cache's path, as far as a cheap look can tell (no full scan).
enum class verdict { ok, empty, busy, corrupt, foreign, newer, failed };
struct inspection {
  verdict kind = verdict::failed;
  std::string detail;
};
inspection inspect(sqlite3* db);

// First problem PRAGMA integrity_check reports, or empty when the file is sound. Reads the whole
// file (indexes against tables too, which quick_check skips): only to confirm a corruption an
// operation reported, before moving the file aside.
std::string integrity_check(sqlite3* db);

// ---- open.cpp

// Why the cache at `path` is not trusted under `access` (see cache_access): its directory, the
// file and SQLite's side files, any of which another user could have planted or could rewrite.
// Empty when all is well. A symbolic link at `path` is left to SQLITE_OPEN_NOFOLLOW.
std::string trust_problem(const std::string& path, cache_access access);

// ---- coordination.cpp

// SQLite's lock waits poll (its locks are non-blocking fcntl locks). Its default busy handler
// backs off to 100 ms sleeps, which lose the race for the lock to peers polling more often: under
// many writers, a rollback-journal reader could wait out a 5 s timeout. This one keeps polling
// every 0.5-2 ms (randomised, so peers do not wake in step) until the timeout.
struct busy_waiter {
  milliseconds timeout{0};
  steady::time_point first{};
  std::minstd_rand jitter{std::random_device{}()};

  static int callback(void* self, int count) noexcept;
  void install(sqlite3* db) { sqlite3_busy_handler(db, &busy_waiter::callback, this); }
};

// Whether a process other than this one holds SQLite's locks on the database at `path` (or on
// its WAL index): then it has the file open, and renaming the file would corrupt what it writes
// next. Closing a descriptor drops this process's POSIX locks on the file, so this must only run
// when no connection of this process has the file open (recovery holds the exclusive lock file).
bool database_in_use(const std::string& path);

// ---- entries, eviction

// Pending access times by key, looked up by string_view. Deliberately not noexcept: libstdc++ then
// keeps each node's hash in the node, so a lookup compares hashes while walking a bucket instead of
// rehashing (and so reading) every other key's heap-held bytes to find where the bucket ends. Under
// random reads over many entries the map holds tens of thousands of keys in cold memory, and that
// rehashing was most of its cost per hit (docs/performance.md, "Scale").
struct key_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view k) const { return std::hash<std::string_view>{}(k); }
};

// Statements kept for the connection's life.
struct statements {
  explicit statements(sqlite3* db)
      : begin(db, "BEGIN IMMEDIATE"),
        commit(db, "COMMIT"),
        rollback(db, "ROLLBACK"),
        // The value only when small: a large one is read with incremental blob I/O straight into
        // the caller's buffer, within this statement's read transaction (one copy, no
        // SQLite-side buffer of the whole value).
        select_hit(db,
                   "SELECT e.written, e.id, CASE WHEN e.size <= ?2 THEN b.value END, e.atime "
                   "FROM entries AS e CROSS JOIN blobs AS b ON b.id = e.id WHERE e.key = ?1"),
        select_entry(db, "SELECT id, size FROM entries WHERE key = ?1"),
        select_meta(db, "SELECT total_bytes, entry_count FROM meta"),
        select_victims(db, "SELECT key, size FROM entries WHERE key IS NOT ?1 ORDER BY atime, key"),
        insert_blob(db, "INSERT INTO blobs(value) VALUES (?1)"),
        insert_entry(
            db, "INSERT INTO entries(key, id, size, atime, written) VALUES (?1, ?2, ?3, ?4, ?5)"),
        update_blob(db, "UPDATE blobs SET value = ?2 WHERE id = ?1"),
        update_entry(db, "UPDATE entries SET size = ?2, atime = ?3, written = ?4 WHERE key = ?1"),
        delete_entry(db, "DELETE FROM entries WHERE key = ?1"),
        delete_written(db, "DELETE FROM entries WHERE key = ?1 AND written = ?2"),
        touch(db, "UPDATE entries SET atime = max(atime, ?2) WHERE key = ?1"),
        freelist_count(db, "PRAGMA freelist_count"),
        incremental_vacuum(db, "PRAGMA incremental_vacuum") {}

  statement begin, commit, rollback, select_hit, select_entry, select_meta, select_victims,
      insert_blob, insert_entry, update_blob, update_entry, delete_entry, delete_written, touch,
      freelist_count, incremental_vacuum;
};

// One BEGIN IMMEDIATE transaction; rolled back unless committed.
class write_transaction {
 public:
  write_transaction(sqlite3* db, statements& st) : db_(db), st_(st) {
    statement_scope s(st_.begin);
    s->run();
  }
  write_transaction(const write_transaction&) = delete;
  write_transaction& operator=(const write_transaction&) = delete;
  void commit() {
    statement_scope s(st_.commit);
    s->run();
  }
  ~write_transaction() {
    if (sqlite3_get_autocommit(db_) == 0) {
      sqlite3_step(st_.rollback.get());
      sqlite3_reset(st_.rollback.get());
    }
  }

 private:
  sqlite3* db_;
  statements& st_;
};

}  // namespace cucore::detail::sqlite

namespace cucore {

struct sqlite_program_cache::impl {
  using busy_waiter = detail::sqlite::busy_waiter;
  using connection = detail::sqlite::connection;
  using failure = detail::sqlite::failure;
  using filesystem_kind = detail::sqlite::filesystem_kind;
  using inspection = detail::sqlite::inspection;
  using key_hash = detail::sqlite::key_hash;
  using milliseconds = detail::sqlite::milliseconds;
  using statements = detail::sqlite::statements;
  using steady = detail::sqlite::steady;

  impl(std::filesystem::path f, sqlite_cache_options o);

  // --- state (connection fields guarded by mutex) ---
  const std::filesystem::path file;
  const std::string path;  // file as a string, for SQLite and messages
  const sqlite_cache_options options;
  const detail::trust::create_modes modes = detail::trust::modes_for(options.access, options.umask);
  filesystem_kind fs{"local", false};

  mutable std::mutex mutex;
  busy_waiter busy;  // the connection's busy handler: declared before db, so it outlives it
  connection db;
  std::unique_ptr<statements> st;  // declared after db: finalized first
  bool closed = false;
  int lock_fd = -1;
  bool lock_shared = false;
  bool lock_unusable = false;  // <file>.lock cannot be opened or locked: read-only, no recovery
  std::string unavailable;     // why the database is not open; empty when open
  steady::time_point retry_after{};
  // The open database's inode, to notice the path being deleted or replaced behind our back.
  std::optional<std::pair<dev_t, ino_t>> identity;
  steady::time_point identity_checked{};
  // When a reported corruption was last found not to be one (see after_failure_locked).
  std::optional<steady::time_point> last_found_sound;

  std::unordered_map<std::string, std::int64_t, key_hash, std::equal_to<>> touches;
  steady::time_point last_flush = detail::sqlite::touch_clock_now();
  // A read's write-back left access times pending (more than kMaxTouchesPerReadFlush): the next
  // read writes the next batch without waiting for touch_flush_interval.
  bool touch_backlog = false;
  std::int64_t last_stamp = 0;
  std::mt19937_64 write_ids;

  detail::cache_counter hits{cache_event::hit}, misses{cache_event::miss}, puts{cache_event::put},
      evictions{cache_event::eviction}, corrupt_dropped{cache_event::corrupt_dropped},
      errors{cache_event::error};
  std::shared_ptr<cache_statistics> statistics;  // <file>.stats/

  // --- helpers ---
  std::string prefix() const { return "sqlite cache " + path + ": "; }
  void warn(const std::string& message) const { log(log_level::warning, prefix() + message); }
  void check_not_closed() const {
    if (closed) throw error("sqlite cache " + path + " is closed");
  }

  // open.cpp. `writing`: about to write, so check now that the path is still the open file.
  bool ensure_open_locked(bool writing);
  void record_identity_locked();
  bool file_replaced_locked() const;
  void try_open_locked();
  void open_attempts_locked();
  void set_unavailable_locked(const std::string& reason, milliseconds retry);
  // After `f` while creating or opening (`cannot`: "cannot create the cache"): a locked database
  // is tried again at once, anything else after kRetryAfterCorruption.
  void set_unavailable_after_locked(const failure& f, const char* cannot);
  bool configure_locked(sqlite3* handle);
  void close_connection_locked() noexcept;
  void write_failed_locked(std::string_view operation, const std::string& why);
  void write_unavailable_locked(std::string_view operation);
  // schema.cpp
  void create_schema(sqlite3* handle);
  // coordination.cpp
  void release_shared_lock_locked() noexcept;
  bool acquire_shared_lock_locked();
  void retry_when_busy(milliseconds limit, const std::function<void()>& run);
  // recovery.cpp
  bool recover_locked(const inspection& why);
  std::optional<std::string> move_aside_locked();
  void after_failure_locked(const failure& f);

  // eviction.cpp. Microseconds since the epoch, increasing per object. Odd for reads, even for
  // writes: a row whose atime is odd has been read since it was written (see get).
  std::int64_t next_stamp_locked(bool read);
  // Inside a write transaction: writes the first `limit` pending access times in `touches`' order
  // (all by default) and returns how many; the caller erases them after the commit.
  std::size_t flush_touches_locked(std::size_t limit = SIZE_MAX);
  void maybe_flush_touches_locked();
  std::size_t evict_locked(std::optional<std::span<const std::byte>> keep, std::uint64_t excess);
  void erase_touch_locked(std::string_view key);
  void reclaim_locked();
  std::pair<std::uint64_t, std::uint64_t> read_meta_locked();
  // The same under the lock, the file opened first; error when it cannot be opened or read.
  std::pair<std::uint64_t, std::uint64_t> read_meta();

  // maintenance.cpp
  template <class Visit>
  void scan_rows(Visit visit);
};

}  // namespace cucore
