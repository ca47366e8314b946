// The SQLite program cache. See include/cucore/cache/sqlite.hpp for the guarantees.
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
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/statistics.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/claim_file.hpp"
#include "cache/entry_format.hpp"
#include "cache/posix_file.hpp"
#include "cache/sqlite_handles.hpp"
#include "cache/trust.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"

namespace cucore {

namespace detail::sqlite {

filesystem_kind classify_filesystem(std::uint32_t magic) noexcept {
  struct known {
    std::uint32_t magic;
    std::string_view name;
  };
  static constexpr known network[] = {
      {0x6969, "nfs"},          {0x517B, "smb"},        {0xFF534D42, "cifs"},
      {0xFE534D42, "smb2"},     {0x65735546, "fuse"},   {0x01021997, "9p"},
      {0x5346414F, "afs"},      {0x6B414653, "kafs"},   {0x73757245, "coda"},
      {0x00C36400, "ceph"},     {0x0BD00BD0, "lustre"}, {0x47504653, "gpfs"},
      {0x01161970, "gfs2"},     {0x7461636F, "ocfs2"},  {0x19830326, "beegfs"},
      {0x20030528, "orangefs"}, {0xAAD7AAEA, "panfs"},  {0x564C, "ncp"},
      {0x786F4256, "vboxsf"},
  };
  for (const auto& k : network) {
    if (k.magic == magic) return {k.name, true};
  }
  return {"local", false};
}

namespace {
std::mutex filesystem_override_mutex;
std::optional<filesystem_kind> filesystem_override;
}  // namespace

void override_filesystem_for_testing(std::optional<filesystem_kind> kind) noexcept {
  std::lock_guard lock(filesystem_override_mutex);
  filesystem_override = kind;
}

std::optional<filesystem_kind> filesystem_of(const std::filesystem::path& directory) noexcept {
  {
    std::lock_guard lock(filesystem_override_mutex);
    if (filesystem_override) return filesystem_override;
  }
  struct statfs s {};
  if (::statfs(directory.c_str(), &s) != 0) return std::nullopt;
  return classify_filesystem(static_cast<std::uint32_t>(s.f_type));
}

}  // namespace detail::sqlite

namespace {

using detail::sqlite::connection;
using detail::sqlite::failure;
using detail::sqlite::filesystem_kind;
using detail::sqlite::statement;
using detail::sqlite::statement_scope;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

constexpr std::int64_t kApplicationId = 0x43554350;  // "CUCP"
constexpr std::int64_t kSchemaVersion = 1;
// The -wal file is truncated back to this after checkpoints.
constexpr std::int64_t kJournalSizeLimit = 4 << 20;
// Values larger than this are read with sqlite3_blob_read (see select_hit).
constexpr std::int64_t kBlobReadThreshold = 128 << 10;
// Access times recorded but not yet written back; beyond this many, they are dropped.
constexpr std::size_t kMaxPendingTouches = 1 << 16;
// A row read again within this long of its last recorded read keeps that access time: eviction
// order is exact up to a minute, and a hot entry costs no write per read (nor per process).
constexpr std::chrono::microseconds kTouchGranularity = std::chrono::minutes(1);
// Microseconds since the epoch: the unit of entries.atime.
std::int64_t now_stamp() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
// The longest a read waits to write access times back (the write itself waits for busy_timeout).
constexpr milliseconds kTouchFlushBusyTimeout{20};
constexpr milliseconds kJournalSwitchBusyTimeout{200};
// While unavailable: how long before trying again (plus up to 50%). A lock timeout retries at once.
constexpr milliseconds kRetryAfterCorruption{1000};
constexpr milliseconds kRetryWhenDisabled{10000};
// A reported corruption that integrity_check did not confirm is not checked again for this long.
constexpr std::chrono::minutes kRecheckCorruptionAfter{1};

// One connection per object, used under its mutex: SQLite's own per-connection mutex is not
// needed. No symlinks (like the directory backend's O_NOFOLLOW): in a shared directory a planted
// link would redirect writes, and the journals and the lock file would not follow it.
constexpr int kOpenFlags = SQLITE_OPEN_NOMUTEX
#ifdef SQLITE_OPEN_NOFOLLOW
                           | SQLITE_OPEN_NOFOLLOW
#endif
#ifdef SQLITE_OPEN_EXRESCODE
                           | SQLITE_OPEN_EXRESCODE
#endif
    ;

struct schema_object {
  std::string_view type;
  std::string_view name;
  std::string_view sql;
};
// Sorted by name. The text is what sqlite_master keeps, compared verbatim on open.
constexpr schema_object kSchema[] = {
    {"table", "blobs", "CREATE TABLE blobs(id INTEGER PRIMARY KEY, value BLOB NOT NULL)"},
    {"table", "entries",
     "CREATE TABLE entries(key BLOB PRIMARY KEY, id INTEGER NOT NULL, size INTEGER NOT NULL, "
     "atime INTEGER NOT NULL, written INTEGER NOT NULL) WITHOUT ROWID"},
    {"index", "entries_by_atime", "CREATE INDEX entries_by_atime ON entries(atime)"},
    {"trigger", "entries_delete",
     "CREATE TRIGGER entries_delete AFTER DELETE ON entries BEGIN "
     "DELETE FROM blobs WHERE id = old.id; "
     "UPDATE meta SET total_bytes = total_bytes - old.size, entry_count = entry_count - 1; END"},
    {"trigger", "entries_insert",
     "CREATE TRIGGER entries_insert AFTER INSERT ON entries BEGIN "
     "UPDATE meta SET total_bytes = total_bytes + new.size, entry_count = entry_count + 1; END"},
    {"trigger", "entries_resize",
     "CREATE TRIGGER entries_resize AFTER UPDATE OF size ON entries BEGIN "
     "UPDATE meta SET total_bytes = total_bytes - old.size + new.size; END"},
    {"table", "meta",
     "CREATE TABLE meta(total_bytes INTEGER NOT NULL, entry_count INTEGER NOT NULL)"},
};

std::span<const std::byte> as_bytes(std::string_view s) noexcept {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

std::string errno_text(int err) {
  return std::strerror(err);
}

std::int64_t pragma_int(sqlite3* db, const char* sql) {
  statement s(db, sql, false);
  return s.step() ? s.column_int64(0) : 0;
}

std::string pragma_text(sqlite3* db, const char* sql) {
  statement s(db, sql, false);
  return s.step() ? std::string(s.column_text(0)) : std::string();
}

// What is at the cache's path, as far as a cheap look can tell (no full scan).
enum class verdict { ok, empty, busy, corrupt, foreign, newer, failed };
struct inspection {
  verdict kind = verdict::failed;
  std::string detail;
};

inspection inspect(sqlite3* db) {
  // One read transaction: a peer creating the schema must not be seen half-way (tables without
  // the application id, read in separate autocommit statements, would look foreign).
  const bool own_transaction = sqlite3_get_autocommit(db) != 0;
  struct end_read {
    sqlite3* db;
    bool active;
    ~end_read() {
      if (active && sqlite3_get_autocommit(db) == 0) {
        sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
      }
    }
  } end{db, false};
  try {
    if (own_transaction) {
      detail::sqlite::exec(db, "BEGIN");
      end.active = true;
    }
    const std::int64_t app = pragma_int(db, "PRAGMA application_id");
    const std::int64_t version = pragma_int(db, "PRAGMA user_version");
    std::vector<schema_object> found;
    std::vector<std::string> text;  // owns found's views
    {
      statement s(db,
                  "SELECT type, name, sql FROM sqlite_master "
                  "WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
                  false);
      while (s.step()) {
        text.emplace_back(s.column_text(0));
        text.emplace_back(s.column_text(1));
        text.emplace_back(s.column_text(2));
      }
    }
    for (std::size_t i = 0; i < text.size(); i += 3)
      found.push_back({text[i], text[i + 1], text[i + 2]});
    if (app == 0 && version == 0 && found.empty()) return {verdict::empty, {}};
    if (app != kApplicationId) {
      return {verdict::foreign, "not a cucore cache (application_id " + std::to_string(app) + ", " +
                                    std::to_string(found.size()) + " schema objects)"};
    }
    if (version > kSchemaVersion) {
      return {verdict::newer, "written by a newer cucore (schema version " +
                                  std::to_string(version) + "; this one reads version " +
                                  std::to_string(kSchemaVersion) + ")"};
    }
    if (version < kSchemaVersion) {
      return {verdict::foreign,
              "an old cucore cache (schema version " + std::to_string(version) + ")"};
    }
    const bool same = std::equal(std::begin(kSchema), std::end(kSchema), found.begin(), found.end(),
                                 [](const schema_object& a, const schema_object& b) {
                                   return a.type == b.type && a.name == b.name && a.sql == b.sql;
                                 });
    if (!same) return {verdict::foreign, "unexpected schema"};
    return {verdict::ok, {}};
  } catch (const failure& f) {
    if (f.busy()) return {verdict::busy, f.what()};
    if (f.corrupt()) return {verdict::corrupt, f.what()};
    return {verdict::failed, f.what()};
  }
}

// First problem PRAGMA integrity_check reports, or empty when the file is sound. Reads the whole
// file (indexes against tables too, which quick_check skips): only to confirm a corruption an
// operation reported, before moving the file aside.
std::string integrity_check(sqlite3* db) {
  statement s(db, "PRAGMA integrity_check(1)", false);
  if (!s.step()) return "integrity_check returned nothing";
  std::string result(s.column_text(0));
  return result == "ok" ? std::string() : "integrity_check: " + result;
}

// Whether a process other than this one holds SQLite's locks on the database (or its WAL index):
// then it has the file open, and renaming the file would corrupt what it writes next.
// Note: closing a descriptor drops this process's POSIX locks on the file, so this must only run
// when no connection of this process has the file open (recovery holds the exclusive lock file).
bool locked_by_another_process(const std::string& path, off_t start, off_t length) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = start;
  lock.l_len = length;
  const bool held = ::fcntl(fd, F_GETLK, &lock) == 0 && lock.l_type != F_UNLCK;
  ::close(fd);
  return held;
}

bool database_in_use(const std::string& path) {
  constexpr off_t kPendingByte = 0x40000000;  // SQLite's lock bytes: pending, reserved, shared
  return locked_by_another_process(path, kPendingByte, 2 + 510) ||
         locked_by_another_process(path + "-shm", 120, 16);  // WAL index locks and DMS byte
}

std::string utc_timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%S", &tm);
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  char frac[16];
  std::snprintf(frac, sizeof frac, ".%06lldZ", static_cast<long long>(us));
  return std::string(buf) + frac;
}

std::int64_t to_int64(std::uint64_t v) {
  return v > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(v);
}

// SQLite's lock waits poll (its locks are non-blocking fcntl locks). Its default busy handler
// backs off to 100 ms sleeps, which lose the race for the lock to peers polling more often: under
// many writers, a rollback-journal reader could wait out a 5 s timeout. This one keeps polling
// every 0.5-2 ms (randomised, so peers do not wake in step) until the timeout.
struct busy_waiter {
  milliseconds timeout{0};
  steady::time_point first{};
  std::minstd_rand jitter{std::random_device{}()};

