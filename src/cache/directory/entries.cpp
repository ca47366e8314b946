// Reading and writing one entry of the directory cache: get, put, erase.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/claim_file.hpp"
#include "cache/directory/internal.hpp"
#include "cache/entry_format.hpp"
#include "cache/trust.hpp"
#include "cucore/log.hpp"

namespace cucore {
namespace posix = detail::posix;
using detail::directory::hooks;
using detail::directory::removal;
using detail::directory::unique_tmp_name;

namespace {

// Reads recorded within this long of the last recorded one are not recorded again.
constexpr std::int64_t kTouchGranularityNs = 1'000'000'000;

}  // namespace

// -----------------------------------------------------------------------------------------------
// get

std::optional<object_code> file_stream_program_cache::get(cache_key_ref key) {
  check_open();
  const std::string path = entry_path(key);
  auto miss = [&] {
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  };

  std::error_code ec;
  // O_NONBLOCK: a FIFO planted at the path must not block the open; it changes nothing for a
  // regular file. O_NOFOLLOW: a symlink there fails with ELOOP instead of being followed.
  posix::unique_fd fd =
      posix::open_file(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0, ec);
  if (!fd) {
    if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory) {
      return miss();
    }
    if (ec == std::errc::too_many_symbolic_link_levels || ec == std::errc::too_many_links) {
      struct stat st {};
      if (!posix::lstat_path(path, st) && S_ISLNK(st.st_mode)) {
        log(log_level::warning, "program cache: " + path +
                                    " is a symbolic link, not an entry; not following it" +
                                    (options_.read_only ? "" : ", removing it"));
        if (!options_.read_only && remove_guarded({path, st}, false).result == removal::removed) {
          stats_.corrupt_dropped.fetch_add(1, std::memory_order_relaxed);
        }
      }
      return miss();
    }
    note_error("open", path, ec);
    return miss();
  }

  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    note_error("fstat", path, posix::last_error());
    return miss();
  }
  // Counted as dropped only when it was (a peer may have removed or replaced it first).
  auto drop = [&](std::string_view why) {
    log(log_level::warning,
        "program cache: " + std::string(options_.read_only ? "ignoring" : "dropping") +
            " damaged entry " + path + " (" + std::string(why) + ")");
    if (!options_.read_only && remove_guarded({path, st}, false).result == removal::removed) {
      stats_.corrupt_dropped.fetch_add(1, std::memory_order_relaxed);
    }
  };
  if (S_ISDIR(st.st_mode)) {
    // Not ours, and perhaps large: a read does not remove it. The put that follows this miss
    // clears it (see put), and verify() does.
    stats_.errors.fetch_add(1, std::memory_order_relaxed);
    warn_obstacle(path);
    return miss();
  }
  if (!S_ISREG(st.st_mode)) {
    drop("not a regular file");
    return miss();
  }
  // Trust: an entry another user planted (or one anybody else could rewrite) is not loaded. It
  // is left in place: a put of the key replaces it, and verify() reports and removes it.
  if (!detail::trust::acceptable(st, options_.access, static_cast<uid_t>(euid_))) {
    stats_.errors.fetch_add(1, std::memory_order_relaxed);
    log(log_level::warning, "program cache: ignoring " +
                                detail::trust::problem(st, options_.access, "entry file", path) +
                                "; a miss");
    return miss();
  }

  // Not zero-filled: the read overwrites it, and only the bytes read are decoded.
  std::optional<detail::uninitialized_bytes> data;
  try {
    data.emplace(static_cast<std::size_t>(st.st_size));
  } catch (const std::bad_alloc&) {
    note_error("allocate memory to read", path, std::make_error_code(std::errc::not_enough_memory));
    return miss();
  }
  std::size_t got = 0;
  if ((ec = posix::read_fully(fd.get(), {data->data, data->size}, got))) {
    note_error("read", path, ec);
    return miss();
  }
  if (const auto* h = hooks(); h != nullptr && h->after_read) h->after_read(path);

  // `got` is short only if someone truncated the file in place: then it fails to decode.
  detail::decoded_entry decoded = detail::decode_entry(std::move(*data), got, key.bytes());
  if (decoded.status != detail::entry_status::ok) {
    drop(detail::to_string(decoded.status));
    return miss();
  }

  // Record the read on the descriptor that was read: the same file, whatever a peer has renamed
  // over the path since. An explicit timestamp (not UTIME_NOW, which is only as fine as the
  // kernel's coarse clock) keeps reads in order; it needs ownership, so fall back to UTIME_NOW
  // (write permission suffices) for entries of other users. Best effort.
  const timespec now = posix::now_realtime();
  const std::int64_t now_ns = posix::to_ns(now);
  const std::int64_t atime_ns = posix::to_ns(st.st_atim);
  const bool recent = atime_ns > posix::to_ns(st.st_mtim) && atime_ns <= now_ns &&
                      now_ns - atime_ns < kTouchGranularityNs;
  if (!recent && !options_.read_only) {
    timespec times[2] = {now, {0, UTIME_OMIT}};
    if (::futimens(fd.get(), times) != 0 && errno == EPERM) {
      times[0] = {0, UTIME_NOW};
      (void)::futimens(fd.get(), times);
    }
  }
  stats_.hits.fetch_add(1, std::memory_order_relaxed);
  return std::move(decoded.code);
}

