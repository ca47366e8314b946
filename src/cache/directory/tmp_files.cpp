// Temp files of the directory cache: the names writes and guarded removals use in tmp/, and the
// sweep of temp files that will never be renamed into place (their writer died, or they are stale).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>

#include "cache/directory/internal.hpp"

namespace cucore {
namespace detail::directory {

namespace {

constexpr std::int64_t kStaleTmpAgeNs = std::int64_t{3600} * 1'000'000'000;  // an hour

// ---------------------------------------------------------------------------------------------
// Names

std::string hex64(std::uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = kHex[v & 0xf];
  return out;
}

// Identifies this boot of this host and this process's pid namespace: processes with the same
// tag see each other's pids, so kill(pid, 0) tells whether the writer of a temp file is alive.
// 0 (never matched) where /proc does not say. Recomputed in a forked child (which may be in a new
// pid namespace after unshare).
std::uint64_t compute_liveness_tag() {
  std::error_code ec;
  posix::unique_fd fd = posix::open_file("/proc/sys/kernel/random/boot_id", O_RDONLY, 0, ec);
  std::array<std::byte, 64> boot_id{};
  std::size_t got = 0;
  struct stat ns {};
  if (!fd || posix::read_fully(fd.get(), boot_id, got) || got < 32 ||
      ::stat("/proc/self/ns/pid", &ns) != 0) {
    return 0;
  }
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  auto mix = [&h](const void* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      h = (h ^ static_cast<const unsigned char*>(p)[i]) * 0x100000001b3ull;
    }
  };
  mix(boot_id.data(), got);
  mix(&ns.st_dev, sizeof ns.st_dev);
  mix(&ns.st_ino, sizeof ns.st_ino);
  return h | 1;
}

std::uint64_t liveness_tag() {
  static std::atomic<std::int64_t> cached_pid{-1};
  static std::atomic<std::uint64_t> cached_tag{0};
  const pid_t pid = ::getpid();
  if (cached_pid.load(std::memory_order_acquire) != pid) {
    cached_tag.store(compute_liveness_tag(), std::memory_order_relaxed);
    cached_pid.store(pid, std::memory_order_release);
  }
  return cached_tag.load(std::memory_order_relaxed);
}

// A temp file's age is that of its last write (mtime). A file moved aside by a guarded removal
// keeps its mtime, and may look stale to a peer's sweep: harmless, since the only one that matters
// (a fresh entry a peer wrote, to be put back) is young by construction.
std::int64_t age_ns(const struct stat& st, std::int64_t now_ns) noexcept {
  return now_ns - posix::to_ns(st.st_mtim);
}

}  // namespace

// A name in tmp/ no other process or thread is using: "<prefix>-<tag>-<pid>-<random>".
std::string unique_tmp_name(const std::string& tmp_dir, const char* prefix) {
  return tmp_dir + "/" + prefix + "-" + hex64(liveness_tag()) + "-" + std::to_string(::getpid()) +
         "-" + hex64(posix::random_u64());
}

// Whether a temp file was left by a writer that has died (killed, crashed) on this host: its name
// carries our liveness tag and the pid of a process that no longer exists. Such a file will never
// be renamed into place; it can go at once instead of counting against the cap for an hour.
bool orphaned_tmp_file(std::string_view name) {
  const std::uint64_t tag = liveness_tag();
  if (tag == 0) return false;
  const auto first = name.find('-');
  if (first == std::string_view::npos) return false;
  name.remove_prefix(first + 1);
  if (name.size() < 18 || name.substr(0, 16) != hex64(tag) || name[16] != '-') return false;
  name.remove_prefix(17);
  std::int64_t pid = 0;
  std::size_t i = 0;
  for (; i < name.size() && i < 10 && name[i] >= '0' && name[i] <= '9'; ++i) {
    pid = pid * 10 + (name[i] - '0');
  }
  if (i == 0 || i >= name.size() || name[i] != '-' || pid <= 0 || pid > INT32_MAX ||
      pid == ::getpid()) {
    return false;
  }
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace detail::directory

namespace posix = detail::posix;
using detail::directory::age_ns;
using detail::directory::kStaleTmpAgeNs;
using detail::directory::orphaned_tmp_file;
using detail::directory::walk_tmp;

void file_stream_program_cache::sweep_stale_tmp() {
  const std::int64_t now_ns = posix::to_ns(posix::now_realtime());
  walk_tmp(tmp_dir_, [&](int dir_fd, const char* name, const struct stat& st) {
    if (S_ISDIR(st.st_mode)) return;
    if (age_ns(st, now_ns) > kStaleTmpAgeNs || orphaned_tmp_file(name)) {
      (void)::unlinkat(dir_fd, name, 0);  // relative to the directory listed: nothing followed
    }
  });
}

}  // namespace cucore
