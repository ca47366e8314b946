// Small POSIX file helpers shared by the persistent cache backends: an owning file descriptor,
// loops that survive EINTR and short transfers, durable directory operations, and a file identity
// for stat guards.
//
// Nothing here throws for an I/O failure: functions return a std::error_code (system_category,
// the errno value) so that callers decide whether a failure is a miss, a warning or an error.
// Every descriptor is opened with O_CLOEXEC so that it never leaks into a child process.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <span>
#include <string>
#include <system_error>

namespace cucore::detail::posix {

// std::error_code for an errno value.
inline std::error_code errno_code(int value) noexcept {
  return std::error_code(value, std::system_category());
}
// The current errno as an error_code.
std::error_code last_error() noexcept;

// An owning file descriptor. Move-only; closes on destruction (errors from that close are
// ignored: use close() where they matter, e.g. after writing a file on NFS).
class unique_fd {
 public:
  unique_fd() noexcept = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept : fd_(other.release()) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes the current descriptor (if any) and owns `fd`.
  void reset(int fd = -1) noexcept;
  // Closes now and reports the error close() returned (EIO, ENOSPC, EDQUOT on some filesystems).
  // The descriptor is released either way: close() is never retried (POSIX leaves the state of
  // the descriptor unspecified after EINTR and Linux has already freed it).
  std::error_code close() noexcept;

 private:
  int fd_ = -1;
};

// open(2)/openat(2) with O_CLOEXEC added, retried on EINTR. On failure returns an empty unique_fd
// and sets `ec`.
unique_fd open_file(const char* path, int flags, mode_t mode, std::error_code& ec) noexcept;
unique_fd open_file_at(int dir_fd, const char* name, int flags, mode_t mode,
                       std::error_code& ec) noexcept;
inline unique_fd open_file(const std::string& path, int flags, mode_t mode,
                           std::error_code& ec) noexcept {
  return open_file(path.c_str(), flags, mode, ec);
}

// Reads until `buffer` is full or end of file, from the current offset; `got` is how many bytes
// were read.
std::error_code read_fully(int fd, std::span<std::byte> buffer, std::size_t& got) noexcept;
// The same with pread(2), from `offset`; the descriptor's offset is unchanged.
std::error_code pread_fully(int fd, std::span<std::byte> buffer, std::uint64_t offset,
                            std::size_t& got) noexcept;
// Reads a small file that a cache keeps for itself (a memo, a manifest), where anyone who can
// write the directory could have put anything: a FIFO (whose open would block forever), a link to
// /dev/zero (endless), a huge file. `name` is opened relative to `dir_fd` (AT_FDCWD: a path)
// without following a link at its last component (ELOOP) and without blocking (O_NONBLOCK, which
// changes nothing for a regular file), then fstat'ed; before a byte is read it must be a regular
// file (else EINVAL) of at most `max_bytes` (else EFBIG) that `accept` takes (else EACCES: the
// owner and mode checks of the trust rules). It is then read in bounded chunks, to at most
// `max_bytes` (a file that grew past it meanwhile: EFBIG). `st`, when given, is the fstat.
std::error_code read_small_file(int dir_fd, const char* name, std::uint64_t max_bytes,
                                const std::function<bool(const struct stat&)>& accept,
                                std::string& out, struct stat* st = nullptr);

// Writes all of `data`, resuming after short writes and EINTR.
std::error_code write_fully(int fd, std::span<const std::byte> data) noexcept;

// fdatasync(2) (data_only: metadata that is not needed to read the data back, such as the
// modification time, may be left for later) or fsync(2). Retried on EINTR.
std::error_code sync_file(int fd, bool data_only) noexcept;
// Makes a directory's entries (a rename or unlink into it) durable: opens it and fsyncs it.
std::error_code sync_directory(const char* path) noexcept;
inline std::error_code sync_directory(const std::string& path) noexcept {
  return sync_directory(path.c_str());
}

// mkdir(2) that succeeds when `path` is already a directory (not a symlink to one: that is
// ENOTDIR). `created` says whether this call made it. The mode is subject to the umask.
std::error_code make_directory(const std::string& path, mode_t mode, bool& created) noexcept;
// mkdir -p: creates the missing components of `path`, each with `mode` (subject to the umask).
// Existing components may be symlinks to directories (like mkdir -p).
std::error_code make_directories(const std::string& path, mode_t mode) noexcept;

// stat(2) / lstat(2) wrappers.
std::error_code stat_path(const char* path, struct stat& st) noexcept;
std::error_code lstat_path(const char* path, struct stat& st) noexcept;
inline std::error_code lstat_path(const std::string& path, struct stat& st) noexcept {
  return lstat_path(path.c_str(), st);
}

// unlink(2); ENOENT is reported like any other error.
std::error_code unlink_path(const char* path) noexcept;
inline std::error_code unlink_path(const std::string& path) noexcept {
  return unlink_path(path.c_str());
}

// rename(2): atomically replaces `to` (never follows a symlink at either end).
std::error_code rename_path(const char* from, const char* to) noexcept;
inline std::error_code rename_path(const std::string& from, const std::string& to) noexcept {
  return rename_path(from.c_str(), to.c_str());
}
// Renames `from` to `to` only if `to` does not exist (EEXIST otherwise): renameat2(2) with
// RENAME_NOREPLACE, or link(2) + unlink(2) where the filesystem does not support it (NFS, old
// kernels). Both are atomic with respect to `to`.
std::error_code rename_no_replace(const char* from, const char* to) noexcept;
inline std::error_code rename_no_replace(const std::string& from, const std::string& to) noexcept {
  return rename_no_replace(from.c_str(), to.c_str());
}

// What a stat guard compares: the same (device, inode) with the same size and modification time
// is the same file, unmodified. A file replaced by rename(2) has another inode; one rewritten in
// place has another mtime.
struct file_identity {
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = 0;
  std::int64_t mtime_ns = 0;