// -----------------------------------------------------------------------------------------------
// put

void file_stream_program_cache::put(cache_key_ref key, const object_code& code) {
  check_writable("store into");
  std::string shard_dir;
  const std::string path = entry_path(key, &shard_dir);
  const std::vector<std::byte> bytes = detail::encode_entry(key.bytes(), code);
  // A put that stores nothing marks the claims file: a waiter that takes this key's claim over
  // finds no entry, and should compile beside the others rather than after them (see
  // claim_abandonments).
  auto mark_claims = [&] {
    detail::claim_file(root_str_ + "/claims", file_mode_, exact_modes_).mark_abandoned();
  };
  auto put_failed = [&](const std::string& what, const std::string& where, std::error_code e,
                        const std::string& hint = {}) {
    mark_claims();
    write_failed(what, where, e, hint);
  };
  if (options_.max_size_bytes && bytes.size() > *options_.max_size_bytes) {
    log(log_level::debug, "program cache: not storing " + path + ": its " +
                              std::to_string(bytes.size()) + " bytes exceed max_size_bytes");
    mark_claims();
    return;
  }

  // 1. A new file in tmp/, private to this write.
  std::string tmp_path;
  posix::unique_fd fd;
  std::error_code ec;
  for (int attempt = 0;; ++attempt) {
    tmp_path = unique_tmp_name(tmp_dir_, "entry");
    fd = posix::open_file(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, file_mode_, ec);
    if (fd) {
      // Shared mode (or a configured umask): the group's modes, whatever the process umask.
      if (exact_modes_) (void)::fchmod(fd.get(), file_mode_);
      break;
    }
    if (attempt < 4 && ec == std::errc::file_exists) continue;
    if (attempt < 4 && ec == std::errc::no_such_file_or_directory) {
      std::error_code mk;  // the root or tmp/ was removed: recreate them
      if (ensure_directories(mk)) continue;
      ec = mk;
    }
    put_failed("create a temporary file in", tmp_dir_, ec);
    return;
  }
  struct tmp_guard {  // removes the temp file on every path that does not rename it into place
    std::string* path;
    ~tmp_guard() {
      if (!path->empty()) (void)posix::unlink_path(*path);
    }
  } guard{&tmp_path};

  // 2. Write, sync, close (close reports deferred write errors on some filesystems). The access
  // time, which orders eviction, is set to the precise time of the write: the kernel's own
  // creation time comes from a coarse clock that ties entries written within a few ms.
  if ((ec = posix::write_fully(fd.get(), bytes))) return put_failed("write", tmp_path, ec);
  const timespec times[2] = {posix::now_realtime(), {0, UTIME_OMIT}};
  (void)::futimens(fd.get(), times);
  if (options_.fsync && (ec = posix::sync_file(fd.get(), /*data_only=*/true))) {
    return put_failed("fsync", tmp_path, ec);
  }
  if ((ec = fd.close())) return put_failed("close", tmp_path, ec);

  if (const auto* h = hooks(); h != nullptr && h->before_commit) h->before_commit(tmp_path);

  // 3. Rename into place; recreate a shard directory (or entries/) a peer or a person removed.
  std::uint64_t old_size = 0;
  if (options_.max_size_bytes) {
    struct stat st {};
    if (!posix::lstat_path(path, st) && S_ISREG(st.st_mode))
      old_size = static_cast<std::uint64_t>(st.st_size);
  }
  for (int attempt = 0;; ++attempt) {
    ec = posix::rename_path(tmp_path, path);
    if (!ec) break;
    if (attempt < 4 && ec == std::errc::no_such_file_or_directory) {
      bool created = false;
      std::error_code mk = posix::make_directory(shard_dir, dir_mode_, created);
      if (mk == std::errc::no_such_file_or_directory && ensure_directories(mk)) {
        mk = posix::make_directory(shard_dir, dir_mode_, created);
      }
      if (!mk) {
        if (created && exact_modes_) {
          (void)detail::trust::set_created_dir_mode(
              shard_dir, dir_mode_, {dir_mode_, tmp_dir_mode_, file_mode_, exact_modes_});
        }
        if (created && options_.fsync) (void)posix::sync_directory(entries_dir_);
        continue;
      }
      ec = mk;
    }
    // What is not an entry in the way: a directory where the entry belongs (EISDIR, or another
    // error where permissions are checked first), or something else than a directory where the
    // shard directory belongs (ENOTDIR). Cleared (see clear_obstacle), then the rename again.
    if (attempt < 4) {
      struct stat st {};
      const bool in_shard_place = ec == std::errc::not_a_directory;
      const std::string& place = in_shard_place ? shard_dir : path;
      if (!posix::lstat_path(place, st) && S_ISDIR(st.st_mode) != in_shard_place) {
        const obstacle_outcome o = clear_obstacle({place, st});
        if (o.result == obstacle_outcome::removed || o.result == obstacle_outcome::moved_aside) {
          stats_.corrupt_dropped.fetch_add(1, std::memory_order_relaxed);
          log(log_level::warning, "program cache: " + o.note + "; storing the entry in its place");
        }
        if (o.result != obstacle_outcome::failed) continue;
        return put_failed("move the new entry into", path, ec, o.note);
      }
    }
    return put_failed("move the new entry into", path, ec);
  }
  tmp_path.clear();  // committed: nothing for the guard to remove

  // 4. Make the rename durable.
  if (options_.fsync && (ec = posix::sync_directory(shard_dir))) {
    write_failed("fsync the directory", shard_dir, ec);  // the entry is in place regardless
  }
  stats_.puts.fetch_add(1, std::memory_order_relaxed);
  if (options_.max_size_bytes) after_put(bytes.size(), old_size);
}

// -----------------------------------------------------------------------------------------------
// erase, size, clear

bool file_stream_program_cache::erase(cache_key_ref key) {
  check_writable("erase from");
  const std::string path = entry_path(key);
  std::uint64_t size = 0;
  if (options_.max_size_bytes) {
    struct stat st {};
    if (!posix::lstat_path(path, st)) size = static_cast<std::uint64_t>(st.st_size);
  }
  const std::error_code ec = posix::unlink_path(path);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory) {
      return false;
    }
    write_failed("remove", path, ec);
    return false;
  }
  if (options_.max_size_bytes) {
    std::lock_guard lock(tracker_mutex_);
    tracked_bytes_ -= std::min(tracked_bytes_, size);  // never below zero
  }
  return true;
}

}  // namespace cucore
