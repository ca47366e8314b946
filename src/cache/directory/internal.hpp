// The directory cache's parts (file_stream_program_cache, include/cucore/cache/file_stream.hpp),
// shared by the files of src/cache/directory/:
//   cache.cpp        the object: construction and the trust checks, claims, statistics, errors
//   entries.cpp      get, put, erase: reading and writing one entry
//   removal.cpp      the guarded removal every drop, eviction and repair goes through
//   maintenance.cpp  scans: the size estimate, eviction, size, clear, list, verify, trim
//   tmp_files.cpp    temp-file names and hygiene: liveness tags, orphaned and stale temp files
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "cache/posix_file.hpp"
#include "common/sha256.hpp"
#include "cucore/cache/file_stream.hpp"

namespace cucore {
namespace detail::directory {
namespace posix = detail::posix;

// The test hooks in force (nullptr outside tests).
const file_stream_test_hooks* hooks() noexcept;

// ---------------------------------------------------------------------------------------------
// Temp files (tmp_files.cpp)

// A name in tmp/ no other process or thread is using: "<prefix>-<tag>-<pid>-<random>".
std::string unique_tmp_name(const std::string& tmp_dir, const char* prefix);
// Whether a temp file was left by a writer that has died (killed, crashed) on this host: its name
// carries our liveness tag and the pid of a process that no longer exists. Such a file will never
// be renamed into place; it can go at once instead of counting against the cap for an hour.
bool orphaned_tmp_file(std::string_view name);

// ---------------------------------------------------------------------------------------------
// Directory walking. Nothing is followed through a symlink: directories are opened O_NOFOLLOW and
// every item is lstat'ed (fstatat AT_SYMLINK_NOFOLLOW).

struct walk_item {
  std::string path;
  struct stat st;
  bool in_shard;           // entries/<shard>/<name>; false: a stray item at entries/<name>
  std::string_view shard;  // valid during the callback
  std::string_view name;
};

// Calls f(fd, name, stat) for each item of the directory `path` (fd: the open directory; stat: the
// item's own, not a link's target), skipping items gone before they were stat'ed; nothing when the
// directory cannot be opened.
template <class F>
inline void each_item(const std::string& path, F&& f) {
  std::error_code ec;
  posix::directory_reader dir = posix::directory_reader::open(path, ec);
  if (!dir) return;
  posix::directory_reader::entry e{};
  while (dir.next(e, ec)) {
    struct stat st {};
    if (::fstatat(dir.fd(), e.name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    f(dir.fd(), e.name, st);
  }
}

template <class F>
inline void walk_entries(const std::string& entries_dir, F&& f) {
  // Collect the top level first: callbacks may remove items (readdir tolerates that, but the
  // shard readers are simpler one at a time).
  std::vector<std::pair<std::string, struct stat>> items;
  each_item(entries_dir,
            [&](int, const char* name, const struct stat& st) { items.emplace_back(name, st); });
  for (auto& item : items) {
    // Named, not a structured binding: clang 14 does not let a lambda capture a binding.
    const std::string& name = item.first;
    const struct stat& st = item.second;
    std::string path = entries_dir + "/" + name;
    if (!S_ISDIR(st.st_mode)) {
      f(walk_item{std::move(path), st, false, {}, name});
      continue;
    }
    each_item(path, [&](int, const char* entry, const struct stat& est) {
      f(walk_item{path + "/" + entry, est, true, name, entry});
    });
  }
}

// Calls f(name, stat) for each item of tmp/.
template <class F>
inline void walk_tmp(const std::string& tmp_dir, F&& f) {
  each_item(tmp_dir, f);
}

// What a guarded removal did (removal.cpp).
enum class removal {
  removed,   // the snapshot's file was removed
  vanished,  // a peer removed it first
  replaced,  // a peer replaced it after the snapshot: the newer file is left in place
  failed,    // could not remove it (permissions, I/O), or could not put a replacement back
};

// What remove_tree did.
struct tree_removal {
  std::error_code error;    // the first failure; empty when everything went
  std::string failed_at;    // where it happened
  std::size_t removed = 0;  // items removed (the directory itself included)
};

// Removes the directory `name` (relative to `parent_fd`, or a path with AT_FDCWD) and everything
// in it. Never follows a symbolic link (a link inside is removed, not its target), never enters
// another file system than `dev` (a mount point stays, and fails the removal), goes no deeper than
// 256 levels. Best effort: what cannot be removed stays. `shown` is the directory's path for
// messages.
tree_removal remove_tree(int parent_fd, const std::string& name, const std::string& shown,
                         dev_t dev);

// What an item that is not an entry is, for messages: "a directory", "a symbolic link", ...
std::string kind_of(mode_t mode);

// The prefix of the names in tmp/ of directories a repair moved aside (tmp_files.cpp leaves them
// to verify(), which retries their removal).
inline constexpr const char* kAsidePrefix = "aside";

}  // namespace detail::directory

struct file_stream_program_cache::scan_entry {
  std::string path;
  struct stat st;  // lstat at scan time: the identity the guarded removal checks
};

struct file_stream_program_cache::scan_result {
  std::vector<scan_entry> entries;  // regular files under entries/*/
  std::uint64_t entry_bytes = 0;
  std::uint64_t tmp_bytes = 0;
};

struct file_stream_program_cache::removal_outcome {
  detail::directory::removal result = detail::directory::removal::failed;
  // The change in bytes at the path relative to the snapshot, for the caller's running total.
  std::int64_t delta = 0;
  std::error_code error;  // for `failed`
};

struct file_stream_program_cache::obstacle_outcome {
  enum kind {
    removed,      // gone
    moved_aside,  // out of the way (the key works again) but not removed: `note` says where
    vanished,     // a peer removed or replaced it first
    failed,       // still in the way: `note` says why and what to do
  } result = failed;
  std::string note;  // one line for people (empty for `vanished`)
};

}  // namespace cucore