  static file_identity of(const struct stat& st) noexcept;
  friend bool operator==(const file_identity&, const file_identity&) = default;
};

// Nanoseconds since the epoch of a timespec, and the current CLOCK_REALTIME.
inline std::int64_t to_ns(const timespec& t) noexcept {
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}
timespec now_realtime() noexcept;

// Anonymous, private, lazily-backed memory (mmap MAP_ANONYMOUS | MAP_NORESERVE): pages that are
// never touched cost no memory. Lets a reader present a large file's header as a span of the
// file's full length without reading (or allocating) the rest.
class anonymous_memory {
 public:
  anonymous_memory() noexcept = default;
  // Maps `size` bytes; check valid() (fails when the address space is exhausted).
  explicit anonymous_memory(std::size_t size) noexcept;
  anonymous_memory(anonymous_memory&& other) noexcept;
  anonymous_memory& operator=(anonymous_memory&& other) noexcept;
  anonymous_memory(const anonymous_memory&) = delete;
  anonymous_memory& operator=(const anonymous_memory&) = delete;
  ~anonymous_memory();

  bool valid() const noexcept { return !failed_; }
  std::span<std::byte> bytes() const noexcept { return {data_, size_}; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool failed_ = false;
};

// A directory being listed (opendir(3) over a descriptor opened with O_DIRECTORY | O_NOFOLLOW, so
// a symlink where a directory is expected is refused with ELOOP/ENOTDIR instead of followed).
// "." and ".." are skipped.
class directory_reader {
 public:
  struct entry {
    const char* name;    // valid until the next call to next()
    unsigned char type;  // d_type: DT_REG, DT_DIR, DT_LNK, ... or DT_UNKNOWN (then lstat it)
  };
  directory_reader() noexcept = default;
  directory_reader(directory_reader&& other) noexcept;
  directory_reader& operator=(directory_reader&& other) noexcept;
  directory_reader(const directory_reader&) = delete;
  directory_reader& operator=(const directory_reader&) = delete;
  ~directory_reader();

  // Opens `path` for listing.
  static directory_reader open(const std::string& path, std::error_code& ec) noexcept;
  // Opens `name` in the directory `dir_fd` for listing (a symlink there is refused, not followed).
  static directory_reader open_at(int dir_fd, const char* name, std::error_code& ec) noexcept;
  explicit operator bool() const noexcept { return dir_ != nullptr; }
  // The descriptor of the open directory (for fstatat / unlinkat relative to it).
  int fd() const noexcept;
  // The next entry, or false at the end (or on a read error, reported in `ec`).
  bool next(entry& out, std::error_code& ec) noexcept;

 private:
  void* dir_ = nullptr;  // DIR*
};

// A random 64-bit value for unique file names: per-thread generator seeded from getrandom(2),
// reseeded in a forked child (the pid is part of the seed check).
std::uint64_t random_u64() noexcept;

}  // namespace cucore::detail::posix