  static int callback(void* self, int count) noexcept {
    auto& w = *static_cast<busy_waiter*>(self);
    const auto now = steady::now();
    if (count == 0) w.first = now;
    const auto waited = now - w.first;
    if (waited >= w.timeout) return 0;
    const auto pause = count < 4 ? std::chrono::microseconds(50 << count)
                                 : std::chrono::microseconds(500 + w.jitter() % 1500);
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(pause, w.timeout - waited));
    return 1;
  }
  void install(sqlite3* db) { sqlite3_busy_handler(db, &busy_waiter::callback, this); }
};

struct key_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view k) const noexcept {
    return std::hash<std::string_view>{}(k);
  }
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

// One row as maintenance scans read it.
struct scanned_row {
  std::vector<std::byte> key;
  std::int64_t written = 0;
  std::int64_t size = 0;
  std::int64_t atime = 0;
  bool has_blob = false;
  std::vector<std::byte> blob;
};

// Why the cache at `path` is not trusted under `access` (see cache_access): its directory, the
// file and SQLite's side files, any of which another user could have planted or could rewrite.
// Empty when all is well. A symbolic link at `path` is left to SQLITE_OPEN_NOFOLLOW.
std::string trust_problem(const std::string& path, cache_access access) {
  const std::filesystem::path file(path);
  const std::string dir = file.has_parent_path() ? file.parent_path().string() : std::string(".");
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (std::string why = detail::trust::problem(st, access, "directory of the SQLite cache", dir);
        !why.empty()) {
      return why;
    }
  }
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    const std::string side = path + suffix;
    if (::lstat(side.c_str(), &st) != 0) continue;
    if (*suffix == '\0' && S_ISLNK(st.st_mode)) continue;
    if (std::string why = detail::trust::problem(
            st, access, *suffix == '\0' ? "SQLite cache file" : "SQLite side file", side);
        !why.empty()) {
      return why;
    }
  }
  return {};
}

}  // namespace

struct sqlite_program_cache::impl {
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
  steady::time_point last_flush = steady::now();
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

  // `writing`: about to write, so check now that the path is still the open file.
  bool ensure_open_locked(bool writing);
  void record_identity_locked();
  bool file_replaced_locked() const;
  void try_open_locked();
  void open_attempts_locked();
  void release_shared_lock_locked() noexcept;
  bool acquire_shared_lock_locked();
  void set_unavailable_locked(const std::string& reason, milliseconds retry);
  bool recover_locked(const inspection& why);
  std::optional<std::string> move_aside_locked();
  bool configure_locked(sqlite3* handle);
  void create_schema(sqlite3* handle);
  template <class Run>
  void retry_when_busy(milliseconds limit, Run run);
  void close_connection_locked() noexcept;
  void after_failure_locked(const failure& f);
  void write_failed_locked(std::string_view operation, const std::string& why);
  void write_unavailable_locked(std::string_view operation);

