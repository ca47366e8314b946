// The directory cache's object: construction (the root, entries/ and tmp/ checked against the
// trust model), close, claims, statistics, entry paths, and how failures are reported.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "cache/claim_file.hpp"
#include "cache/directory/internal.hpp"
#include "cache/key_files.hpp"
#include "cache/trust.hpp"
#include "common/sha256.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"

namespace cucore {
namespace posix = detail::posix;

namespace {

std::atomic<const detail::file_stream_test_hooks*> g_hooks{nullptr};

// The owner of a symbolic link at the root that may be followed: you or root.
bool trusted_link_owner(uid_t uid) noexcept {
  return uid == ::geteuid() || uid == 0;
}

}  // namespace

namespace detail {
namespace directory {
const file_stream_test_hooks* hooks() noexcept {
  return g_hooks.load(std::memory_order_acquire);
}
}  // namespace directory

void set_file_stream_test_hooks(const file_stream_test_hooks* h) noexcept {
  g_hooks.store(h, std::memory_order_release);
}
}  // namespace detail

// -----------------------------------------------------------------------------------------------

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
      detail::trust::require_acceptable(st, options_.access, "cache directory", root_str_);
    }
  }

  std::error_code ec;
  if (!options_.read_only && !ensure_directories(ec)) {
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
    detail::trust::require_acceptable(st, options_.access, "cache subdirectory", path);
  }

  if (options_.read_only) return;  // nothing swept, scanned or counted in a read-only layer
  if (options_.statistics) {
    statistics_ =
        std::make_shared<cache_statistics>(base + "/stats", options_.access, options_.umask);
    stats_.attach(statistics_.get(), cache_tier::local);
  }

  sweep_stale_tmp();
  // The key files' abandoned temp files in the root (one listing of a few names; the manifests'
  // go when their shard is written, and by verify() and clear()).
  detail::sweep_key_temps(root_);
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

void file_stream_program_cache::check_writable(const char* what) const {
  check_open();
  if (options_.read_only) {
    throw error("cannot " + std::string(what) + " the directory cache " + root_str_ +
                ": it is opened as a read-only layer (docs/cache-layers.md); open it without "
                "ro: to change it");
  }
}

std::string file_stream_program_cache::description() const {
  return "directory " + root_str_ + (options_.read_only ? " (read-only)" : "");
}

std::optional<std::filesystem::path> file_stream_program_cache::compiler_version_memo() const {
  if (options_.read_only) return std::nullopt;  // memos are written: not into a read-only layer
  return root_ / "compiler-versions";
}

claim_result file_stream_program_cache::try_claim(cache_key_ref key, std::chrono::milliseconds) {
  if (closed_.load(std::memory_order_acquire) || options_.read_only) return {};
  return detail::claim_file(root_str_ + "/claims", file_mode_, exact_modes_).try_claim(key);
}

std::uint64_t file_stream_program_cache::claim_abandonments(cache_key_ref) {
  if (closed_.load(std::memory_order_acquire) || options_.read_only) return 0;
  return detail::claim_file(root_str_ + "/claims", file_mode_, exact_modes_).abandonments();
}

std::unique_ptr<claim_watch> file_stream_program_cache::watch_claim(cache_key_ref key) {
  if (closed_.load(std::memory_order_acquire) || options_.read_only) return nullptr;
  try {
    std::string shard_dir;
    const std::string path = entry_path(key, &shard_dir);
    return detail::claim_file(root_str_ + "/claims", file_mode_, exact_modes_)
        .watch(key, shard_dir, path.substr(shard_dir.size() + 1));
  } catch (...) {
    return nullptr;
  }
}

void file_stream_program_cache::record_statistics_in(std::shared_ptr<cache_statistics> store,
                                                     cache_tier tier) {
  statistics_ = std::move(store);
  stats_.attach(statistics_.get(), tier);
}

cache_stats file_stream_program_cache::stats() const {
  return stats_.snapshot();
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
                                             std::error_code ec, const std::string& hint) {
  stats_.errors.fetch_add(1, std::memory_order_relaxed);
  std::string message = "program cache: could not " + what + " " + path + ": " + ec.message() +
                        " (errno " + std::to_string(ec.value()) + ")";
  if (!hint.empty()) message += "; " + hint;
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

void file_stream_program_cache::warn_obstacle(const std::string& path) {
  constexpr std::size_t kMaxWarnedPaths = 64;
  bool first = false;
  {
    std::lock_guard lock(warned_mutex_);
    if (std::find(warned_paths_.begin(), warned_paths_.end(), path) == warned_paths_.end() &&
        warned_paths_.size() < kMaxWarnedPaths) {
      warned_paths_.push_back(path);
      first = true;
    }
  }
  log(first ? log_level::warning : log_level::debug,
      "program cache: " + path +
          " is a directory, not an entry: that key misses until it is removed. The next put of "
          "the key removes it; `cucore cache verify --cache " +
          root_str_ + "` removes every such thing now");
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

}  // namespace cucore
