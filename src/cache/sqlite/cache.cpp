// The SQLite cache's object: construction (options, directory, trust), close, claims and
// statistics. Entries are in entries.cpp, maintenance in maintenance.cpp.
#include <sys/stat.h>

#include "cache/claim_file.hpp"
#include "cache/posix_file.hpp"
#include "cache/sqlite/internal.hpp"

namespace cucore {

using namespace detail::sqlite;

sqlite_program_cache::sqlite_program_cache(std::filesystem::path file, sqlite_cache_options options)
    : file_(file) {
  if (file.empty()) throw invalid_argument("sqlite cache: the file path is empty");
  if (options.max_size_bytes && *options.max_size_bytes == 0) {
    throw invalid_argument("max_size_bytes must be positive or unset (0 would evict every write)");
  }
  if (options.busy_timeout.count() < 0 || options.busy_timeout.count() > INT32_MAX) {
    throw invalid_argument("busy_timeout must be between 0 and INT32_MAX milliseconds");
  }
  if (options.mmap_size_bytes > static_cast<std::uint64_t>(INT64_MAX)) {
    throw invalid_argument("mmap_size_bytes must be at most INT64_MAX (0 turns the map off)");
  }
  if (options.touch_flush_interval.count() < 0) {
    throw invalid_argument("touch_flush_interval must not be negative");
  }
  impl_ = std::make_unique<impl>(std::move(file), options);
  if (options.statistics) {
    record_statistics_in(
        std::make_shared<cache_statistics>(impl_->path + ".stats", options.access, options.umask),
        cache_tier::local);
  }
  const std::filesystem::path parent =
      impl_->file.has_parent_path() ? impl_->file.parent_path() : std::filesystem::path(".");
  // Created with the cache's modes: with a group-writable process umask (002), the default
  // 0777 would make a directory this cache then refuses.
  struct stat parent_st {};
  const bool parent_existed = ::stat(parent.c_str(), &parent_st) == 0;
  std::error_code ec = detail::posix::make_directories(parent.string(), impl_->modes.dir);
  if (!ec && !parent_existed) {
    (void)detail::trust::set_created_dir_mode(parent.string(), impl_->modes.dir, impl_->modes);
  }
  if (ec) {
    const std::string message = "cannot create " + parent.string() + ": " + ec.message();
    if (options.on_write_failure == write_failure_policy::strict) {
      throw error("sqlite cache " + impl_->path + ": " + message);
    }
    impl_->warn(message);
  }
  // Trust is checked before anything is opened: a refused cache is an error, not a degraded one.
  if (std::string why = trust_problem(impl_->path, options.access); !why.empty()) {
    throw invalid_argument("sqlite cache: " + why);
  }
  if (auto fs = detail::sqlite::filesystem_of(parent)) impl_->fs = *fs;
  if (impl_->fs.network && options.journal == sqlite_journal::automatic) {
    impl_->warn("on a network filesystem (" + std::string(impl_->fs.name) +
                "): using a rollback journal, since WAL corrupts databases there");
  }
  std::lock_guard lock(impl_->mutex);
  impl_->try_open_locked();
}

sqlite_program_cache::~sqlite_program_cache() {
  close();
}

std::string sqlite_program_cache::description() const {
  return "sqlite " + file_.string();
}

std::optional<std::filesystem::path> sqlite_program_cache::compiler_version_memo() const {
  return std::filesystem::path(file_.string() + ".compiler-versions");
}

claim_result sqlite_program_cache::try_claim(cache_key_ref key, std::chrono::milliseconds) {
  // A separate file from FILE.lock: on NFS, flock() is emulated with byte-range locks, which
  // would conflict with these.
  return detail::claim_file(file_.string() + ".claims", impl_->modes.file, impl_->modes.exact)
      .try_claim(key);
}

std::uint64_t sqlite_program_cache::claim_abandonments(cache_key_ref) {
  return detail::claim_file(file_.string() + ".claims", impl_->modes.file, impl_->modes.exact)
      .abandonments();
}

std::unique_ptr<claim_watch> sqlite_program_cache::watch_claim(cache_key_ref key) {
  // The entry lands inside the database: the claim's release, which follows the put, is the sign.
  return detail::claim_file(file_.string() + ".claims", impl_->modes.file, impl_->modes.exact)
      .watch(key, {}, {});
}

std::shared_ptr<cache_statistics> sqlite_program_cache::statistics() const {
  return impl_->statistics;
}

void sqlite_program_cache::record_statistics_in(std::shared_ptr<cache_statistics> store,
                                                cache_tier tier) {
  impl& c = *impl_;
  c.statistics = std::move(store);
  c.hits.attach(c.statistics.get(), tier, cache_event::hit);
  c.misses.attach(c.statistics.get(), tier, cache_event::miss);
  c.puts.attach(c.statistics.get(), tier, cache_event::put);
  c.evictions.attach(c.statistics.get(), tier, cache_event::eviction);
  c.corrupt_dropped.attach(c.statistics.get(), tier, cache_event::corrupt_dropped);
  c.errors.attach(c.statistics.get(), tier, cache_event::error);
}

cache_stats sqlite_program_cache::stats() const {
  cache_stats s;
  s.hits = impl_->hits.load(std::memory_order_relaxed);
  s.misses = impl_->misses.load(std::memory_order_relaxed);
  s.puts = impl_->puts.load(std::memory_order_relaxed);
  s.evictions = impl_->evictions.load(std::memory_order_relaxed);
  s.corrupt_dropped = impl_->corrupt_dropped.load(std::memory_order_relaxed);
  s.errors = impl_->errors.load(std::memory_order_relaxed);
  return s;
}

void sqlite_program_cache::close() noexcept {
  if (!impl_) return;
  std::lock_guard lock(impl_->mutex);
  impl_->closed = true;
  if (impl_->db && !impl_->touches.empty()) {
    try {
      write_transaction txn(impl_->db.get(), *impl_->st);
      impl_->flush_touches_locked();
      txn.commit();
    } catch (const std::exception& e) {
      log(log_level::debug, impl_->prefix() + "access times not written back: " + e.what());
    }
  }
  impl_->touches.clear();
  impl_->close_connection_locked();
  if (impl_->lock_fd >= 0) {
    ::close(impl_->lock_fd);  // releases the flock
    impl_->lock_fd = -1;
    impl_->lock_shared = false;
  }
}

}  // namespace cucore
