#include "cache/key_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include "cache/posix_file.hpp"

namespace cucore::detail {

std::filesystem::path header_memo_file_beside(const std::filesystem::path& version_memo) {
  std::string name = version_memo.filename().string();
  const std::string_view suffix = "compiler-versions";
  if (name.ends_with(suffix)) {
    name.replace(name.size() - suffix.size(), suffix.size(), "header-digests");
  } else {
    name += ".header-digests";
  }
  // Only this user's (or root's) memo is read, writable by nobody else: a record decides which
  // files a key covers and what their contents are, and nothing checks it against the files
  // later, so one planted by anyone else would make this user's keys miss edits of its own
  // headers (and its manifests would carry the record on). Where others can write the directory
  // (a cache shared by a group), each user keeps a memo of its own, named by uid, so that users
  // do not replace each other's memos in turn.
  if (!only_this_user_writes(version_memo.parent_path())) {
    name += "." + std::to_string(::geteuid());
  }
  return version_memo.parent_path() / name;
}

bool only_this_user_writes(const std::filesystem::path& dir) noexcept {
  struct stat st {};
  const std::string path = dir.empty() ? std::string(".") : dir.string();
  if (::stat(path.c_str(), &st) != 0) return false;
  const uid_t euid = ::geteuid();
  return (st.st_uid == euid || st.st_uid == 0) && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

bool owned_privately(const struct stat& st) noexcept {
  return (st.st_uid == ::geteuid() || st.st_uid == 0) && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

std::optional<std::string> read_key_file(const std::filesystem::path& file, std::uint64_t max_bytes,
                                         const std::function<bool(const struct stat&)>& accept) {
  std::string data;
  if (posix::read_small_file(AT_FDCWD, file.c_str(), max_bytes, accept, data)) return std::nullopt;
  return data;
}

namespace {

constexpr std::string_view kTempMark = ".tmp-";
constexpr std::size_t kTempChars = 6;  // mkstemp's XXXXXX

bool all_of(std::string_view s, bool (*pred)(char)) {
  for (const char c : s) {
    if (!pred(c)) return false;
  }
  return true;
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f');
}

// Removes the temp files `matches` picks in the open directory `dir` that are older than
// kStaleTempNs (by mtime: a live writer's file is younger).
void sweep(const std::string& dir, bool (*matches)(std::string_view)) noexcept {
  std::error_code ec;
  posix::directory_reader listing = posix::directory_reader::open(dir, ec);
  if (!listing) return;
  const std::int64_t cutoff = posix::to_ns(posix::now_realtime()) - kStaleTempNs;
  posix::directory_reader::entry e{};
  while (listing.next(e, ec)) {
    if (!matches(e.name)) continue;
    struct stat st {};
    if (::fstatat(listing.fd(), e.name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode) || posix::to_ns(st.st_mtim) >= cutoff) continue;
    (void)::unlinkat(listing.fd(), e.name, 0);
  }
}

bool is_manifest_temp(std::string_view name) {
  return name.size() == 64 + kTempMark.size() + kTempChars &&
         name.substr(64, kTempMark.size()) == kTempMark && all_of(name.substr(0, 64), is_hex);
}

}  // namespace

bool is_key_temp(std::string_view name) {
  const auto mark = name.rfind(kTempMark);
  if (mark == std::string_view::npos || name.size() - mark - kTempMark.size() != kTempChars) {
    return false;
  }
  std::string_view base = name.substr(0, mark);
  if (base.ends_with("compiler-versions") || base.ends_with("header-digests")) return true;
  // header-digests.UID: a user's own digest memo in a shared cache.
  const auto dot = base.rfind('.');
  if (dot == std::string_view::npos || dot + 1 == base.size() ||
      !all_of(base.substr(dot + 1), is_digit)) {
    return is_manifest_temp(name);
  }
  base = base.substr(0, dot);
  return base.ends_with("header-digests") || is_manifest_temp(name);
}

void sweep_key_temps(const std::filesystem::path& dir) noexcept {
  try {
    // "/.": the directory itself may be a link (a cache root may be); nothing inside is followed.
    sweep((dir.empty() ? std::string(".") : dir.string()) + "/.", &is_key_temp);
  } catch (...) {
    // Best effort.
  }
}

void sweep_key_files(const std::filesystem::path& version_memo) noexcept {
  try {
    sweep_key_temps(version_memo.parent_path());
    // This user's manifests: MEMO.manifests/XX/ (other users' directories are private to them).
    const std::string manifests = header_memo_file_beside(version_memo).string() + ".manifests";
    std::error_code ec;
    posix::directory_reader shards = posix::directory_reader::open(manifests, ec);
    if (!shards) return;
    posix::directory_reader::entry e{};
    while (shards.next(e, ec)) {
      const std::string_view name = e.name;
      if (name.size() != 2 || !all_of(name, is_hex)) continue;
      sweep(manifests + "/" + e.name, &is_manifest_temp);
    }
  } catch (...) {
    // Best effort.
  }
}

}  // namespace cucore::detail
