#include "cucore/cache/tiered.hpp"

#include "cucore/cache/statistics.hpp"

#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>

#include "cache/claim_watch.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"

namespace cucore {

tiered_program_cache::tiered_program_cache(std::unique_ptr<program_cache> local,
                                           std::unique_ptr<program_cache> remote,
                                           tiered_cache_options options)
    : local_(std::move(local)), remote_(std::move(remote)), options_(options) {
  if (!local_ || !remote_) {
    throw invalid_argument("tiered_program_cache needs both a local and a remote cache (got " +
                           std::string(local_ ? "no remote" : "no local") + " tier)");
  }
  if (options_.write_behind && options_.max_pending_puts == 0) {
    throw invalid_argument(
        "tiered_cache_options::max_pending_puts is 0: give a positive bound, or turn "
        "write_behind off for synchronous remote puts");
  }
  // One place for the fleet's counts on this machine: the remote tier's in the local tier's.
  statistics_ = local_->statistics();
  if (statistics_) remote_->record_statistics_in(statistics_, cache_tier::remote);
}

tiered_program_cache::~tiered_program_cache() {
  stop_writer();
}

void tiered_program_cache::remote_put(cache_key_ref key, const object_code& code) noexcept {
  try {
    remote_->put(key, code);
  } catch (const std::exception& e) {
    remote_failed("put", e);
  } catch (...) {
    remote_errors_.fetch_add(1, std::memory_order_relaxed);
    if (statistics_) statistics_->add(cache_tier::remote, cache_event::error);
  }
}

void tiered_program_cache::write_behind_loop() noexcept {
  std::unique_lock lock(queue_mutex_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to write
    {
      pending_put next = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      lock.unlock();
      if (next.code) remote_put(std::span<const std::byte>(next.key), *next.code);
      next.claim.reset();  // a claim's release (it catches what it throws)
    }
    lock.lock();
    writing_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

void tiered_program_cache::flush() {
  std::unique_lock lock(queue_mutex_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

void tiered_program_cache::stop_writer() noexcept {
  {
    std::lock_guard lock(queue_mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  // The writer drains the queue before it ends: what was put is stored (or fails) remotely.
  if (writer_.joinable()) writer_.join();
}

void tiered_program_cache::remote_failed(const char* operation, const std::exception& e) noexcept {
  remote_errors_.fetch_add(1, std::memory_order_relaxed);
  if (statistics_) statistics_->add(cache_tier::remote, cache_event::error);
  try {
    const std::string message = std::string("remote cache tier: ") + operation + " failed (" +
                                e.what() + "); the compile goes on without it";
    log(remote_failure_logged_.exchange(true) ? log_level::debug : log_level::warning, message);
  } catch (...) {
    // Out of memory while building the message: the count above is what is left.
  }
}

std::optional<object_code> tiered_program_cache::get(cache_key_ref key) {
  if (auto hit = local_->get(key)) {
    local_hits_.fetch_add(1, std::memory_order_relaxed);
    return hit;
  }
  std::optional<object_code> hit;
  try {
    hit = remote_->get(key);
  } catch (const std::exception& e) {
    remote_failed("get", e);
  }
  if (!hit) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  remote_hits_.fetch_add(1, std::memory_order_relaxed);
  // Backfill: the next get of this key on this machine is local (not into a read-only layer).
  // The local tier's policy decides what a failed write does (warn: logged, strict: throws like a
  // local put would).
  if (!local_->read_only()) local_->put(key, *hit);
  return hit;
}

void tiered_program_cache::put(cache_key_ref key, const object_code& code) {
  // Read-only layers (docs/cache-layers.md) are never written.
  if (!local_->read_only()) local_->put(key, code);
  puts_.fetch_add(1, std::memory_order_relaxed);
  if (remote_->read_only()) return;
  if (!options_.write_behind) {
    remote_put(key, code);
    return;
  }
  bool write_now = false;
  {
    std::lock_guard lock(queue_mutex_);
    if (stopping_) return;  // closed
    if (queue_.size() >= options_.max_pending_puts) {
      remote_puts_dropped_.fetch_add(1, std::memory_order_relaxed);
      log(drop_logged_.exchange(true) ? log_level::debug : log_level::warning,
          "remote cache tier: " + std::to_string(queue_.size()) + " puts already waiting for " +
              remote_->description() +
              "; dropping puts until it catches up (they are in the local tier)");
      return;
    }
    queue_.push_back(
        {std::vector<std::byte>(key.bytes().begin(), key.bytes().end()), code, nullptr});
    if (!writer_.joinable()) {
      try {
        writer_ = std::thread([this] { write_behind_loop(); });
      } catch (const std::system_error&) {
        queue_.pop_back();  // no thread to be had: write it here instead
        write_now = true;
      }
    }
  }
  if (write_now) {
    remote_put(key, code);
  } else {
    work_cv_.notify_one();
  }
}

bool tiered_program_cache::erase(cache_key_ref key) {
  flush();  // a put still waiting must not bring the entry back after the erase
  const bool local = !local_->read_only() && local_->erase(key);
  bool remote = false;
  try {
    remote = !remote_->read_only() && remote_->erase(key);
  } catch (const std::exception& e) {
    remote_failed("erase", e);
  }
  return local || remote;
}

std::size_t tiered_program_cache::size() {
  return local_->size();
}

std::uint64_t tiered_program_cache::size_bytes() {
  return local_->size_bytes();
}

void tiered_program_cache::clear() {
  local_->clear();
}

tiered_cache_stats tiered_program_cache::tier_stats() const {
  tiered_cache_stats s;
  s.local_hits = local_hits_.load(std::memory_order_relaxed);
  s.remote_hits = remote_hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.remote_errors = remote_errors_.load(std::memory_order_relaxed);
  s.remote_puts_dropped = remote_puts_dropped_.load(std::memory_order_relaxed);
  {
    std::lock_guard lock(queue_mutex_);
    s.remote_puts_pending = queue_.size() + (writing_ ? 1 : 0);
  }
  s.local = local_->stats();
  s.remote = remote_->stats();
  return s;
}

cache_stats tiered_program_cache::stats() const {
  const tiered_cache_stats t = tier_stats();
  cache_stats s;
  s.hits = t.local_hits + t.remote_hits;
  s.misses = t.misses;
  s.puts = puts_.load(std::memory_order_relaxed);
  s.evictions = t.local.evictions + t.remote.evictions;
  s.corrupt_dropped = t.local.corrupt_dropped + t.remote.corrupt_dropped;
  s.errors = t.local.errors + t.remote.errors + t.remote_errors;
  return s;
}

std::vector<cache_entry_info> tiered_program_cache::list() {
  return local_->list();
}

cache_verify_report tiered_program_cache::verify(bool remove_bad) {
  return local_->verify(remove_bad);
}

std::size_t tiered_program_cache::trim(std::uint64_t max_size_bytes) {
  return local_->trim(max_size_bytes);
}

std::string tiered_program_cache::description() const {
  return local_->description() + " + " + remote_->description();
}

// Both tiers' claims: the remote one goes through release_remote_claim (after the pending puts),
// then the local one.
struct tiered_claim final : cache_claim {
  tiered_claim(tiered_program_cache& cache, std::unique_ptr<cache_claim> local,
               std::unique_ptr<cache_claim> remote) noexcept
      : cache(cache), local(std::move(local)), remote(std::move(remote)) {}
  ~tiered_claim() override { cache.release_remote_claim(std::move(remote)); }
  void abandon() noexcept override {
    if (local) local->abandon();
    if (remote) remote->abandon();
  }
  tiered_program_cache& cache;
  std::unique_ptr<cache_claim> local;
  std::unique_ptr<cache_claim> remote;
};

void tiered_program_cache::release_remote_claim(std::unique_ptr<cache_claim> claim) noexcept {
  if (!claim) return;
  {
    std::lock_guard lock(queue_mutex_);
    if (writer_.joinable() && !stopping_ && (!queue_.empty() || writing_)) {
      try {
        // Never dropped for max_pending_puts: it holds no code, and waiters depend on it.
        queue_.push_back({{}, std::nullopt, std::move(claim)});
      } catch (const std::bad_alloc&) {
      }
    }
  }
  if (claim) {
    claim.reset();  // nothing pending: release here
  } else {
    work_cv_.notify_one();
  }
}

claim_result tiered_program_cache::try_claim(cache_key_ref key, std::chrono::milliseconds lease) {
  claim_result local = local_->try_claim(key, lease);
  if (local.status == claim_status::held_elsewhere) return local;
  claim_result remote;
  try {
    remote = remote_->try_claim(key, lease);
  } catch (const std::exception& e) {
    remote_failed("claim", e);
  }
  if (remote.status == claim_status::held_elsewhere) return remote;  // drops the local claim
  if (remote.status == claim_status::unsupported) return local;
  if (local.status == claim_status::unsupported) return remote;
  // Both held: released together (the remote claim first, as it was taken last).
  try {
    return {claim_status::owned,
            std::make_unique<tiered_claim>(*this, std::move(local.claim), std::move(remote.claim))};
  } catch (const std::bad_alloc&) {
    return {};  // both released: compile without a claim
  }
}

std::uint64_t tiered_program_cache::claim_abandonments(cache_key_ref key) {
  const std::uint64_t local = local_->claim_abandonments(key);
  std::uint64_t remote = 0;
  try {
    remote = remote_->claim_abandonments(key);
  } catch (const std::exception& e) {
    remote_failed("claim_abandonments", e);
  }
  return local ^ (remote * 0x9e3779b97f4a7c15ull);
}

std::unique_ptr<claim_watch> tiered_program_cache::watch_claim(cache_key_ref key) {
  std::unique_ptr<claim_watch> remote;
  try {
    remote = remote_->watch_claim(key);
  } catch (const std::exception& e) {
    remote_failed("watch_claim", e);
  }
  try {
    return detail::combine_watches(local_->watch_claim(key), std::move(remote));
  } catch (...) {
    return nullptr;
  }
}

std::optional<std::filesystem::path> tiered_program_cache::compiler_version_memo() const {
  return local_->compiler_version_memo();
}

void tiered_program_cache::close() noexcept {
  stop_writer();
  local_->close();
  remote_->close();
}

}  // namespace cucore
