#include "cache/claim_file.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "cache/claim_watch.hpp"
#include "cache/posix_file.hpp"
#include "common/descriptors.hpp"
#include "common/sha256.hpp"

namespace cucore::detail {
namespace {

// What a watched directory reports: an entry renamed in (or made in place), a shard made.
constexpr std::uint32_t kDirEvents = IN_MOVED_TO | IN_CREATE | IN_DONT_FOLLOW | IN_ONLYDIR;

// Offsets below 2^40 keep clear of off_t limits on every file system.
constexpr std::uint64_t kOffsetMask = (std::uint64_t{1} << 40) - 1;

off_t lock_offset(cache_key_ref key) {
  const sha256_digest digest = sha256(key.bytes());
  std::uint64_t offset = 0;
  for (int i = 0; i < 8; ++i) offset = (offset << 8) | std::to_integer<std::uint64_t>(digest[i]);
  return static_cast<off_t>(offset & kOffsetMask);
}

// Sets the file's modification time (its change time follows): the abandonment mark. A precise
// time where we own the file, else the kernel's clock (write access suffices for that).
void touch(int fd) noexcept {
  timespec times[2] = {{0, UTIME_OMIT}, posix::now_realtime()};
  if (::futimens(fd, times) != 0 && errno == EPERM) {
    times[1] = {0, UTIME_NOW};
    (void)::futimens(fd, times);
  }
}

class fd_claim final : public cache_claim {
 public:
  explicit fd_claim(posix::unique_fd fd) noexcept : fd_(std::move(fd)) {}
  // Closing the descriptor drops its lock.
  void abandon() noexcept override { touch(fd_.get()); }

 private:
  posix::unique_fd fd_;
};

// inotify instances are quick to make but slow to close: the kernel waits out an SRCU grace period
// (measured: 10-15 ms), which a waiter would pay after finding its entry. A watch that ends gives
// its instance back here, its watches removed and its queue drained, for the next waiter of this
// process; a few are kept, the rest closed. A forked child does not use its parent's.
class inotify_pool {
 public:
  static posix::unique_fd take() noexcept {
    {
      std::lock_guard lock(mutex_);
      if (pid_ == ::getpid() && !idle_.empty()) {
        posix::unique_fd fd(idle_.back());
        idle_.pop_back();
        return fd;
      }
    }
    return posix::unique_fd(
        detail::off_standard_streams(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)));
  }
  static void give(posix::unique_fd fd, std::initializer_list<int> watches) noexcept {
    if (!fd) return;
    for (int wd : watches) {
      if (wd >= 0) (void)::inotify_rm_watch(fd.get(), wd);
    }
    std::array<char, 4096> buffer;
    while (::read(fd.get(), buffer.data(), buffer.size()) > 0) {
    }
    std::lock_guard lock(mutex_);
    if (pid_ != ::getpid()) {
      for (int old : idle_) ::close(old);  // the parent's: closing our reference is quick
      idle_.clear();
      pid_ = ::getpid();
    }
    if (idle_.size() < kKeep) {
      try {
        idle_.push_back(fd.get());
        (void)fd.release();
      } catch (...) {
      }
    }
  }

 private:
  static constexpr std::size_t kKeep = 4;
  static inline std::mutex mutex_;
  static inline std::vector<int> idle_;
  static inline pid_t pid_ = ::getpid();
};

// The watch: one inotify instance with two watches, the claims file (closed after writing: a
// claim released, by its holder or by the kernel at its death; attributes: an abandonment) and,
// for the directory cache, the entry's shard directory (the entry renamed into it). A sign from
// the claims file counts only when the key's byte went from locked to free (F_OFD_GETLK on a
// read-only descriptor, whose closing inotify does not report): the waiter's own attempts, other
// keys' claims and a lock free all along (a tiered cache whose local claim is free while the
// remote one is held) wake nobody.
class claim_file_watch final : public pollable_claim_watch {
 public:
  claim_file_watch(posix::unique_fd inotify, posix::unique_fd claims, int claims_wd, off_t offset,
                   std::string entry_dir, std::string entry_name) noexcept
      : inotify_(std::move(inotify)),
        claims_(std::move(claims)),
        claims_wd_(claims_wd),
        offset_(offset),
        entry_dir_(std::move(entry_dir)),
        entry_name_(std::move(entry_name)) {}
  ~claim_file_watch() override {
    inotify_pool::give(std::move(inotify_), {claims_wd_, entry_wd_, parent_wd_});
  }
  claim_file_watch(const claim_file_watch&) = delete;
  claim_file_watch& operator=(const claim_file_watch&) = delete;

  // Watches the entry's directory, or, while it does not exist (a shard no entry was put in
  // yet), its parent for its creation. True when the entry is there already.
  bool watch_entry_dir() noexcept {
    if (entry_dir_.empty()) return false;
    entry_wd_ = ::inotify_add_watch(inotify_.get(), entry_dir_.c_str(), kDirEvents);
    if (entry_wd_ >= 0) {
      struct stat st {};
      return ::lstat((entry_dir_ + "/" + entry_name_).c_str(), &st) == 0;
    }
    if (errno != ENOENT || parent_wd_ >= 0) return false;
    const auto slash = entry_dir_.rfind('/');
    if (slash == std::string::npos || slash == 0) return false;
    parent_wd_ =
        ::inotify_add_watch(inotify_.get(), entry_dir_.substr(0, slash).c_str(), kDirEvents);
    dir_name_ = entry_dir_.substr(slash + 1);
    // Made meanwhile: watch it now.
    struct stat st {};
    if (::lstat(entry_dir_.c_str(), &st) == 0) return watch_entry_dir();
    return false;
  }

