#include "cache/posix_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_NOREPLACE
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "common/descriptors.hpp"

namespace cucore::detail::posix {

std::error_code last_error() noexcept {
  return errno_code(errno);
}

void unique_fd::reset(int fd) noexcept {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);
  fd_ = fd;
}

std::error_code unique_fd::close() noexcept {
  if (fd_ < 0) return {};
  const int fd = release();
  if (::close(fd) != 0 && errno != EINTR) return last_error();
  return {};
}

unique_fd open_file(const char* path, int flags, mode_t mode, std::error_code& ec) noexcept {
  return open_file_at(AT_FDCWD, path, flags, mode, ec);
}

unique_fd open_file_at(int dir_fd, const char* name, int flags, mode_t mode,
                       std::error_code& ec) noexcept {
  for (;;) {
    const int fd = detail::off_standard_streams(::openat(dir_fd, name, flags | O_CLOEXEC, mode));
    if (fd >= 0) {
      ec.clear();
      return unique_fd(fd);
    }
    if (errno != EINTR) {
      ec = last_error();
      return unique_fd();
    }
  }
}

namespace {

// Fills `buffer` by calls of `read_at(destination, count, filled)` (a read(2) of the bytes after
// the `filled` ones), retrying EINTR, until it is full or at the end of the file.
template <class ReadAt>
std::error_code fill(std::span<std::byte> buffer, std::size_t& got, ReadAt read_at) noexcept {
  got = 0;
  while (got < buffer.size()) {
    const ssize_t n = read_at(buffer.data() + got, buffer.size() - got, got);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      return last_error();
    }
  }
  return {};
}

}  // namespace

std::error_code read_fully(int fd, std::span<std::byte> buffer, std::size_t& got) noexcept {
  return fill(buffer, got, [fd](std::byte* to, std::size_t count, std::size_t) {
    return ::read(fd, to, count);
  });
}

std::error_code pread_fully(int fd, std::span<std::byte> buffer, std::uint64_t offset,
                            std::size_t& got) noexcept {
  return fill(buffer, got, [fd, offset](std::byte* to, std::size_t count, std::size_t filled) {
    return ::pread(fd, to, count, static_cast<off_t>(offset + filled));
  });
}

std::error_code read_small_file(int dir_fd, const char* name, std::uint64_t max_bytes,
                                const std::function<bool(const struct stat&)>& accept,
                                std::string& out, struct stat* st_out) {
  out.clear();
  std::error_code ec;
  const unique_fd fd =
      open_file_at(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0, ec);
  if (!fd) return ec;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return last_error();
  if (st_out != nullptr) *st_out = st;
  if (!S_ISREG(st.st_mode)) return errno_code(EINVAL);
  if (st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    return errno_code(EFBIG);
  }
  if (accept && !accept(st)) return errno_code(EACCES);
  out.reserve(static_cast<std::size_t>(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return last_error();
    if (n == 0) return {};
    if (static_cast<std::uint64_t>(n) > max_bytes - out.size()) {
      out.clear();
      return errno_code(EFBIG);
    }
    out.append(chunk, static_cast<std::size_t>(n));
  }
}

std::error_code write_fully(int fd, std::span<const std::byte> data) noexcept {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n == 0) {
      return errno_code(EIO);  // no progress: do not spin
    } else if (errno != EINTR) {
      return last_error();
    }
  }
  return {};
}

std::error_code sync_file(int fd, bool data_only) noexcept {
  for (;;) {
#if defined(__linux__)
    const int rc = data_only ? ::fdatasync(fd) : ::fsync(fd);
#else
    (void)data_only;
    const int rc = ::fsync(fd);
#endif
    if (rc == 0) return {};
    if (errno != EINTR) return last_error();
  }
}

std::error_code sync_directory(const char* path) noexcept {
  std::error_code ec;
  unique_fd dir = open_file(path, O_RDONLY | O_DIRECTORY, 0, ec);
  if (!dir) return ec;
  ec = sync_file(dir.get(), /*data_only=*/false);
  // Some filesystems do not support fsync on a directory; there is nothing more to do there.
  if (ec == std::errc::invalid_argument) ec.clear();
  return ec;
}

std::error_code make_directory(const std::string& path, mode_t mode, bool& created) noexcept {
  created = false;
  if (::mkdir(path.c_str(), mode) == 0) {
    created = true;
    return {};
  }
  const int err = errno;
  if (err != EEXIST) return errno_code(err);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return last_error();
  if (!S_ISDIR(st.st_mode)) return errno_code(ENOTDIR);
  return {};
}

std::error_code make_directories(const std::string& path, mode_t mode) noexcept {
  if (path.empty()) return errno_code(ENOENT);
  auto make = [mode](const std::string& dir) -> std::error_code {
    if (::mkdir(dir.c_str(), mode) == 0) return {};
    const int err = errno;
    if (err != EEXIST) return errno_code(err);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return last_error();  // follows: like mkdir -p
    return S_ISDIR(st.st_mode) ? std::error_code() : errno_code(ENOTDIR);
  };
  std::error_code ec = make(path);
  if (ec != std::errc::no_such_file_or_directory) return ec;
  // A parent is missing: create the chain from the top.
  std::string::size_type pos = 0;
  while ((pos = path.find('/', pos + 1)) != std::string::npos) {
    if (ec = make(path.substr(0, pos)); ec) return ec;
  }
  return make(path);
}

