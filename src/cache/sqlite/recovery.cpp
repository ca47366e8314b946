// Recovery of the SQLite cache: a corruption or a foreign file is confirmed with a fresh
// connection under the exclusive lock on <file>.lock, then the file and its journals are moved
// aside so that a fresh cache starts at the path.
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>

#include "cache/sqlite/internal.hpp"

namespace cucore {

using namespace detail::sqlite;

namespace {

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

}  // namespace

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
      set_unavailable_locked(what + "; cannot reopen it: " + detail::sqlite::describe(raw, rc),
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

}  // namespace cucore
