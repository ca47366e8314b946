// A real, small, full-able file system for a test: a tmpfs of a few hundred KiB mounted in a
// private mount namespace of a forked child (testing::run_in_child), so that writes fail with
// ENOSPC as on a full disk. Needs no root where unprivileged user namespaces are allowed; where
// they are not (and the process lacks CAP_SYS_ADMIN), it says why and the test skips.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>

namespace cucore::testing {

namespace detail {
inline bool write_proc_file(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}
}  // namespace detail

// Mounts a tmpfs of `bytes` (mode 0700, owned by this process's user) at `dir`, an existing
// directory, in a new mount namespace of this process: call it only in a forked, single-threaded
// child. Returns "" on success, else why it could not (the test should skip).
inline std::string mount_small_tmpfs(const std::filesystem::path& dir, std::size_t bytes) {
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWNS) != 0) {
    // Without CAP_SYS_ADMIN: a user namespace of our own, in which we may mount a tmpfs.
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      return std::string("no private mount namespace (unshare: ") + std::strerror(errno) +
             "): unprivileged user namespaces are off here";
    }
    if (!detail::write_proc_file("/proc/self/setgroups", "deny") ||
        !detail::write_proc_file("/proc/self/uid_map",
                                 std::to_string(uid) + " " + std::to_string(uid) + " 1") ||
        !detail::write_proc_file("/proc/self/gid_map",
                                 std::to_string(gid) + " " + std::to_string(gid) + " 1")) {
      return std::string("cannot map the user into its namespace: ") + std::strerror(errno);
    }
  }
  // Nothing mounted here may reach the parent's namespace.
  if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return std::string("cannot make the mounts private: ") + std::strerror(errno);
  }
  const std::string options = "size=" + std::to_string(bytes) +
                              ",mode=0700,uid=" + std::to_string(uid) +
                              ",gid=" + std::to_string(gid);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    return std::string("cannot mount a tmpfs: ") + std::strerror(errno);
  }
  return "";
}

}  // namespace cucore::testing
