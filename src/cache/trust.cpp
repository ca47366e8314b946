#include "cache/trust.hpp"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <vector>

#include "cucore/error.hpp"

namespace cucore::detail::trust {
namespace {

// "uid 1000 (alice)": the id, and its name where the system knows one. `lookup` is getpwuid_r or
// getgrgid_r, `name` the entry's name field.
template <class Id, class Entry>
std::string account_name(const char* kind, Id id,
                         int (*lookup)(Id, Entry*, char*, std::size_t, Entry**),
                         char* Entry::*name) {
  std::string out = std::string(kind) + " " + std::to_string(id);
  std::vector<char> buf(16384);
  Entry entry{};
  Entry* found = nullptr;
  if (lookup(id, &entry, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    out += std::string(" (") + found->*name + ")";
  }
  return out;
}

std::string user_name(uid_t uid) {
  return account_name("uid", uid, &::getpwuid_r, &passwd::pw_name);
}

std::string group_name(gid_t gid) {
  return account_name("gid", gid, &::getgrgid_r, &group::gr_name);
}

std::string octal(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

bool trusted_owner(uid_t uid) noexcept {
  return uid == ::geteuid() || uid == 0;
}

}  // namespace

bool acceptable(const struct stat& st, cache_access access, uid_t euid) noexcept {
  if (S_ISLNK(st.st_mode)) return false;  // a link's mode says nothing; never trusted here
  if (access == cache_access::shared) return (st.st_mode & S_IWOTH) == 0;
  return (st.st_uid == euid || st.st_uid == 0) && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

bool acceptable(const struct stat& st, cache_access access) noexcept {
  return acceptable(st, access, ::geteuid());
}

std::string problem(const struct stat& st, cache_access access, std::string_view what,
                    const std::string& path) {
  if (acceptable(st, access)) return {};
  const std::string head = std::string(what) + " " + path + " (mode " + octal(st.st_mode) +
                           ", owner " + user_name(st.st_uid) + ", group " + group_name(st.st_gid) +
                           ")";
  const std::string consequence =
      ", so that user could plant cache entries (code) that this process would load and run";
  if (S_ISLNK(st.st_mode)) {
    return head + " is a symbolic link; cucore does not follow links inside a cache. Remove it";
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    return head +
           " is world-writable: every user could plant cache entries (code) that this process "
           "would load and run, even in a shared cache. Remove world write access (chmod o-w " +
           path + "), or use a cache of your own";
  }
  // Private mode from here on.
  if (!trusted_owner(st.st_uid)) {
    return head + " belongs to another user" + consequence +
           ". Use a cache of your own (another --cache, or CUCORE_CACHE_DIR), have it chown'ed "
           "to you, or, if you trust its owner and group, " +
           std::string(kHowToShare);
  }
  return head + " is group-writable: members of " + group_name(st.st_gid) +
         " could plant cache entries (code) that this process would load and run. Remove group "
         "write access (chmod g-w " +
         path + "), or, if you trust that group, " + std::string(kHowToShare);
}

void require_acceptable(const struct stat& st, cache_access access, std::string_view what,
                        const std::string& path) {
  if (std::string why = problem(st, access, what, path); !why.empty()) {
    throw invalid_argument(why);
  }
}

create_modes modes_for(cache_access access, std::optional<unsigned> umask) {
  if (umask && *umask > 0777) {
    throw invalid_argument("cache umask " + octal(static_cast<mode_t>(*umask)) +
                           " is not a permission mask: use an octal value from 000 to 777 "
                           "such as 022 (private) or 002 (group-shared)");
  }
  if (access == cache_access::shared) {
    const mode_t mask = static_cast<mode_t>(umask.value_or(002));
    if ((mask & S_IWOTH) == 0) {
      throw invalid_argument("cache umask " + octal(mask) +
                             " would make a shared cache world-writable, which every reader "
                             "refuses: use one that removes world write (002, 007, 027)");
    }
    const mode_t dir = 0777 & ~mask;
    return {dir, dir, static_cast<mode_t>(0666 & ~mask), true};
  }
  if (!umask) return {0755, 0700, 0644, false};
  const mode_t mask = static_cast<mode_t>(*umask) | 022;
  return {static_cast<mode_t>(0777 & ~mask), static_cast<mode_t>(0700 & ~mask),
          static_cast<mode_t>(0666 & ~mask), true};
}

std::error_code set_created_dir_mode(const std::string& path, mode_t mode,
                                     const create_modes& modes) noexcept {
  if (!modes.exact) return {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::error_code(errno, std::system_category());
  std::error_code ec;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || ::fchmod(fd, (st.st_mode & S_ISGID) | mode) != 0) {
    ec = std::error_code(errno, std::system_category());
  }
  ::close(fd);
  return ec;
}

std::error_code set_created_file_mode(int fd, const create_modes& modes) noexcept {
  if (!modes.exact) return {};
  if (::fchmod(fd, modes.file) != 0) return std::error_code(errno, std::system_category());
  return {};
}

}  // namespace cucore::detail::trust
