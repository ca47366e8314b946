// The guarded removal every drop, eviction, clear and repair of the directory cache goes through,
// and the repair of what is not an entry where an entry belongs (a directory, a FIFO, ...).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "cache/directory/internal.hpp"

namespace cucore {
namespace posix = detail::posix;
using detail::directory::hooks;
using detail::directory::removal;
using detail::directory::unique_tmp_name;

namespace detail::directory {
namespace {

constexpr int kMaxTreeDepth = 256;

void remove_tree_into(int parent_fd, const char* name, const std::string& shown, dev_t dev,
                      int depth, tree_removal& out) {
  auto fail = [&](std::error_code ec, const std::string& where) {
    if (!out.error) {
      out.error = ec;
      out.failed_at = where;
    }
  };
  if (depth >= kMaxTreeDepth) return fail(posix::errno_code(ENAMETOOLONG), shown);
  std::error_code ec;
  // O_NOFOLLOW | O_DIRECTORY: a symlink (or anything else) swapped in for the directory is refused.
  posix::directory_reader dir = posix::directory_reader::open_at(parent_fd, name, ec);
  if (!dir) {
    if (ec != std::errc::no_such_file_or_directory) fail(ec, shown);
    return;
  }
  struct stat st {};
  if (::fstat(dir.fd(), &st) != 0) return fail(posix::last_error(), shown);
  if (st.st_dev != dev) return fail(posix::errno_code(EXDEV), shown);  // a mount point: not ours
  // List first, then remove: each item is lstat'ed, and only directories on this file system
  // are entered; everything else (a symlink included) is unlinked itself.
  std::vector<std::pair<std::string, bool>> items;
  posix::directory_reader::entry e{};
  while (dir.next(e, ec)) {
    struct stat ist {};
    if (::fstatat(dir.fd(), e.name, &ist, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) fail(posix::last_error(), shown + "/" + e.name);
      continue;
    }
    items.emplace_back(e.name, S_ISDIR(ist.st_mode));
  }
  if (ec) fail(ec, shown);
  for (const auto& [item, is_dir] : items) {
    if (is_dir) {
      remove_tree_into(dir.fd(), item.c_str(), shown + "/" + item, dev, depth + 1, out);
    } else if (::unlinkat(dir.fd(), item.c_str(), 0) == 0) {
      ++out.removed;
    } else if (errno != ENOENT) {
      fail(posix::last_error(), shown + "/" + item);
    }
  }
  if (::unlinkat(parent_fd, name, AT_REMOVEDIR) == 0) {
    ++out.removed;
  } else if (errno != ENOENT) {
    fail(posix::last_error(), shown);  // a failure inside (ENOTEMPTY) was recorded first
  }
}

std::string describe(const tree_removal& t) {
  return t.failed_at + ": " + t.error.message();
}

}  // namespace

tree_removal remove_tree(int parent_fd, const std::string& name, const std::string& shown,
                         dev_t dev) {
  tree_removal out;
  remove_tree_into(parent_fd, name.c_str(), shown, dev, 0, out);
  return out;
}

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device file";
  return "a file";
}

}  // namespace detail::directory

using detail::directory::describe;
using detail::directory::kind_of;
using detail::directory::remove_tree;
using detail::directory::tree_removal;

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

// -----------------------------------------------------------------------------------------------
// Clearing what is not an entry.
//
// Only a directory needs more than the guarded removal: it is renamed aside into tmp/ (atomic, so
// the place is free at once and a peer's put can land), checked to be a directory still (a peer
// that cleared it first may have put a fresh entry there meanwhile, which goes back), and removed
// there with everything inside it. Where tmp/ will not take it (permissions: moving a directory
// to another parent needs write access to it; a mount point), it is removed in place, and when
// that fails too it is renamed beside itself (same parent: no access to it needed), which frees
// the key. What cannot be removed is named in the note with the command that removes it.

file_stream_program_cache::obstacle_outcome file_stream_program_cache::clear_obstacle(
    const scan_entry& candidate) {
  using outcome = obstacle_outcome;
  const std::string& path = candidate.path;
  const std::string what = kind_of(candidate.st.st_mode) + ", not an entry";
  if (!S_ISDIR(candidate.st.st_mode)) {
    const removal_outcome r = remove_guarded(candidate, false);
    if (r.result == removal::removed)
      return {outcome::removed, "removed " + path + " (" + what + ")"};
    if (r.result != removal::failed) return {outcome::vanished, {}};
    return {outcome::failed, "could not remove " + path + " (" + what + "): " + r.error.message() +
                                 "; remove it by hand: rm -f " + path};
  }
  if (const auto* h = hooks(); h != nullptr && h->before_remove) h->before_remove(path);
  const std::string parent = path.substr(0, path.rfind('/'));
  struct stat parent_st {};
  if (std::error_code ec = posix::lstat_path(parent, parent_st)) {
    return {outcome::failed, "could not remove " + path + " (" + what + "): " + ec.message()};
  }
  const dev_t dev = parent_st.st_dev;

  // 1. Aside into tmp/, then removed there.
  const std::string aside = unique_tmp_name(tmp_dir_, detail::directory::kAsidePrefix);
  std::error_code ec = posix::rename_path(path, aside);
  if (ec == std::errc::no_such_file_or_directory) {
    struct stat st {};
    if (posix::lstat_path(path, st)) return {outcome::vanished, {}};  // a peer cleared it
    std::error_code mk;  // the place is taken, so tmp/ is missing: recreate it
    if (ensure_directories(mk)) ec = posix::rename_path(path, aside);
  }
  if (!ec) {
    struct stat moved {};
    if (posix::lstat_path(aside, moved)) return {outcome::vanished, {}};
    if (!S_ISDIR(moved.st_mode)) {
      // A peer cleared the directory and stored an entry after our snapshot: put it back (unless
      // an even newer one has arrived, which makes this one the older).
      if (posix::rename_no_replace(aside, path)) (void)posix::unlink_path(aside);
      return {outcome::vanished, {}};
    }
    const tree_removal t = remove_tree(AT_FDCWD, aside, aside, dev);
    if (!t.error) {
      return {outcome::removed, "removed " + path + " (" + what + ", " + std::to_string(t.removed) +
                                    " items with what was inside)"};
    }
    return {outcome::moved_aside, "moved " + path + " (" + what + ") aside to " + aside +
                                      ", but could not remove all of it (" + describe(t) +
                                      "); remove it by hand: rm -rf " + aside};
  }

  // 2. tmp/ will not take it: remove it in place.
  const std::error_code rename_error = ec;
  const tree_removal t = remove_tree(AT_FDCWD, path, path, dev);
  if (!t.error) {
    return {outcome::removed, "removed " + path + " (" + what + ", " + std::to_string(t.removed) +
                                  " items with what was inside)"};
  }
  // 3. Beside itself, under a name no key has, so that the key works again.
  const std::string name = path.substr(parent.size() + 1);
  if (name.find('.') == std::string::npos) {
    const std::string beside = unique_tmp_name(parent, (name + ".aside").c_str());
    if (!posix::rename_no_replace(path, beside)) {
      return {outcome::moved_aside, "moved " + path + " (" + what + ") aside to " + beside +
                                        ": could not remove it (" + describe(t) +
                                        "); remove it by hand: rm -rf " + beside};
    }
  }
  return {outcome::failed, "could not remove " + path + " (" + what + "): " + describe(t) +
                               " (and could not move it aside: " + rename_error.message() +
                               "); until it is removed (rm -rf " + path +
                               ") its key is never cached"};
}

}  // namespace cucore
