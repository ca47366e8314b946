// A concurrent writer that changes files at exactly the moments a compiler opens them, for the
// tests of "no store across a change" (program_cache_key::check_store). Standard library and POSIX
// (Linux) only.
//
// It holds a write lease (fcntl F_SETLEASE, F_WRLCK) on each file. An open() of a leased file by
// anyone — the compiler, in this process or another — blocks in the kernel until the holder gives
// the lease up, and the kernel tells the holder with a signal (F_SETSIG, directed at the writer's
// own thread: F_SETOWN_EX). The writer then runs that file's action and releases the lease: the
// opener goes on and reads what the action left. So "the action, then the compiler's read" is an
// order the kernel enforces, not one a sleep hopes for; and an action on another file, run when
// the compiler opens a later header, happens after the compiler has read the earlier ones.
// (inotify, which reports an open only after it happened, cannot hold the reader back.)
//
// Leases need a regular file owned by this user, no other open descriptor of it when the lease
// is taken, and a file system that grants them (ext4, xfs, btrfs and tmpfs do): lease_dir()
// finds one.
#pragma once

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cucore::testing {

class lease_writer {
 public:
  struct step {
    std::filesystem::path file;  // leased; its action runs when someone opens it
    // Runs on the writer's thread while the opener waits; `fd` is the lease's descriptor, open
    // read-write on `file` (writing or truncating through it keeps the lease).
    std::function<void(int fd)> action;
  };

  // Takes every lease (from the writer's thread) before returning; ok() says whether that worked.
  explicit lease_writer(std::vector<step> steps) : steps_(std::move(steps)) {
    thread_ = std::thread([this] { run(); });
    std::unique_lock lock(mutex_);
    started_.wait(lock, [this] { return ready_; });
  }
  lease_writer(const lease_writer&) = delete;
  lease_writer& operator=(const lease_writer&) = delete;
  // Gives up the leases still held (their actions never ran) and stops the thread.
  ~lease_writer() {
    stop_ = true;
    if (thread_.joinable()) {
      ::pthread_kill(thread_.native_handle(), signal_number());
      thread_.join();
    }
  }

  // Whether every lease was taken; else error() says why.
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  // How many actions have run (each once its file was opened).
  std::size_t done() const { return done_.load(); }

  // A realtime signal the sanitizers and glibc leave alone.
  static int signal_number() { return SIGRTMIN + 5; }

 private:
  void run() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, signal_number());
    ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::vector<int> fds;
    for (const auto& s : steps_) {
      const int fd = ::open(s.file.c_str(), O_RDWR | O_CLOEXEC);
      struct f_owner_ex owner = {F_OWNER_TID, static_cast<pid_t>(::gettid())};
      if (fd < 0 || ::fcntl(fd, F_SETSIG, signal_number()) != 0 ||
          ::fcntl(fd, F_SETOWN_EX, &owner) != 0 || ::fcntl(fd, F_SETLEASE, F_WRLCK) != 0) {
        error_ = "cannot take a write lease on " + s.file.string() + ": " + std::strerror(errno);
        if (fd >= 0) ::close(fd);
        break;
      }
      fds.push_back(fd);
    }
    {
      std::lock_guard lock(mutex_);
      ready_ = true;
    }
    started_.notify_all();
    while (!stop_ && error_.empty() && done_ < fds.size()) {
      siginfo_t info{};
      if (::sigwaitinfo(&set, &info) != signal_number() || stop_) continue;
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (fds[i] < 0 || info.si_fd != fds[i]) continue;
        steps_[i].action(fds[i]);
        ::fcntl(fds[i], F_SETLEASE, F_UNLCK);  // the opener goes on now
        ::close(fds[i]);
        fds[i] = -1;
        ++done_;
      }
    }
    for (const int fd : fds) {
      if (fd >= 0) ::close(fd);  // closing gives the lease up
    }
  }

  std::vector<step> steps_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable started_;
  bool ready_ = false;
  std::string error_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> done_{0};
};

// Replaces the contents of the file behind `fd` (truncate, then write: what editors and
// `git checkout` do).
inline void rewrite_fd(int fd, const std::string& text) {
  if (::ftruncate(fd, 0) != 0) std::abort();
  if (!text.empty() &&
      ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    std::abort();
  }
}

// Whether files in `dir` can be leased (a probe file is made and removed).
inline bool leases_work_in(const std::filesystem::path& dir) {
  std::string probe = (dir / "cucore-lease-probe-XXXXXX").string();
  const int fd = ::mkostemp(probe.data(), O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fcntl(fd, F_SETLEASE, F_WRLCK) == 0;
  ::close(fd);
  ::unlink(probe.c_str());
  return ok;
}

// Where the tests make files to lease: the temp directory where it grants leases, else /dev/shm
// (tmpfs); empty when neither does.
inline std::filesystem::path lease_parent() {
  std::error_code ec;
  const std::filesystem::path temp = std::filesystem::temp_directory_path(ec);
  if (!ec && leases_work_in(temp)) return temp;
  if (leases_work_in("/dev/shm")) return "/dev/shm";
  return {};
}

}  // namespace cucore::testing