  // Microseconds since the epoch, increasing per object. Odd for reads, even for writes: a row
  // whose atime is odd has been read since it was written (see get).
  std::int64_t next_stamp_locked(bool read);
  void flush_touches_locked();
  void maybe_flush_touches_locked();
  std::size_t evict_locked(std::optional<std::span<const std::byte>> keep, std::uint64_t excess);
  void erase_touch_locked(std::string_view key);
  template <class Visit>
  void scan_rows(Visit visit);
  void reclaim_locked();
  std::pair<std::uint64_t, std::uint64_t> read_meta_locked();
};

namespace {

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

}  // namespace

sqlite_program_cache::impl::impl(std::filesystem::path f, sqlite_cache_options o)
    : file(std::move(f)), path(file.string()), options(o) {
  std::random_device rd;
  write_ids.seed((std::uint64_t{rd()} << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid()) ^
                 static_cast<std::uint64_t>(steady::now().time_since_epoch().count()));
}

// ---------------------------------------------------------------------------------------------
// Opening, coordination and recovery

void sqlite_program_cache::impl::set_unavailable_locked(const std::string& reason,
                                                        milliseconds retry) {
  if (reason != unavailable) {
    warn(reason + "; reads miss and writes are skipped until this clears");
  }
  unavailable = reason;
  // Up to +50%, so that processes that failed together do not retry in step.
  if (retry.count() > 1) {
    retry += milliseconds(
        static_cast<std::int64_t>(write_ids() % static_cast<std::uint64_t>(retry.count() / 2)));
  }
  retry_after = steady::now() + retry;
}

bool sqlite_program_cache::impl::ensure_open_locked(bool writing) {
  if (db) {
    // A connection keeps using a file that was deleted or renamed (by something other than
    // cucore, whose repairs wait for every connection to close): its writes would be lost. Check
    // before every write, and once a second for reads.
    const auto now = steady::now();
    if (!writing && now - identity_checked < std::chrono::seconds(1)) return true;
    identity_checked = now;
    if (!file_replaced_locked()) return true;
    log(log_level::info, prefix() + "the file was removed or replaced; opening it again");
    close_connection_locked();
    release_shared_lock_locked();
    touches.clear();
    retry_after = {};
  }
  if (steady::now() < retry_after) return false;
  try_open_locked();
  return static_cast<bool>(db);
}

