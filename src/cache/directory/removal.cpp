// The guarded removal every drop, eviction, clear and repair of the directory cache goes through.
#include <sys/stat.h>

#include <string>

#include "cache/directory/internal.hpp"

namespace cucore {
namespace posix = detail::posix;
using detail::directory::hooks;
using detail::directory::removal;
using detail::directory::unique_tmp_name;

// Guarded removal.
//
// A stat guard that re-stats and then unlinks leaves a window in which a peer can rename a fresh
// entry into place and lose it to the unlink. Instead the candidate is renamed aside into tmp/
// (atomic: exactly the file that was at the path moves), and the moved file is checked: the
// expected one (same device, inode, size and mtime) is unlinked; another (a peer replaced the
// entry after the snapshot) is renamed back unless an even newer entry has arrived meanwhile
// (rename without replace), in which case the one moved aside is the older and is dropped. With
// `keep_if_read`, the expected file is put back too if it was read after the snapshot (its atime
// moved): eviction must not pick an entry by a recency that is out of date. While a file is aside,
// a reader of that key sees a miss (never a wrong value). The outcome's delta is the change in
// bytes at the path relative to the snapshot, for the caller's running total; a removal a peer
// did first counts like our own, which is what keeps eviction from over-evicting after a lost
// race.
file_stream_program_cache::removal_outcome file_stream_program_cache::remove_guarded(
    const scan_entry& candidate, bool keep_if_read) {
  removal_outcome r = try_remove(candidate, keep_if_read);
  if (r.result == removal::failed) note_error("remove", candidate.path, r.error);
  return r;
}

file_stream_program_cache::removal_outcome file_stream_program_cache::try_remove(
    const scan_entry& candidate, bool keep_if_read) {
  const std::string& path = candidate.path;
  const std::string& root = root_str_;
  const std::string& tmp_dir = tmp_dir_;
  const posix::file_identity expected = posix::file_identity::of(candidate.st);
  const auto old_size = static_cast<std::int64_t>(expected.size);
  auto gone = [&](removal r) { return removal_outcome{r, -old_size, {}}; };
  auto now_holds = [&](std::int64_t size) {
    return removal_outcome{removal::replaced, size - old_size, {}};
  };
  auto failed = [&](std::error_code ec, std::int64_t delta = 0) {
    return removal_outcome{removal::failed, delta, ec};
  };
  if (const auto* h = hooks(); h != nullptr && h->before_remove) h->before_remove(path);
  if (S_ISDIR(candidate.st.st_mode)) return failed(posix::errno_code(EISDIR));  // never ours

  const std::string aside = unique_tmp_name(tmp_dir, "evict");
  std::error_code ec = posix::rename_path(path, aside);
  if (ec == std::errc::no_such_file_or_directory) {
    struct stat st {};
    if (posix::lstat_path(path, st)) return gone(removal::vanished);  // a peer removed it
    // The entry is there, so tmp/ is missing: recreate it and try once more.
    bool created = false;
    if (!posix::make_directories(root, dir_mode_) &&
        !posix::make_directory(tmp_dir, tmp_dir_mode_, created)) {
      ec = posix::rename_path(path, aside);
    }
  }
  if (ec) {
    // tmp/ is not usable (another filesystem, not writable by us): fall back to re-stat + unlink,
    // which leaves a window of a few microseconds between the two.
    struct stat st {};
    if (std::error_code sec = posix::lstat_path(path, st)) {
      return sec == std::errc::no_such_file_or_directory ? gone(removal::vanished) : failed(sec);
    }
    if (!(posix::file_identity::of(st) == expected)) return now_holds(st.st_size);
    ec = posix::unlink_path(path);
    if (!ec) return gone(removal::removed);
    return ec == std::errc::no_such_file_or_directory ? gone(removal::vanished) : failed(ec);
  }

  struct stat moved {};
  if (posix::lstat_path(aside, moved)) return gone(removal::vanished);  // tmp/ tampered with
  const bool same_file = posix::file_identity::of(moved) == expected;
  const bool read_since =
      keep_if_read && posix::to_ns(moved.st_atim) > posix::to_ns(candidate.st.st_atim);
  if (same_file && !read_since) {
    (void)posix::unlink_path(aside);
    return gone(removal::removed);
  }
  // A peer replaced the entry after the snapshot (or read it): put it back.
  ec = posix::rename_no_replace(aside, path);
  if (!ec) return now_holds(moved.st_size);
  (void)posix::unlink_path(aside);
  if (ec == std::errc::file_exists) {
    // An even newer entry arrived meanwhile; the one moved aside was older and is gone now.
    struct stat now {};
    if (posix::lstat_path(path, now)) return gone(removal::vanished);  // and a peer removed it
    return now_holds(now.st_size);
  }
  return failed(ec, -old_size);  // could not put it back: that entry is lost (a later miss)
}

}  // namespace cucore
