#include "cucore/cache/file_stream.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <tuple>
#include <utility>

#include "cache/claim_file.hpp"
#include "cache/entry_format.hpp"
#include "cache/posix_file.hpp"
#include "cache/trust.hpp"
#include "common/sha256.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"

namespace cucore {
namespace posix = detail::posix;

namespace {

constexpr std::int64_t kStaleTmpAgeNs = std::int64_t{3600} * 1'000'000'000;  // an hour
// Reads recorded within this long of the last recorded one are not recorded again.
constexpr std::int64_t kTouchGranularityNs = 1'000'000'000;
// list() reads this much of a file first, and more only for a header that does not fit.
constexpr std::size_t kHeaderPrefixBytes = 64 * 1024;

std::atomic<const detail::file_stream_test_hooks*> g_hooks{nullptr};

const detail::file_stream_test_hooks* hooks() noexcept {
  return g_hooks.load(std::memory_order_acquire);
}

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

// The owner of a symbolic link at the root that may be followed: you or root.
bool trusted_link_owner(uid_t uid) noexcept {
  return uid == ::geteuid() || uid == 0;
}

// A temp file's age is that of its last write (mtime). A file moved aside by a guarded removal
// keeps its mtime, and may look stale to a peer's sweep: harmless, since the only one that matters
// (a fresh entry a peer wrote, to be put back) is young by construction.
std::int64_t age_ns(const struct stat& st, std::int64_t now_ns) noexcept {
  return now_ns - posix::to_ns(st.st_mtim);
}

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

template <class F>
void walk_entries(const std::string& entries_dir, F&& f) {
  std::error_code ec;
  posix::directory_reader top = posix::directory_reader::open(entries_dir, ec);
  if (!top) return;
  posix::directory_reader::entry e{};
  // Collect the top level first: callbacks may remove items (readdir tolerates that, but the
  // shard readers are simpler one at a time).
  std::vector<std::pair<std::string, struct stat>> items;
  while (top.next(e, ec)) {
    struct stat st {};
    if (::fstatat(top.fd(), e.name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    items.emplace_back(e.name, st);
  }
  for (auto& [name, st] : items) {
    std::string path = entries_dir + "/" + name;
    if (!S_ISDIR(st.st_mode)) {
      f(walk_item{std::move(path), st, false, {}, name});
      continue;
    }
    posix::directory_reader shard = posix::directory_reader::open(path, ec);
    if (!shard) continue;
    while (shard.next(e, ec)) {
      struct stat est {};
      if (::fstatat(shard.fd(), e.name, &est, AT_SYMLINK_NOFOLLOW) != 0) continue;
      f(walk_item{path + "/" + e.name, est, true, name, e.name});
    }
  }
}

// Calls f(name, stat) for each item of tmp/.
template <class F>
void walk_tmp(const std::string& tmp_dir, F&& f) {
  std::error_code ec;
  posix::directory_reader dir = posix::directory_reader::open(tmp_dir, ec);
  if (!dir) return;
  posix::directory_reader::entry e{};
  while (dir.next(e, ec)) {
    struct stat st {};
    if (::fstatat(dir.fd(), e.name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    f(dir.fd(), e.name, st);
  }
}

// Whether `item`'s location is where its key puts it: entries/<hex[0:2]>/<hex[2:]>.
bool location_matches(const walk_item& item, std::span<const std::byte> key) {
  const auto hex = detail::sha256_hex(key);
  return item.shard == std::string_view(hex.data(), 2) &&
         item.name == std::string_view(hex.data() + 2, 62);
}

// Reads a whole regular file without following a symlink; `st` is set to what fstat says of the
// file read. Empty optional when it is not a regular file or cannot be read.
std::optional<std::vector<std::byte>> read_whole(const std::string& path, struct stat& st) {
  std::error_code ec;
  posix::unique_fd fd =
      posix::open_file(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0, ec);
  if (!fd) return std::nullopt;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  std::vector<std::byte> data;
  try {
    data.resize(static_cast<std::size_t>(st.st_size));
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  }
  std::size_t got = 0;
  if (posix::read_fully(fd.get(), data, got)) return std::nullopt;
  data.resize(got);
  return data;
}

// The header of the entry in `fd` (a regular file of `size` bytes), reading only a prefix of it.
std::optional<detail::entry_header> read_header(int fd, std::uint64_t size) {
  if (size <= kHeaderPrefixBytes) {
    std::vector<std::byte> data(static_cast<std::size_t>(size));
    std::size_t got = 0;
    if (posix::pread_fully(fd, data, 0, got) || got != data.size()) return std::nullopt;
    return detail::read_entry_header(data);
  }
  // read_entry_header wants a span of the whole file (it checks the payload length against it)
  // but reads only the header: present the file as lazily-zeroed memory of its full size with
  // just a prefix read in, and read more only if the header turns out longer than the prefix.
  posix::anonymous_memory memory(static_cast<std::size_t>(size));
  if (!memory.valid()) return std::nullopt;
  std::size_t have = 0;
  for (std::size_t want = kHeaderPrefixBytes;; want = std::min<std::uint64_t>(want * 2, size)) {
    std::size_t got = 0;
    if (posix::pread_fully(fd, memory.bytes().subspan(have, want - have), have, got)) {
      return std::nullopt;
    }
    have += got;
    if (have < want) return std::nullopt;  // shorter than its size: changed under us
    if (std::memcmp(memory.bytes().data(), detail::kEntryMagic.data(),
                    detail::kEntryMagic.size()) != 0) {
      return std::nullopt;  // a foreign file: do not read on
    }
    auto header = detail::read_entry_header(memory.bytes());
    // Every byte the parser looked at was read when the payload starts within what was read.
    if (header && header->payload_offset <= have) return header;
    if (have == size) return std::nullopt;
  }
}

enum class removal {
  removed,   // the snapshot's file was removed
  vanished,  // a peer removed it first
  replaced,  // a peer replaced it after the snapshot: the newer file is left in place
  failed,    // could not remove it (permissions, I/O), or could not put a replacement back
};

}  // namespace

namespace detail {
void set_file_stream_test_hooks(const file_stream_test_hooks* h) noexcept {
  g_hooks.store(h, std::memory_order_release);
}
}  // namespace detail

// -----------------------------------------------------------------------------------------------

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
  removal result = removal::failed;
  // The change in bytes at the path relative to the snapshot, for the caller's running total.
  std::int64_t delta = 0;
  std::error_code error;  // for `failed`
};

file_stream_program_cache::file_stream_program_cache(std::filesystem::path root,
                                                     file_stream_cache_options options)
    : options_(options) {
  if (options_.max_size_bytes && *options_.max_size_bytes == 0) {
    throw invalid_argument("max_size_bytes must be positive or unset (0 would evict every write)");
  }
  const detail::trust::create_modes modes =
      detail::trust::modes_for(options_.access, options_.umask);
  dir_mode_ = modes.dir;
  tmp_dir_mode_ = modes.private_dir;
  file_mode_ = modes.file;
  exact_modes_ = modes.exact;
  euid_ = ::geteuid();
  if (root.empty()) {
    throw invalid_argument("file_stream_program_cache: the cache directory path is empty");
  }
  root_ = std::filesystem::absolute(root).lexically_normal();
  if (!root_.has_filename() && root_.has_parent_path() && root_ != root_.root_path()) {
    root_ = root_.parent_path();  // "/a/b/" → "/a/b"
  }
  root_str_ = root_.string();
  const std::string base = root_str_ == "/" ? std::string() : root_str_;
  entries_dir_ = base + "/entries";
  tmp_dir_ = base + "/tmp";

  // Trust: the root itself.
  struct stat lst {};
  if (posix::lstat_path(root_str_, lst) == std::error_code()) {
    if (S_ISLNK(lst.st_mode) && !trusted_link_owner(lst.st_uid)) {
      throw invalid_argument(
          "cache directory " + root_str_ + " is a symbolic link owned by another user (uid " +
          std::to_string(lst.st_uid) +
          "), who could point it anywhere; refusing to follow it. Use the directory it points to "
          "directly, or remove the link");
    }
    struct stat st {};
    if (posix::stat_path(root_str_.c_str(), st) == std::error_code()) {
      if (!S_ISDIR(st.st_mode)) {
        throw invalid_argument("cache directory " + root_str_ +
                               " exists and is not a directory; choose another cache location");
      }
      if (auto why = detail::trust::problem(st, options_.access, "cache directory", root_str_);
          !why.empty()) {
        throw invalid_argument(why);
      }
    }
  }

  std::error_code ec;
  if (!ensure_directories(ec)) {
    write_failed("create the cache directory", root_str_, ec);
  }

  // Trust: entries/ and tmp/ (whether we just made them or found them).
  for (const std::string* dir : {&entries_dir_, &tmp_dir_}) {
    const std::string& path = *dir;
    struct stat st {};
    if (posix::lstat_path(path, st)) continue;  // missing: made on the first write
    if (S_ISLNK(st.st_mode)) {
      throw invalid_argument("cache subdirectory " + path +
                             " is a symbolic link; cucore never follows links inside a cache "
                             "directory. Remove the link (the cache recreates the directory)");
    }
    if (!S_ISDIR(st.st_mode)) {
      throw invalid_argument("cache subdirectory " + path +
                             " exists and is not a directory; remove it (the cache recreates it)");
    }
    if (auto why = detail::trust::problem(st, options_.access, "cache subdirectory", path);
        !why.empty()) {
      throw invalid_argument(why);
    }
  }

  if (options_.statistics) {
    statistics_ =
        std::make_shared<cache_statistics>(base + "/stats", options_.access, options_.umask);
    stats_.attach(statistics_.get(), cache_tier::local);
  }

  sweep_stale_tmp();
  if (options_.max_size_bytes) {
    scan_result s = scan(/*with_tmp=*/true);
    tracked_bytes_ = s.entry_bytes + s.tmp_bytes;
  }
}

file_stream_program_cache::~file_stream_program_cache() {
  close();
}

void file_stream_program_cache::close() noexcept {
  closed_.store(true, std::memory_order_release);
}

void file_stream_program_cache::check_open() const {
  if (closed_.load(std::memory_order_acquire)) {
    throw error("file_stream_program_cache " + root_str_ + " used after close()");
  }
}

std::string file_stream_program_cache::description() const {
  return "directory " + root_str_;
}

std::optional<std::filesystem::path> file_stream_program_cache::compiler_version_memo() const {
  return root_ / "compiler-versions";
}

claim_result file_stream_program_cache::try_claim(cache_key_ref key, std::chrono::milliseconds) {
  if (closed_.load(std::memory_order_acquire)) return {};
  return detail::claim_file(root_str_ + "/claims", file_mode_, exact_modes_).try_claim(key);
}

void file_stream_program_cache::record_statistics_in(std::shared_ptr<cache_statistics> store,
                                                     cache_tier tier) {
  statistics_ = std::move(store);
  stats_.attach(statistics_.get(), tier);
}

cache_stats file_stream_program_cache::stats() const {
  cache_stats s;
  s.hits = stats_.hits.load(std::memory_order_relaxed);
  s.misses = stats_.misses.load(std::memory_order_relaxed);
  s.puts = stats_.puts.load(std::memory_order_relaxed);
  s.evictions = stats_.evictions.load(std::memory_order_relaxed);
  s.corrupt_dropped = stats_.corrupt_dropped.load(std::memory_order_relaxed);
  s.errors = stats_.errors.load(std::memory_order_relaxed);
  return s;
}

std::string file_stream_program_cache::entry_path(cache_key_ref key, std::string* shard_dir) const {
  const auto hex = detail::sha256_hex(key.bytes());
  std::string path;
  path.reserve(entries_dir_.size() + 66);
  path.append(entries_dir_).append(1, '/').append(hex.data(), 2);
  if (shard_dir != nullptr) *shard_dir = path;
  path.push_back('/');
  path.append(hex.data() + 2, 62);
  return path;
}

void file_stream_program_cache::write_failed(const std::string& what, const std::string& path,
                                             std::error_code ec) {
  stats_.errors.fetch_add(1, std::memory_order_relaxed);
  std::string message = "program cache: could not " + what + " " + path + ": " + ec.message() +
                        " (errno " + std::to_string(ec.value()) + ")";
  if (options_.on_write_failure == write_failure_policy::strict) throw error(message);
  bool first = false;
  {
    std::lock_guard lock(warned_mutex_);
    if (std::find(warned_errnos_.begin(), warned_errnos_.end(), ec.value()) ==
        warned_errnos_.end()) {
      warned_errnos_.push_back(ec.value());
      first = true;
    }
  }
  message += "; continuing without caching";
  if (first) {
    message += " (further failures like this one of this cache are logged at debug level)";
    log(log_level::warning, message);
  } else {
    log(log_level::debug, message);
  }
}

void file_stream_program_cache::note_error(std::string_view what, const std::string& path,
                                           std::error_code ec) noexcept {
  stats_.errors.fetch_add(1, std::memory_order_relaxed);
  try {
    log(log_level::debug, "program cache: could not " + std::string(what) + " " + path + ": " +
                              ec.message() + " (errno " + std::to_string(ec.value()) + ")");
  } catch (...) {
  }
}

bool file_stream_program_cache::ensure_directories(std::error_code& ec) {
  const detail::trust::create_modes modes{dir_mode_, tmp_dir_mode_, file_mode_, exact_modes_};
  struct stat st {};
  const bool root_existed = !posix::lstat_path(root_str_, st);
  ec = posix::make_directories(root_str_, dir_mode_);
  if (ec) return false;
  if (!root_existed) (void)detail::trust::set_created_dir_mode(root_str_, dir_mode_, modes);
  bool created_entries = false;
  bool created_tmp = false;
  ec = posix::make_directory(entries_dir_, dir_mode_, created_entries);
  if (ec) return false;
  if (created_entries) (void)detail::trust::set_created_dir_mode(entries_dir_, dir_mode_, modes);
  ec = posix::make_directory(tmp_dir_, tmp_dir_mode_, created_tmp);
  if (ec) return false;
  if (created_tmp) (void)detail::trust::set_created_dir_mode(tmp_dir_, tmp_dir_mode_, modes);
  if (options_.fsync && (created_entries || created_tmp)) (void)posix::sync_directory(root_str_);
  return true;
}

// -----------------------------------------------------------------------------------------------
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
        stats_.corrupt_dropped.fetch_add(1, std::memory_order_relaxed);
        log(log_level::warning,
            "program cache: " + path +
                " is a symbolic link, not an entry; not following it, removing it");
        (void)remove_guarded({path, st}, false);
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
  auto drop = [&](std::string_view why) {
    stats_.corrupt_dropped.fetch_add(1, std::memory_order_relaxed);
    log(log_level::warning,
        "program cache: dropping damaged entry " + path + " (" + std::string(why) + ")");
    (void)remove_guarded({path, st}, false);
  };
  if (S_ISDIR(st.st_mode)) {  // nothing of ours: leave it (verify() reports it)
    stats_.corrupt_dropped.fetch_add(1, std::memory_order_relaxed);
    log(log_level::warning, "program cache: " + path + " is a directory, not an entry");
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
  if (!recent) {
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
  check_open();
  std::string shard_dir;
  const std::string path = entry_path(key, &shard_dir);
  const std::vector<std::byte> bytes = detail::encode_entry(key.bytes(), code);
  if (options_.max_size_bytes && bytes.size() > *options_.max_size_bytes) {
    log(log_level::debug, "program cache: not storing " + path + ": its " +
                              std::to_string(bytes.size()) + " bytes exceed max_size_bytes");
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
    write_failed("create a temporary file in", tmp_dir_, ec);
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
  if ((ec = posix::write_fully(fd.get(), bytes))) return write_failed("write", tmp_path, ec);
  const timespec times[2] = {posix::now_realtime(), {0, UTIME_OMIT}};
  (void)::futimens(fd.get(), times);
  if (options_.fsync && (ec = posix::sync_file(fd.get(), /*data_only=*/true))) {
    return write_failed("fsync", tmp_path, ec);
  }
  if ((ec = fd.close())) return write_failed("close", tmp_path, ec);

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
    return write_failed("move the new entry into", path, ec);
  }
  tmp_path.clear();  // committed: nothing for the guard to remove

  // 4. Make the rename durable.
  if (options_.fsync && (ec = posix::sync_directory(shard_dir))) {
    write_failed("fsync the directory", shard_dir, ec);  // the entry is in place regardless
  }
  stats_.puts.fetch_add(1, std::memory_order_relaxed);
  if (options_.max_size_bytes) after_put(bytes.size(), old_size);
}

void file_stream_program_cache::after_put(std::uint64_t added, std::uint64_t old_size) {
  const std::uint64_t cap = *options_.max_size_bytes;
  bool scan_now = false;
  {
    std::lock_guard lock(tracker_mutex_);
    tracked_bytes_ += added;
    tracked_bytes_ -= std::min(tracked_bytes_, old_size);
    written_since_scan_ += added;
    scan_now = tracked_bytes_ > cap || written_since_scan_ > cap / 8;
  }
  if (!scan_now) return;

  std::unique_lock evicting(evict_mutex_, std::try_to_lock);
  if (!evicting) return;  // another thread of this object is scanning right now
  sweep_stale_tmp();
  scan_result s = scan(/*with_tmp=*/true);
  std::uint64_t total = s.entry_bytes + s.tmp_bytes;
  if (total > cap) {
    const std::uint64_t target = cap - cap / 10;
    evict_to(target, s, total);
  }
  std::lock_guard lock(tracker_mutex_);
  tracked_bytes_ = total;
  written_since_scan_ = 0;
}

// Evicts least-recently-read entries of `scanned` until `total` is at most `target`; `total` is
// kept equal to what the directory holds, however the races with peers go.
std::size_t file_stream_program_cache::evict_to(std::uint64_t target, scan_result& scanned,
                                                std::uint64_t& total) {
  std::sort(
      scanned.entries.begin(), scanned.entries.end(), [](const scan_entry& a, const scan_entry& b) {
        const auto ka = std::make_tuple(posix::to_ns(a.st.st_atim), posix::to_ns(a.st.st_mtim));
        const auto kb = std::make_tuple(posix::to_ns(b.st.st_atim), posix::to_ns(b.st.st_mtim));
        if (ka != kb) return ka < kb;
        return a.path < b.path;
      });
  std::size_t evicted = 0;
  for (const scan_entry& e : scanned.entries) {
    if (total <= target) break;
    const removal_outcome r = remove_guarded(e, /*keep_if_read=*/true);
    if (r.delta < 0) {
      total -= std::min<std::uint64_t>(total, static_cast<std::uint64_t>(-r.delta));
    } else {
      total += static_cast<std::uint64_t>(r.delta);
    }
    if (r.result == removal::removed) {
      ++evicted;
      stats_.evictions.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return evicted;
}

file_stream_program_cache::scan_result file_stream_program_cache::scan(bool with_tmp) {
  if (const auto* h = hooks(); h != nullptr && h->on_scan) h->on_scan();
  scan_result s;
  walk_entries(entries_dir_, [&](walk_item&& item) {
    if (!item.in_shard || !S_ISREG(item.st.st_mode)) return;
    s.entry_bytes += static_cast<std::uint64_t>(item.st.st_size);
    s.entries.push_back(scan_entry{std::move(item.path), item.st});
  });
  if (with_tmp) {
    walk_tmp(tmp_dir_, [&](int, const char*, const struct stat& st) {
      if (S_ISREG(st.st_mode)) s.tmp_bytes += static_cast<std::uint64_t>(st.st_size);
    });
  }
  return s;
}

void file_stream_program_cache::sweep_stale_tmp() {
  const std::int64_t now_ns = posix::to_ns(posix::now_realtime());
  walk_tmp(tmp_dir_, [&](int dir_fd, const char* name, const struct stat& st) {
    if (S_ISDIR(st.st_mode)) return;
    if (age_ns(st, now_ns) > kStaleTmpAgeNs || orphaned_tmp_file(name)) {
      (void)::unlinkat(dir_fd, name, 0);  // relative to the directory listed: nothing followed
    }
  });
}

// -----------------------------------------------------------------------------------------------
// erase, size, clear

bool file_stream_program_cache::erase(cache_key_ref key) {
  check_open();
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

std::size_t file_stream_program_cache::size() {
  check_open();
  std::size_t n = 0;
  walk_entries(entries_dir_, [&](walk_item&& item) {
    if (item.in_shard && S_ISREG(item.st.st_mode)) ++n;
  });
  return n;
}

std::uint64_t file_stream_program_cache::size_bytes() {
  check_open();
  std::uint64_t n = 0;
  walk_entries(entries_dir_, [&](walk_item&& item) {
    if (item.in_shard && S_ISREG(item.st.st_mode)) n += static_cast<std::uint64_t>(item.st.st_size);
  });
  return n;
}

void file_stream_program_cache::clear() {
  check_open();
  std::lock_guard evicting(evict_mutex_);
  walk_entries(entries_dir_, [&](walk_item&& item) {
    if (!item.in_shard || S_ISDIR(item.st.st_mode)) return;
    (void)remove_guarded({item.path, item.st}, false);
  });
  sweep_stale_tmp();
  if (options_.max_size_bytes) {
    scan_result s = scan(/*with_tmp=*/true);
    std::lock_guard lock(tracker_mutex_);
    tracked_bytes_ = s.entry_bytes + s.tmp_bytes;
    written_since_scan_ = 0;
  }
}

// -----------------------------------------------------------------------------------------------
// Maintenance: list, verify, trim

std::vector<cache_entry_info> file_stream_program_cache::list() {
  check_open();
  std::vector<cache_entry_info> out;
  walk_entries(entries_dir_, [&](walk_item&& item) {
    if (!item.in_shard || !S_ISREG(item.st.st_mode)) return;
    std::error_code ec;
    posix::unique_fd fd =
        posix::open_file(item.path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0, ec);
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    auto header = read_header(fd.get(), static_cast<std::uint64_t>(st.st_size));
    if (!header || !location_matches(item, header->key)) return;
    cache_entry_info info;
    info.key = std::move(header->key);
    info.type = header->type;
    info.name = std::move(header->name);
    info.symbol_count = header->symbol_count;
    info.payload_bytes = header->payload_length;
    info.stored_bytes = static_cast<std::uint64_t>(st.st_size);
    info.last_used = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::nanoseconds(posix::to_ns(st.st_atim))));
    out.push_back(std::move(info));
  });
  return out;
}

cache_verify_report file_stream_program_cache::verify(bool remove_bad) {
  check_open();
  cache_verify_report report;
  std::lock_guard evicting(evict_mutex_);
  walk_entries(entries_dir_, [&](walk_item&& item) {
    ++report.entries;
    if (S_ISDIR(item.st.st_mode)) {  // a directory inside a shard: nothing of ours, not removable
      ++report.corrupt;
      return;
    }
    struct stat st = item.st;  // what is removed must be what was checked
    bool good = false;
    // An untrusted entry (see get()) counts as bad, whatever it holds.
    if (item.in_shard && S_ISREG(item.st.st_mode) &&
        detail::trust::acceptable(item.st, options_.access, static_cast<uid_t>(euid_))) {
      if (auto data = read_whole(item.path, st)) {
        auto header = detail::read_entry_header(*data);
        if (header && location_matches(item, header->key)) {
          const std::vector<std::byte> key = std::move(header->key);
          good = detail::decode_entry(std::move(*data), key).status == detail::entry_status::ok;
        }
      }
    }
    if (good) {
      ++report.ok;
      return;
    }
    ++report.corrupt;
    if (!remove_bad) return;
    if (remove_guarded({item.path, st}, false).result == removal::removed) ++report.removed;
  });
  return report;
}

std::size_t file_stream_program_cache::trim(std::uint64_t max_size_bytes) {
  check_open();
  std::lock_guard evicting(evict_mutex_);
  sweep_stale_tmp();
  scan_result s = scan(/*with_tmp=*/true);
  std::uint64_t total = s.entry_bytes;
  const std::size_t evicted = evict_to(max_size_bytes, s, total);
  if (options_.max_size_bytes) {
    std::lock_guard lock(tracker_mutex_);
    tracked_bytes_ = total + s.tmp_bytes;
    written_since_scan_ = 0;
  }
  return evicted;
}

}  // namespace cucore
