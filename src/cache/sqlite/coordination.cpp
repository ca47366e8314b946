// Coordination between processes sharing the SQLite cache: waiting for SQLite's locks, retrying
// what SQLite refuses without waiting, and the shared lock on <file>.lock that keeps a repair
// from renaming the file under a live connection.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "cache/sqlite/internal.hpp"
#include "common/descriptors.hpp"

namespace cucore {
namespace detail::sqlite {

int busy_waiter::callback(void* self, int count) noexcept {
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

namespace {

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

}  // namespace

bool database_in_use(const std::string& path) {
  constexpr off_t kPendingByte = 0x40000000;  // SQLite's lock bytes: pending, reserved, shared
  return locked_by_another_process(path, kPendingByte, 2 + 510) ||
         locked_by_another_process(path + "-shm", 120, 16);  // WAL index locks and DMS byte
}

}  // namespace detail::sqlite

using namespace detail::sqlite;

// Holds a shared flock() on <file>.lock while a connection is open, so that no process renames
// the file under a live connection. False when another process holds it exclusively (it is
// moving a damaged file aside) for longer than busy_timeout.
bool sqlite_program_cache::impl::acquire_shared_lock_locked() {
  if (lock_unusable || lock_shared) return true;
  if (lock_fd < 0) {
    const std::string lock_path = path + ".lock";
    lock_fd = detail::off_standard_streams(
        ::open(lock_path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, modes.file));
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

void sqlite_program_cache::impl::release_shared_lock_locked() noexcept {
  if (lock_shared && lock_fd >= 0) ::flock(lock_fd, LOCK_UN);
  lock_shared = false;
}

// SQLite answers some lock conflicts with SQLITE_BUSY at once, without calling the busy handler:
// where waiting could deadlock, as when changing the journal mode (which needs the exclusive
// lock) while a peer holds a write lock. Runs `run` again until `limit` has passed.
void sqlite_program_cache::impl::retry_when_busy(milliseconds limit,
                                                 const std::function<void()>& run) {
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

}  // namespace cucore