std::error_code stat_path(const char* path, struct stat& st) noexcept {
  return ::stat(path, &st) == 0 ? std::error_code() : last_error();
}

std::error_code lstat_path(const char* path, struct stat& st) noexcept {
  return ::lstat(path, &st) == 0 ? std::error_code() : last_error();
}

std::error_code unlink_path(const char* path) noexcept {
  return ::unlink(path) == 0 ? std::error_code() : last_error();
}

std::error_code rename_path(const char* from, const char* to) noexcept {
  return ::rename(from, to) == 0 ? std::error_code() : last_error();
}

std::error_code rename_no_replace(const char* from, const char* to) noexcept {
#if defined(RENAME_NOREPLACE)
  if (::renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return {};
  const int err = errno;
  if (err != EINVAL && err != ENOSYS && err != ENOTSUP) return errno_code(err);
#endif
  // link() fails with EEXIST when `to` exists: the classic no-replace rename.
  if (::link(from, to) != 0) return last_error();
  if (::unlink(from) != 0) {
    const int err = errno;
    if (err != ENOENT) return errno_code(err);
  }
  return {};
}

file_identity file_identity::of(const struct stat& st) noexcept {
  return file_identity{st.st_dev, st.st_ino, st.st_size, to_ns(st.st_mtim)};
}

timespec now_realtime() noexcept {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return t;
}

anonymous_memory::anonymous_memory(std::size_t size) noexcept : size_(size) {
  if (size == 0) return;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    size_ = 0;
    failed_ = true;
    return;
  }
  data_ = static_cast<std::byte*>(p);
}

anonymous_memory::anonymous_memory(anonymous_memory&& other) noexcept
    : data_(other.data_), size_(other.size_), failed_(other.failed_) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.failed_ = false;
}

anonymous_memory& anonymous_memory::operator=(anonymous_memory&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = other.data_;
    size_ = other.size_;
    failed_ = other.failed_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.failed_ = false;
  }
  return *this;
}

anonymous_memory::~anonymous_memory() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

directory_reader::directory_reader(directory_reader&& other) noexcept : dir_(other.dir_) {
  other.dir_ = nullptr;
}

directory_reader& directory_reader::operator=(directory_reader&& other) noexcept {
  if (this != &other) {
    if (dir_ != nullptr) ::closedir(static_cast<DIR*>(dir_));
    dir_ = other.dir_;
    other.dir_ = nullptr;
  }
  return *this;
}

directory_reader::~directory_reader() {
  if (dir_ != nullptr) ::closedir(static_cast<DIR*>(dir_));
}

directory_reader directory_reader::open(const std::string& path, std::error_code& ec) noexcept {
  return open_at(AT_FDCWD, path.c_str(), ec);
}

directory_reader directory_reader::open_at(int dir_fd, const char* name,
                                           std::error_code& ec) noexcept {
  directory_reader reader;
  unique_fd fd = open_file_at(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, ec);
  if (!fd) return reader;
  DIR* dir = ::fdopendir(fd.get());
  if (dir == nullptr) {
    ec = last_error();
    return reader;
  }
  fd.release();  // owned by the DIR now
  reader.dir_ = dir;
  ec.clear();
  return reader;
}

int directory_reader::fd() const noexcept {
  return dir_ != nullptr ? ::dirfd(static_cast<DIR*>(dir_)) : -1;
}

bool directory_reader::next(entry& out, std::error_code& ec) noexcept {
  ec.clear();
  if (dir_ == nullptr) return false;
  for (;;) {
    errno = 0;
    const dirent* d = ::readdir(static_cast<DIR*>(dir_));
    if (d == nullptr) {
      if (errno != 0) ec = last_error();
      return false;
    }
    if (d->d_name[0] == '.' &&
        (d->d_name[1] == '\0' || (d->d_name[1] == '.' && d->d_name[2] == '\0'))) {
      continue;
    }
    out.name = d->d_name;
    out.type = d->d_type;
    return true;
  }
}

std::uint64_t random_u64() noexcept {
  struct state {
    pid_t pid = -1;
    std::mt19937_64 engine;
  };
  thread_local state s;
  const pid_t pid = ::getpid();
  if (s.pid != pid) {  // first use on this thread, or the first in a forked child
    std::uint64_t seed = 0;
    if (::getrandom(&seed, sizeof seed, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof seed)) {
      seed =
          static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
          (static_cast<std::uint64_t>(pid) << 32) ^
          std::hash<std::thread::id>{}(std::this_thread::get_id());
    }
    s.engine.seed(seed);
    s.pid = pid;
  }
  return s.engine();
}

}  // namespace cucore::detail::posix