// Holds a shared flock() on <file>.lock while a connection is open, so that no process renames
// the file under a live connection. False when another process holds it exclusively (it is
// moving a damaged file aside) for longer than busy_timeout.
bool sqlite_program_cache::impl::acquire_shared_lock_locked() {
  if (lock_unusable || lock_shared) return true;
  if (lock_fd < 0) {
    const std::string lock_path = path + ".lock";
    lock_fd = ::open(lock_path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, modes.file);
    if (lock_fd >= 0) (void)detail::trust::set_created_file_mode(lock_fd, modes);
    if (lock_fd < 0) {
      const int err = errno;
      lock_unusable = true;
      warn("cannot open " + lock_path + " (" + errno_text(err) +
           "): opening the cache read-only, and a damaged file will not be replaced");
      return true;
    }
  }
  const auto deadline = steady::now() + options.busy_timeout;
  auto pause = std::chrono::microseconds(200);
  while (::flock(lock_fd, LOCK_SH | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    if (err != EWOULDBLOCK) {
      lock_unusable = true;
      ::close(lock_fd);
      lock_fd = -1;
      warn("cannot lock " + path + ".lock (" + errno_text(err) +
           "): opening the cache read-only, and a damaged file will not be replaced");
      return true;
    }
    if (steady::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
  lock_shared = true;
  return true;
}

// Opens the connection, or leaves the cache unavailable. Holds the shared lock exactly while a
// connection is open, so that a process that cannot use the file never blocks its repair.
void sqlite_program_cache::impl::try_open_locked() {
  open_attempts_locked();
  if (!db) release_shared_lock_locked();
}

void sqlite_program_cache::impl::release_shared_lock_locked() noexcept {
  if (lock_shared && lock_fd >= 0) ::flock(lock_fd, LOCK_UN);
  lock_shared = false;
}

void sqlite_program_cache::impl::open_attempts_locked() {
  // Trust, again on every open: the file may have been replaced since the constructor looked.
  if (std::string why = trust_problem(path, options.access); !why.empty()) {
    set_unavailable_locked(why, kRetryWhenDisabled);
    return;
  }
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (!acquire_shared_lock_locked()) {
      set_unavailable_locked("another process is repairing the file (" + path + ".lock is held)",
                             milliseconds(0));
      return;
    }
    const bool read_only = lock_unusable;
    if (!read_only && modes.exact) {
      // Create the file with the cache's modes (SQLite would use 0644 less the process umask);
      // SQLite gives its -wal, -shm and -journal files the database's mode.
      const int fd =
          ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, modes.file);
      if (fd >= 0) {
        (void)detail::trust::set_created_file_mode(fd, modes);
        ::close(fd);
      }
    }
    connection handle;
    {
      sqlite3* raw = nullptr;
      const int flags = kOpenFlags | (read_only ? SQLITE_OPEN_READONLY
                                                : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
      const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
      handle.reset(raw);
      if (rc != SQLITE_OK) {
        set_unavailable_locked(std::string("cannot open: ") +
                                   (raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)),
                               kRetryAfterCorruption);
        return;
      }
    }
    sqlite3_extended_result_codes(handle.get(), 1);
    busy.timeout = options.busy_timeout;
    busy.install(handle.get());
#ifdef SQLITE_DBCONFIG_TRUSTED_SCHEMA
    sqlite3_db_config(handle.get(), SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
#endif
    const inspection found = inspect(handle.get());
    switch (found.kind) {
      case verdict::empty:
        if (read_only) {
          set_unavailable_locked("the file is empty and cannot be written", kRetryWhenDisabled);
          return;
        }
        try {
          create_schema(handle.get());
        } catch (const failure& f) {
          if (f.busy()) {
            set_unavailable_locked(std::string("database is locked: ") + f.what(), milliseconds(0));
          } else {
            set_unavailable_locked(std::string("cannot create the cache: ") + f.what(),
                                   kRetryAfterCorruption);
          }
          return;
        }
        continue;  // inspect again: this process or a peer created it
      case verdict::ok:
        try {
          if (!configure_locked(handle.get())) return;
          st = std::make_unique<statements>(handle.get());
        } catch (const failure& f) {
          st.reset();
          if (f.busy()) {
            set_unavailable_locked(std::string("database is locked: ") + f.what(), milliseconds(0));
          } else {
            set_unavailable_locked(std::string("cannot use the cache: ") + f.what(),
                                   kRetryAfterCorruption);
          }
          return;
        }
        db = std::move(handle);
        record_identity_locked();
        if (!unavailable.empty()) {
          log(log_level::info, prefix() + "available again");
          unavailable.clear();
        }
        return;
      case verdict::busy:
        set_unavailable_locked("database is locked: " + found.detail, milliseconds(0));
        return;
      case verdict::failed:
        set_unavailable_locked(found.detail, kRetryAfterCorruption);
        return;
      case verdict::newer:
        set_unavailable_locked(found.detail + "; leaving it alone", kRetryWhenDisabled);
        return;
      case verdict::corrupt:
      case verdict::foreign:
        handle.reset();
        if (!recover_locked(found)) return;
        continue;  // moved aside (or found sound): open again
    }
  }
  set_unavailable_locked("could not open the cache after several attempts", kRetryAfterCorruption);
}

// Journal mode and per-connection settings. A WAL database on a network filesystem is switched
// to a rollback journal; when that is impossible (other connections), the cache refuses it
// (returns false, unavailable).
bool sqlite_program_cache::impl::configure_locked(sqlite3* handle) {
  const bool writable = sqlite3_db_readonly(handle, "main") == 0;
  std::string mode = pragma_text(handle, "PRAGMA journal_mode");
  const bool want_rollback = options.journal == sqlite_journal::rollback ||
                             (options.journal == sqlite_journal::automatic && fs.network);
  // Changing the journal mode needs the only connection: with others open it stays as it is.
  const auto switch_to = [&](const char* sql) {
    try {
      retry_when_busy(std::min(options.busy_timeout, kJournalSwitchBusyTimeout),
                      [&] { mode = pragma_text(handle, sql); });
    } catch (const failure& f) {
      if (!f.busy()) throw;
    }
  };
  if (writable && want_rollback && mode == "wal") {
    switch_to("PRAGMA journal_mode = DELETE");
  } else if (writable && options.journal == sqlite_journal::wal && mode != "wal") {
    switch_to("PRAGMA journal_mode = WAL");
  }
  if (mode == "wal" && fs.network && options.journal != sqlite_journal::wal) {
    set_unavailable_locked(
        "the database uses WAL, which corrupts on a network filesystem (" + std::string(fs.name) +
            "), and it could not be switched to a rollback journal (other connections?)",
        kRetryWhenDisabled);
    return false;
  }
  detail::sqlite::exec(handle,
                       mode == "wal" ? "PRAGMA synchronous = NORMAL" : "PRAGMA synchronous = FULL");
  detail::sqlite::exec(
      handle, ("PRAGMA journal_size_limit = " + std::to_string(kJournalSizeLimit)).c_str());
  return true;
}

// SQLite answers some lock conflicts with SQLITE_BUSY at once, without calling the busy handler:
// where waiting could deadlock, as when changing the journal mode (which needs the exclusive
// lock) while a peer holds a write lock. Runs `run` again until `limit` has passed.
template <class Run>
void sqlite_program_cache::impl::retry_when_busy(milliseconds limit, Run run) {
  const auto deadline = steady::now() + limit;
  for (;;) {
    try {
      run();
      return;
    } catch (const failure& f) {
      if (!f.busy() || steady::now() >= deadline) throw;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500 + write_ids() % 1500));
  }
}

// Creates the schema in an empty database; a no-op when a peer got there first.
void sqlite_program_cache::impl::create_schema(sqlite3* handle) {
  using detail::sqlite::exec;
  const bool wal = options.journal == sqlite_journal::wal ||
                   (options.journal == sqlite_journal::automatic && !fs.network);
  // Both only take effect on an empty database; auto_vacuum must precede the first table.
  exec(handle, "PRAGMA auto_vacuum = INCREMENTAL");
  retry_when_busy(options.busy_timeout, [&] {
    pragma_text(handle, wal ? "PRAGMA journal_mode = WAL" : "PRAGMA journal_mode = DELETE");
  });
  exec(handle, "BEGIN IMMEDIATE");
  try {
    if (inspect(handle).kind != verdict::empty) {
      exec(handle, "ROLLBACK");
      return;
    }
    for (const auto& object : kSchema) exec(handle, std::string(object.sql).c_str());
    exec(handle, "INSERT INTO meta(total_bytes, entry_count) VALUES (0, 0)");
    exec(handle, ("PRAGMA application_id = " + std::to_string(kApplicationId)).c_str());
    exec(handle, ("PRAGMA user_version = " + std::to_string(kSchemaVersion)).c_str());
    exec(handle, "COMMIT");
  } catch (...) {
    if (sqlite3_get_autocommit(handle) == 0)
      sqlite3_exec(handle, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

// A damaged or foreign file: confirm under the exclusive lock and move it aside. True when the
// caller should open again (moved aside, or found sound after all).
bool sqlite_program_cache::impl::recover_locked(const inspection& why) {
  const std::string what =
      why.kind == verdict::foreign ? why.detail : "damaged (" + why.detail + ")";
  if (lock_unusable) {
    set_unavailable_locked(what + "; without " + path + ".lock it is left alone",
                           kRetryWhenDisabled);
    return false;
  }
  // Shared → exclusive, without waiting: any peer with the file open holds a shared lock.
  // (A failed conversion drops the shared lock too; try_open takes it again.)
  lock_shared = false;
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    set_unavailable_locked(what +
                               "; other processes have it open, so it is left alone until they "
                               "close it",
                           kRetryAfterCorruption);
    return false;
  }
  struct unlock_at_exit {
    int fd;
    ~unlock_at_exit() { ::flock(fd, LOCK_UN); }
  } unlock{lock_fd};

  // Confirm with a fresh connection: another process may have repaired it, and an error seen by
  // an operation may have been transient.
  inspection again;
  {
    sqlite3* raw = nullptr;
    const int rc = sqlite3_open_v2(
        path.c_str(), &raw, kOpenFlags | SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    connection check(raw);
    if (rc != SQLITE_OK) {
      set_unavailable_locked(what + "; cannot reopen it: " + sqlite3_errstr(rc),
                             kRetryAfterCorruption);
      return false;
    }
    sqlite3_extended_result_codes(check.get(), 1);
    sqlite3_busy_timeout(check.get(), static_cast<int>(options.busy_timeout.count()));
    again = inspect(check.get());
    if (again.kind == verdict::ok) {
      try {
        if (std::string problem = integrity_check(check.get()); !problem.empty()) {
          again = {verdict::corrupt, problem};
        }
      } catch (const failure& f) {
        again = {f.corrupt() ? verdict::corrupt
                 : f.busy()  ? verdict::busy
                             : verdict::failed,
                 f.what()};
      }
    }
  }
  switch (again.kind) {
    case verdict::ok:
    case verdict::empty:
      // Sound: a peer repaired it, or the error was transient. Do not check again for a while
      // if it recurs.
      last_found_sound = steady::now();
      return true;
    case verdict::busy:
      set_unavailable_locked("database is locked: " + again.detail, milliseconds(0));
      return false;
    case verdict::newer:
      set_unavailable_locked(again.detail + "; leaving it alone", kRetryWhenDisabled);
      return false;
    case verdict::failed:
      set_unavailable_locked(what + "; " + again.detail, kRetryAfterCorruption);
      return false;
    case verdict::corrupt:
    case verdict::foreign:
      break;
  }
  if (database_in_use(path)) {
    set_unavailable_locked(what + "; another program has it open, so it is left alone",
                           kRetryAfterCorruption);
    return false;
  }
  const auto moved = move_aside_locked();
  if (!moved) return false;
  warn((again.kind == verdict::foreign ? again.detail : "damaged (" + again.detail + ")") +
       "; moved it to " + *moved + " and started a fresh cache");
  return true;
}

// Renames the database and its journal files to <file>.corrupt-<time>-<pid>[-wal|-shm|-journal],
// keeping each journal with its database. The new path, or nullopt (with the cache unavailable).
std::optional<std::string> sqlite_program_cache::impl::move_aside_locked() {
  std::string aside = path + ".corrupt-" + utc_timestamp() + "-" + std::to_string(::getpid());
  struct stat st_buf {};
  for (int n = 1; ::lstat(aside.c_str(), &st_buf) == 0; ++n) {
    aside = path + ".corrupt-" + utc_timestamp() + "-" + std::to_string(::getpid()) + "-" +
            std::to_string(n);
  }
  // Journals first: interrupted half-way, a journal must never be left to pair with a fresh
  // database at the path (SQLite would apply it). A main file left without its journal is seen
  // as damaged again, and moved on the next attempt.
  for (const char* suffix : {"-wal", "-journal", "-shm"}) {
    const std::string from = path + suffix;
    const std::string to = aside + suffix;
    if (::rename(from.c_str(), to.c_str()) == 0 || errno == ENOENT) continue;
    if (::unlink(from.c_str()) == 0 || errno == ENOENT) continue;
    const int err = errno;
    set_unavailable_locked("damaged, and " + from + " cannot be moved aside: " + errno_text(err),
                           kRetryWhenDisabled);
    return std::nullopt;
  }
  if (::rename(path.c_str(), aside.c_str()) != 0 && errno != ENOENT) {
    const int err = errno;
    set_unavailable_locked("damaged, and it cannot be moved aside: " + errno_text(err),
                           kRetryWhenDisabled);
    return std::nullopt;
  }
  return aside;
}

void sqlite_program_cache::impl::record_identity_locked() {
  struct stat st_buf {};
  identity.reset();
  if (::lstat(path.c_str(), &st_buf) == 0) identity.emplace(st_buf.st_dev, st_buf.st_ino);
  identity_checked = steady::now();
}

bool sqlite_program_cache::impl::file_replaced_locked() const {
  if (!identity) return false;
  struct stat st_buf {};
  if (::lstat(path.c_str(), &st_buf) != 0) return errno == ENOENT || errno == ENOTDIR;
  return st_buf.st_dev != identity->first || st_buf.st_ino != identity->second;
}

void sqlite_program_cache::impl::close_connection_locked() noexcept {
  st.reset();
  db.reset();
}

// After a failed statement on the open connection. Corruption closes the connection and goes
// through recovery; a lock timeout or an I/O error leaves the connection as it is.
void sqlite_program_cache::impl::after_failure_locked(const failure& f) {
  errors.fetch_add(1, std::memory_order_relaxed);
  if (f.code() == SQLITE_READONLY_DBMOVED) {
    // Someone renamed or deleted the file under this connection: open the path afresh next time.
    close_connection_locked();
    release_shared_lock_locked();
    touches.clear();
    return;
  }
  if (!f.corrupt()) return;
  // A corruption the integrity check just did not confirm: an error, not another full check.
  if (last_found_sound && steady::now() - *last_found_sound < kRecheckCorruptionAfter) return;
  close_connection_locked();
  touches.clear();
  if (recover_locked({verdict::corrupt, f.what()})) try_open_locked();
}

void sqlite_program_cache::impl::write_failed_locked(std::string_view operation,
                                                     const std::string& why) {
  std::string message = prefix() + std::string(operation) + " failed, not cached: " + why;
  if (options.on_write_failure == write_failure_policy::strict) throw error(message);
  log(log_level::warning, message);
}

// A write while the database is unavailable: the state change was logged already.
void sqlite_program_cache::impl::write_unavailable_locked(std::string_view operation) {
  errors.fetch_add(1, std::memory_order_relaxed);
  std::string message = prefix() + std::string(operation) + " skipped: " + unavailable;
  if (options.on_write_failure == write_failure_policy::strict) throw error(message);
  log(log_level::debug, message);
}

// ---------------------------------------------------------------------------------------------
// Recency, eviction, space

std::int64_t sqlite_program_cache::impl::next_stamp_locked(bool read) {
  std::int64_t stamp = std::max(now_stamp(), last_stamp + 1);
  if ((stamp & 1) != (read ? 1 : 0)) ++stamp;
  last_stamp = stamp;
  return last_stamp;
}

// Inside a write transaction. The caller clears `touches` after the commit.
void sqlite_program_cache::impl::flush_touches_locked() {
  for (const auto& [key, stamp] : touches) {
    statement_scope s(st->touch);
    s->bind(1, as_bytes(key));
    s->bind(2, stamp);
    s->run();
  }
}

// From a read: writes the access times back when the interval has passed, waiting only briefly
// for the lock (best effort; they stay pending otherwise).
void sqlite_program_cache::impl::maybe_flush_touches_locked() {
  if (touches.empty()) return;
  const auto now = steady::now();
  if (options.touch_flush_interval.count() > 0 && now - last_flush < options.touch_flush_interval) {
    return;
  }
  last_flush = now;
  const bool shorten =
      options.touch_flush_interval.count() > 0 && options.busy_timeout > kTouchFlushBusyTimeout;
  if (shorten) busy.timeout = kTouchFlushBusyTimeout;
  try {
    write_transaction txn(db.get(), *st);
    flush_touches_locked();
    txn.commit();
    touches.clear();
  } catch (const failure& f) {
    busy.timeout = options.busy_timeout;
    if (f.corrupt()) {
      after_failure_locked(f);
    } else {
      log(log_level::debug, prefix() + "access times not written yet: " + f.what());
    }
  }
  busy.timeout = options.busy_timeout;
  if (touches.size() > kMaxPendingTouches) touches.clear();
}

std::pair<std::uint64_t, std::uint64_t> sqlite_program_cache::impl::read_meta_locked() {
  statement_scope s(st->select_meta);
  if (!s->step()) return {0, 0};
  return {static_cast<std::uint64_t>(std::max<std::int64_t>(0, s->column_int64(0))),
          static_cast<std::uint64_t>(std::max<std::int64_t>(0, s->column_int64(1)))};
}

// Inside a write transaction: deletes least-recently-used entries other than `keep` until at
// least `excess` bytes are freed. Returns how many.
std::size_t sqlite_program_cache::impl::evict_locked(std::optional<std::span<const std::byte>> keep,
                                                     std::uint64_t excess) {
  std::vector<std::vector<std::byte>> victims;
  {
    statement_scope s(st->select_victims);
    if (keep) s->bind(1, *keep);  // unbound (NULL): every entry is a candidate
    std::uint64_t freed = 0;
    while (freed < excess && s->step()) {
      auto key = s->column_blob(0);
      victims.emplace_back(key.begin(), key.end());
      freed += static_cast<std::uint64_t>(std::max<std::int64_t>(0, s->column_int64(1)));
    }
  }
  for (const auto& key : victims) {
    statement_scope s(st->delete_entry);
    s->bind(1, key);
    s->run();
    erase_touch_locked(std::string_view(reinterpret_cast<const char*>(key.data()), key.size()));
  }
  return victims.size();
}

void sqlite_program_cache::impl::erase_touch_locked(std::string_view key) {
  if (auto it = touches.find(key); it != touches.end()) touches.erase(it);
}

// Inside a write transaction: gives free pages back to the filesystem.
void sqlite_program_cache::impl::reclaim_locked() {
  std::int64_t free_pages = 0;
  {
    statement_scope s(st->freelist_count);
    if (s->step()) free_pages = s->column_int64(0);
  }
  if (free_pages > 0) {
    statement_scope s(st->incremental_vacuum);
    s->run();
  }
}

// ---------------------------------------------------------------------------------------------
// The public interface

sqlite_program_cache::sqlite_program_cache(std::filesystem::path file, sqlite_cache_options options)
    : file_(file) {
  if (file.empty()) throw invalid_argument("sqlite cache: the file path is empty");
  if (options.max_size_bytes && *options.max_size_bytes == 0) {
    throw invalid_argument("max_size_bytes must be positive or unset (0 would evict every write)");
  }
  if (options.busy_timeout.count() < 0 || options.busy_timeout.count() > INT32_MAX) {
    throw invalid_argument("busy_timeout must be between 0 and INT32_MAX milliseconds");
  }
  if (options.touch_flush_interval.count() < 0) {
    throw invalid_argument("touch_flush_interval must not be negative");
  }
  impl_ = std::make_unique<impl>(std::move(file), options);
  if (options.statistics) {
    record_statistics_in(
        std::make_shared<cache_statistics>(impl_->path + ".stats", options.access, options.umask),
        cache_tier::local);
  }
  const std::filesystem::path parent =
      impl_->file.has_parent_path() ? impl_->file.parent_path() : std::filesystem::path(".");
  // Created with the cache's modes: with a group-writable process umask (002), the default
  // 0777 would make a directory this cache then refuses.
  struct stat parent_st {};
  const bool parent_existed = ::stat(parent.c_str(), &parent_st) == 0;
  std::error_code ec = detail::posix::make_directories(parent.string(), impl_->modes.dir);
  if (!ec && !parent_existed) {
    (void)detail::trust::set_created_dir_mode(parent.string(), impl_->modes.dir, impl_->modes);
  }
  if (ec) {
    const std::string message = "cannot create " + parent.string() + ": " + ec.message();
    if (options.on_write_failure == write_failure_policy::strict) {
      throw error("sqlite cache " + impl_->path + ": " + message);
    }
    impl_->warn(message);
  }
  // Trust is checked before anything is opened: a refused cache is an error, not a degraded one.
  if (std::string why = trust_problem(impl_->path, options.access); !why.empty()) {
    throw invalid_argument("sqlite cache: " + why);
  }
  if (auto fs = detail::sqlite::filesystem_of(parent)) impl_->fs = *fs;
  if (impl_->fs.network && options.journal == sqlite_journal::automatic) {
    impl_->warn("on a network filesystem (" + std::string(impl_->fs.name) +
                "): using a rollback journal, since WAL corrupts databases there");
  }
  std::lock_guard lock(impl_->mutex);
  impl_->try_open_locked();
}

sqlite_program_cache::~sqlite_program_cache() {
  close();
}

std::string sqlite_program_cache::description() const {
  return "sqlite " + file_.string();
}

std::optional<std::filesystem::path> sqlite_program_cache::compiler_version_memo() const {
  return std::filesystem::path(file_.string() + ".compiler-versions");
}

claim_result sqlite_program_cache::try_claim(cache_key_ref key, std::chrono::milliseconds) {
  // A separate file from FILE.lock: on NFS, flock() is emulated with byte-range locks, which
  // would conflict with these.
  return detail::claim_file(file_.string() + ".claims", impl_->modes.file, impl_->modes.exact)
      .try_claim(key);
}

std::shared_ptr<cache_statistics> sqlite_program_cache::statistics() const {
  return impl_->statistics;
}

void sqlite_program_cache::record_statistics_in(std::shared_ptr<cache_statistics> store,
                                                cache_tier tier) {
  impl& c = *impl_;
  c.statistics = std::move(store);
  c.hits.attach(c.statistics.get(), tier, cache_event::hit);
  c.misses.attach(c.statistics.get(), tier, cache_event::miss);
  c.puts.attach(c.statistics.get(), tier, cache_event::put);
  c.evictions.attach(c.statistics.get(), tier, cache_event::eviction);
  c.corrupt_dropped.attach(c.statistics.get(), tier, cache_event::corrupt_dropped);
  c.errors.attach(c.statistics.get(), tier, cache_event::error);
}

cache_stats sqlite_program_cache::stats() const {
  cache_stats s;
  s.hits = impl_->hits.load(std::memory_order_relaxed);
  s.misses = impl_->misses.load(std::memory_order_relaxed);
  s.puts = impl_->puts.load(std::memory_order_relaxed);
  s.evictions = impl_->evictions.load(std::memory_order_relaxed);
  s.corrupt_dropped = impl_->corrupt_dropped.load(std::memory_order_relaxed);
  s.errors = impl_->errors.load(std::memory_order_relaxed);
  return s;
}

void sqlite_program_cache::close() noexcept {
  if (!impl_) return;
  std::lock_guard lock(impl_->mutex);
  impl_->closed = true;
  if (impl_->db && !impl_->touches.empty()) {
    try {
      write_transaction txn(impl_->db.get(), *impl_->st);
      impl_->flush_touches_locked();
      txn.commit();
    } catch (const std::exception& e) {
      log(log_level::debug, impl_->prefix() + "access times not written back: " + e.what());
    }
  }
  impl_->touches.clear();
  impl_->close_connection_locked();
  if (impl_->lock_fd >= 0) {
    ::close(impl_->lock_fd);  // releases the flock
    impl_->lock_fd = -1;
    impl_->lock_shared = false;
  }
}

std::optional<object_code> sqlite_program_cache::get(cache_key_ref key) {
  impl& c = *impl_;
  std::vector<std::byte> data;
  std::int64_t written = 0;
  std::int64_t atime = 0;
  {
    std::lock_guard lock(c.mutex);
    c.check_not_closed();
    if (!c.ensure_open_locked(false)) {
      c.errors.fetch_add(1, std::memory_order_relaxed);
      c.misses.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    try {
      statement_scope s(c.st->select_hit);
      s->bind(1, key.bytes());
      s->bind(2, kBlobReadThreshold);
      if (!s->step()) {
        c.misses.fetch_add(1, std::memory_order_relaxed);
        return std::nullopt;
      }
      written = s->column_int64(0);
      atime = s->column_int64(3);
      if (!s->column_is_null(2)) {
        const auto blob = s->column_blob(2);
        data.assign(blob.begin(), blob.end());
      } else {
        detail::sqlite::blob_reader blob(c.db.get(), "blobs", "value", s->column_int64(1));
        data.resize(blob.size());
        blob.read(data);
      }
    } catch (const failure& f) {
      c.after_failure_locked(f);
      if (!f.corrupt()) c.warn(std::string("read failed, treated as a miss: ") + f.what());
      c.misses.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    // Recency: a row read since it was written (odd atime) within kTouchGranularity needs no new
    // access time, so a hot entry costs no write, even to processes that read it once and exit.
    const std::string_view k = key.as_string_view();
    auto pending = c.touches.find(k);
    const bool recently_read = (atime & 1) != 0 && now_stamp() - atime < kTouchGranularity.count();
    if (pending != c.touches.end()) {
      pending->second = c.next_stamp_locked(true);
    } else if (!recently_read) {
      c.touches.emplace(std::string(k), c.next_stamp_locked(true));
    }
    c.maybe_flush_touches_locked();
  }

  detail::decoded_entry decoded;
  try {
    decoded = detail::decode_entry(std::move(data), key.bytes());
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception&) {
    decoded.status = detail::entry_status::malformed;
  }
  if (decoded.status == detail::entry_status::ok && decoded.code) {
    c.hits.fetch_add(1, std::memory_order_relaxed);
    return std::move(decoded.code);
  }

  // A damaged row: a miss, and the row goes unless a peer rewrote it since.
  c.misses.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(c.mutex);
  if (c.closed || !c.db) return std::nullopt;
  c.erase_touch_locked(key.as_string_view());
  try {
    write_transaction txn(c.db.get(), *c.st);
    c.flush_touches_locked();
    {
      statement_scope s(c.st->delete_written);
      s->bind(1, key.bytes());
      s->bind(2, written);
      s->run();
    }
    const bool removed = sqlite3_changes(c.db.get()) > 0;
    c.reclaim_locked();
    txn.commit();
    c.touches.clear();
    if (removed) {
      c.corrupt_dropped.fetch_add(1, std::memory_order_relaxed);
      c.warn("dropped a damaged entry (" + std::string(detail::to_string(decoded.status)) + ")");
    }
  } catch (const failure& f) {
    c.after_failure_locked(f);
    c.warn(std::string("found a damaged entry (") + std::string(detail::to_string(decoded.status)) +
           ") but could not remove it: " + f.what());
  }
  return std::nullopt;
}

void sqlite_program_cache::put(cache_key_ref key, const object_code& code) {
  impl& c = *impl_;
  const std::vector<std::byte> blob = detail::encode_entry(key.bytes(), code);
  const std::uint64_t size = blob.size();
  const auto& cap = c.options.max_size_bytes;
  const bool oversized = cap && size > *cap;

  std::lock_guard lock(c.mutex);
  c.check_not_closed();
  if (!c.ensure_open_locked(true)) {
    c.write_unavailable_locked("put");
    return;
  }
  try {
    write_transaction txn(c.db.get(), *c.st);
    c.flush_touches_locked();
    std::optional<std::pair<std::int64_t, std::uint64_t>> old;  // blob id, size
    {
      statement_scope s(c.st->select_entry);
      s->bind(1, key.bytes());
      if (s->step()) {
        old.emplace(s->column_int64(0),
                    static_cast<std::uint64_t>(std::max<std::int64_t>(0, s->column_int64(1))));
      }
    }
    std::size_t evicted = 0;
    if (oversized) {
      // Never stored; and the value it replaces must not outlive the put.
      if (old) {
        statement_scope s(c.st->delete_entry);
        s->bind(1, key.bytes());
        s->run();
      }
    } else {
      if (cap) {
        const std::uint64_t total = c.read_meta_locked().first;
        const std::uint64_t after = total - std::min(total, old ? old->second : 0) + size;
        if (after > *cap) evicted = c.evict_locked(key.bytes(), after - *cap);
      }
      const std::int64_t stamp = c.next_stamp_locked(false);
      const auto write_id = static_cast<std::int64_t>(c.write_ids());
      if (old) {
        {
          statement_scope s(c.st->update_blob);
          s->bind(1, old->first);
          s->bind(2, blob);
          s->run();
        }
        statement_scope s(c.st->update_entry);
        s->bind(1, key.bytes());
        s->bind(2, to_int64(size));
        s->bind(3, stamp);
        s->bind(4, write_id);
        s->run();
      } else {
        {
          statement_scope s(c.st->insert_blob);
          s->bind(1, blob);
          s->run();
        }
        const std::int64_t id = sqlite3_last_insert_rowid(c.db.get());
        statement_scope s(c.st->insert_entry);
        s->bind(1, key.bytes());
        s->bind(2, id);
        s->bind(3, to_int64(size));
        s->bind(4, stamp);
        s->bind(5, write_id);
        s->run();
      }
    }
    c.reclaim_locked();
    txn.commit();
    c.touches.clear();
    c.last_flush = steady::now();
    c.puts.fetch_add(1, std::memory_order_relaxed);
    c.evictions.fetch_add(evicted + (oversized ? 1 : 0), std::memory_order_relaxed);
    if (oversized) {
      log(log_level::debug, c.prefix() + "entry of " + std::to_string(size) +
                                " bytes is larger than max_size_bytes; not stored");
    }
  } catch (const failure& f) {
    c.after_failure_locked(f);
    c.write_failed_locked("put", f.what());
  }
}

bool sqlite_program_cache::erase(cache_key_ref key) {
  impl& c = *impl_;
  std::lock_guard lock(c.mutex);
  c.check_not_closed();
  if (!c.ensure_open_locked(true)) {
    c.write_unavailable_locked("erase");
    return false;
  }
  try {
    write_transaction txn(c.db.get(), *c.st);
    c.erase_touch_locked(key.as_string_view());
    c.flush_touches_locked();
    {
      statement_scope s(c.st->delete_entry);
      s->bind(1, key.bytes());
      s->run();
    }
    const bool removed = sqlite3_changes(c.db.get()) > 0;
    c.reclaim_locked();
    txn.commit();
    c.touches.clear();
    c.last_flush = steady::now();
    return removed;
  } catch (const failure& f) {
    c.after_failure_locked(f);
    c.write_failed_locked("erase", f.what());
    return false;
  }
}

std::size_t sqlite_program_cache::size() {
  impl& c = *impl_;
  std::lock_guard lock(c.mutex);
  c.check_not_closed();
  if (!c.ensure_open_locked(false)) throw error(c.prefix() + c.unavailable);
  try {
    return static_cast<std::size_t>(c.read_meta_locked().second);
  } catch (const failure& f) {
    c.after_failure_locked(f);
    throw error(c.prefix() + f.what());
  }
}

std::uint64_t sqlite_program_cache::size_bytes() {
  impl& c = *impl_;
  std::lock_guard lock(c.mutex);
  c.check_not_closed();
  if (!c.ensure_open_locked(false)) throw error(c.prefix() + c.unavailable);
  try {
    return c.read_meta_locked().first;
  } catch (const failure& f) {
    c.after_failure_locked(f);
    throw error(c.prefix() + f.what());
  }
}

void sqlite_program_cache::clear() {
  impl& c = *impl_;
  std::lock_guard lock(c.mutex);
  c.check_not_closed();
  if (!c.ensure_open_locked(true)) {
    c.write_unavailable_locked("clear");
    return;
  }
  try {
    write_transaction txn(c.db.get(), *c.st);
    detail::sqlite::exec(c.db.get(), "DELETE FROM entries");
    c.reclaim_locked();
    txn.commit();
    c.touches.clear();
  } catch (const failure& f) {
    c.after_failure_locked(f);
    c.write_failed_locked("clear", f.what());
  }
}

std::size_t sqlite_program_cache::trim(std::uint64_t max_size_bytes) {
  impl& c = *impl_;
  std::lock_guard lock(c.mutex);
  c.check_not_closed();
  if (!c.ensure_open_locked(true)) {
    c.write_unavailable_locked("trim");
    return 0;
  }
  try {
    write_transaction txn(c.db.get(), *c.st);
    c.flush_touches_locked();
    const std::uint64_t total = c.read_meta_locked().first;
    std::size_t evicted = 0;
    if (total > max_size_bytes) evicted = c.evict_locked(std::nullopt, total - max_size_bytes);
    c.reclaim_locked();
    txn.commit();
    c.touches.clear();
    c.evictions.fetch_add(evicted, std::memory_order_relaxed);
    return evicted;
  } catch (const failure& f) {
    c.after_failure_locked(f);
    c.write_failed_locked("trim", f.what());
    return 0;
  }
}

// Reads all rows in key order, a batch at a time (at most 64 rows or 16 MiB), without holding
// the mutex or a read transaction between batches; `visit` runs outside the lock.
template <class Visit>
void sqlite_program_cache::impl::scan_rows(Visit visit) {
  constexpr int kMaxRows = 64;
  constexpr std::size_t kMaxBytes = 16 << 20;
  std::optional<std::vector<std::byte>> after;
  for (bool done = false; !done;) {
    std::vector<scanned_row> rows;
    {
      std::lock_guard lock(mutex);
      check_not_closed();
      if (!ensure_open_locked(false)) throw error(prefix() + unavailable);
      try {
        statement s(db.get(),
                    after ? "SELECT e.key, e.written, e.size, e.atime, b.value FROM entries AS e "
                            "LEFT JOIN blobs AS b ON b.id = e.id WHERE e.key > ?1 ORDER BY e.key"
                          : "SELECT e.key, e.written, e.size, e.atime, b.value FROM entries AS e "
                            "LEFT JOIN blobs AS b ON b.id = e.id ORDER BY e.key",
                    false);
        if (after) s.bind(1, *after);
        std::size_t bytes = 0;
        done = true;
        while (s.step()) {
          scanned_row r;
          auto k = s.column_blob(0);
          r.key.assign(k.begin(), k.end());
          r.written = s.column_int64(1);
          r.size = s.column_int64(2);
          r.atime = s.column_int64(3);
          r.has_blob = !s.column_is_null(4);
          auto b = s.column_blob(4);
          r.blob.assign(b.begin(), b.end());
          bytes += r.blob.size();
          rows.push_back(std::move(r));
          if (rows.size() == kMaxRows || bytes >= kMaxBytes) {
            done = false;  // more, perhaps: the next batch starts after this key
            break;
          }
        }
      } catch (const failure& f) {
        after_failure_locked(f);
        throw error(prefix() + f.what());
      }
    }
    if (!rows.empty()) after = rows.back().key;
    for (auto& r : rows) visit(r);
  }
}

std::vector<cache_entry_info> sqlite_program_cache::list() {
  impl& c = *impl_;
  std::vector<cache_entry_info> out;
  c.scan_rows([&](scanned_row& r) {
    if (!r.has_blob) return;
    auto header = detail::read_entry_header(r.blob);
    if (!header) return;  // damaged: verify() reports it
    cache_entry_info info;
    info.key = std::move(r.key);
    info.type = header->type;
    info.name = std::move(header->name);
    info.symbol_count = header->symbol_count;
    info.payload_bytes = header->payload_length;
    info.stored_bytes = r.blob.size();
    info.last_used = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::microseconds(r.atime)));
    out.push_back(std::move(info));
  });
  {
    // Reads of this object not yet written back.
    std::lock_guard lock(c.mutex);
    for (auto& info : out) {
      auto it = c.touches.find(
          std::string_view(reinterpret_cast<const char*>(info.key.data()), info.key.size()));
      if (it == c.touches.end()) continue;
      const auto t = std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::microseconds(it->second)));
      if (!info.last_used || *info.last_used < t) info.last_used = t;
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const cache_entry_info& a, const cache_entry_info& b) {
                     return a.last_used > b.last_used;  // most recently used first
                   });
  return out;
}

cache_verify_report sqlite_program_cache::verify(bool remove_bad) {
  impl& c = *impl_;
  cache_verify_report report;
  std::vector<std::pair<std::vector<std::byte>, std::int64_t>> bad;  // key, write id
  c.scan_rows([&](scanned_row& r) {
    ++report.entries;
    bool good = false;
    if (r.has_blob && r.size == static_cast<std::int64_t>(r.blob.size())) {
      try {
        good = detail::decode_entry(std::move(r.blob), r.key).status == detail::entry_status::ok;
      } catch (const std::bad_alloc&) {
        throw;
      } catch (const std::exception&) {
        good = false;
      }
    }
    if (good) {
      ++report.ok;
    } else {
      ++report.corrupt;
      bad.emplace_back(std::move(r.key), r.written);
    }
  });
  if (!remove_bad) return report;

  std::lock_guard lock(c.mutex);
  c.check_not_closed();
  if (!c.ensure_open_locked(true)) throw error(c.prefix() + c.unavailable);
  try {
    write_transaction txn(c.db.get(), *c.st);
    for (const auto& [key, written] : bad) {
      statement_scope s(c.st->delete_written);
      s->bind(1, key);
      s->bind(2, written);
      s->run();
      report.removed += static_cast<std::size_t>(sqlite3_changes(c.db.get()));
    }
    // Repairs no code path should ever need: blobs without an entry, a drifted running total.
    detail::sqlite::exec(c.db.get(), "DELETE FROM blobs WHERE id NOT IN (SELECT id FROM entries)");
    if (const int orphans = sqlite3_changes(c.db.get()); orphans > 0) {
      c.warn("removed " + std::to_string(orphans) + " blobs without an entry");
    }
    {
      statement s(c.db.get(),
                  "SELECT (SELECT count(*) FROM meta) = 1 AND "
                  "(SELECT total_bytes FROM meta) IS (SELECT coalesce(sum(size), 0) FROM entries) "
                  "AND (SELECT entry_count FROM meta) IS (SELECT count(*) FROM entries)",
                  false);
      if (s.step() && s.column_int64(0) == 0) {
        s.reset();
        c.warn("the running total was wrong; recomputed it");
        detail::sqlite::exec(c.db.get(),
                             "DELETE FROM meta; INSERT INTO meta(total_bytes, entry_count) "
                             "SELECT coalesce(sum(size), 0), count(*) FROM entries");
      }
    }
    c.reclaim_locked();
    txn.commit();
  } catch (const failure& f) {
    c.after_failure_locked(f);
    c.write_failed_locked("verify", f.what());
    report.removed = 0;
    return report;
  }
  c.corrupt_dropped.fetch_add(report.removed, std::memory_order_relaxed);
  return report;
}

}  // namespace cucore
