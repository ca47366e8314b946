// Opening the SQLite cache's connection: trust, journal mode, per-connection settings, and the
// availability state (why the cache is unavailable and when to try again).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "cache/sqlite/internal.hpp"

namespace cucore {
namespace detail::sqlite {

std::string errno_text(int err) {
  return std::strerror(err);
}

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

}  // namespace detail::sqlite

using namespace detail::sqlite;

sqlite_program_cache::impl::impl(std::filesystem::path f, sqlite_cache_options o)
    : file(std::move(f)), path(file.string()), options(o) {
  std::random_device rd;
  write_ids.seed((std::uint64_t{rd()} << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid()) ^
                 static_cast<std::uint64_t>(steady::now().time_since_epoch().count()));
}

void sqlite_program_cache::impl::set_unavailable_after_locked(const failure& f,
                                                              const char* cannot) {
  if (f.busy()) {
    set_unavailable_locked(std::string("database is locked: ") + f.what(), milliseconds(0));
  } else {
    set_unavailable_locked(std::string(cannot) + ": " + f.what(), kRetryAfterCorruption);
  }
}

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

// Opens the connection, or leaves the cache unavailable. Holds the shared lock exactly while a
// connection is open, so that a process that cannot use the file never blocks its repair.
void sqlite_program_cache::impl::try_open_locked() {
  open_attempts_locked();
  if (!db) release_shared_lock_locked();
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
        set_unavailable_locked(std::string("cannot open: ") + detail::sqlite::describe(raw, rc),
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
          set_unavailable_after_locked(f, "cannot create the cache");
          return;
        }
        continue;  // inspect again: this process or a peer created it
      case verdict::ok:
        try {
          if (!configure_locked(handle.get())) return;
          st = std::make_unique<statements>(handle.get());
        } catch (const failure& f) {
          st.reset();
          set_unavailable_after_locked(f, "cannot use the cache");
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
  // Opt-in (see sqlite_cache_options::mmap_size_bytes): a file truncated under the map is SIGBUS.
  if (options.mmap_size_bytes > 0 && !fs.network) {
    (void)pragma_int(handle,
                     ("PRAGMA mmap_size = " + std::to_string(options.mmap_size_bytes)).c_str());
  }
  return true;
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

}  // namespace cucore