  // The waiter saw the claim held just before: from here on, its coming free is the sign. (A
  // release in the microseconds between is found by the waiter's next poll.)
  void arm() noexcept override { was_locked_ = locked(); }

  int native_handle() const noexcept override { return inotify_.get(); }

  // Reads the queued events; true when one is a sign.
  bool check() noexcept override;

 private:
  bool locked() const noexcept {
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    lock.l_start = offset_;
    lock.l_len = 1;
    return ::fcntl(claims_.get(), F_OFD_GETLK, &lock) == 0 && lock.l_type != F_UNLCK;
  }

  posix::unique_fd inotify_;
  posix::unique_fd claims_;  // read-only: for F_OFD_GETLK
  int claims_wd_;
  off_t offset_;
  std::string entry_dir_;  // empty: no entry to watch for (SQLite)
  std::string entry_name_;
  int entry_wd_ = -1;   // entry_dir_'s watch
  int parent_wd_ = -1;  // its parent's, while entry_dir_ does not exist
  std::string dir_name_;
  bool was_locked_ = false;
};

bool claim_file_watch::check() noexcept {
  alignas(inotify_event) std::array<char, 4096> buffer;
  bool claims_event = false;
  bool landed = false;
  for (;;) {
    const ssize_t n = ::read(inotify_.get(), buffer.data(), buffer.size());
    if (n <= 0) break;  // EAGAIN: drained
    for (ssize_t at = 0; at < n;) {
      inotify_event event;
      std::memcpy(&event, buffer.data() + at, sizeof event);
      const char* name = buffer.data() + at + sizeof event;
      if (event.mask & IN_Q_OVERFLOW) claims_event = landed = true;  // lost some: assume all
      if (event.wd == claims_wd_) claims_event = true;
      if (event.wd == entry_wd_ && event.len > 0 && entry_name_ == name) landed = true;
      if (event.wd == parent_wd_ && event.len > 0 && dir_name_ == name && entry_wd_ < 0) {
        landed = watch_entry_dir() || landed;
      }
      at += static_cast<ssize_t>(sizeof event + event.len);
    }
  }
  if (landed) return true;
  if (!claims_event) return false;
  const bool now_locked = locked();
  const bool came_free = was_locked_ && !now_locked;
  was_locked_ = now_locked;
  return came_free;
}

}  // namespace

claim_result claim_file::try_claim(cache_key_ref key) const noexcept {
  try {
    std::error_code ec;
    // O_NOFOLLOW: a symlink planted at the path is not followed. O_NONBLOCK: a FIFO cannot hang
    // the open (and is refused below).
    posix::unique_fd fd =
        posix::open_file(path_, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK, mode_, ec);
    if (!fd) return {};
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
    // Ours and not in the cache's mode (just created under a umask that changed it): set it, so
    // that the claims file is as private, or as shared, as the cache's other files.
    if (exact_ && st.st_uid == ::geteuid() && (st.st_mode & 0777) != mode_) {
      (void)::fchmod(fd.get(), mode_);
    }
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    lock.l_start = lock_offset(key);
    lock.l_len = 1;
    int rc = 0;
    do {
      rc = ::fcntl(fd.get(), F_OFD_SETLK, &lock);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) {
      claim_result result;
      result.status = claim_status::owned;
      result.claim = std::make_unique<fd_claim>(std::move(fd));
      return result;
    }
    if (errno == EAGAIN || errno == EACCES) return {claim_status::held_elsewhere, nullptr};
    return {};  // EINVAL (no OFD locks here), ENOLCK: no claims, every miss compiles
  } catch (...) {
    return {};  // out of memory: compile without a claim
  }
}

std::uint64_t claim_file::abandonments() const noexcept {
  struct stat st {};
  if (::lstat(path_.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  const auto m = static_cast<std::uint64_t>(posix::to_ns(st.st_mtim));
  const auto c = static_cast<std::uint64_t>(posix::to_ns(st.st_ctim));
  return (m * 0x9e3779b97f4a7c15ull) ^ c ^ 1;
}

void claim_file::mark_abandoned() const noexcept {
  std::error_code ec;
  // No O_CREAT: with no claims file there is no claim, hence no waiter to tell.
  posix::unique_fd fd = posix::open_file(path_, O_WRONLY | O_NOFOLLOW | O_NONBLOCK, 0, ec);
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  touch(fd.get());
}

std::unique_ptr<claim_watch> claim_file::watch(cache_key_ref key, const std::string& entry_dir,
                                               const std::string& entry_name) const noexcept {
  try {
    std::error_code ec;
    posix::unique_fd claims =
        posix::open_file(path_, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0, ec);
    struct stat st {};
    if (!claims || ::fstat(claims.get(), &st) != 0 || !S_ISREG(st.st_mode)) return nullptr;
    posix::unique_fd inotify = inotify_pool::take();
    if (!inotify) return nullptr;  // EMFILE: this user's instances are used up (128 by default)
    const int claims_wd = ::inotify_add_watch(inotify.get(), path_.c_str(),
                                              IN_CLOSE_WRITE | IN_ATTRIB | IN_DONT_FOLLOW);
    if (claims_wd < 0) {
      inotify_pool::give(std::move(inotify), {});
      return nullptr;
    }
    auto watch = std::make_unique<claim_file_watch>(
        std::move(inotify), std::move(claims), claims_wd, lock_offset(key), entry_dir, entry_name);
    (void)watch->watch_entry_dir();  // already there: the waiter's next look finds it
    return watch;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace cucore::detail
