#include "cache/remote_health.hpp"

#include <algorithm>
#include <utility>

#include "cucore/error.hpp"
#include "cucore/log.hpp"

namespace cucore::detail {

remote_health::remote_health(std::string who, std::chrono::milliseconds retry_initial,
                             std::chrono::milliseconds retry_max)
    : who_(std::move(who)), retry_initial_(retry_initial), retry_max_(retry_max) {}

void remote_health::check_open() const {
  if (closed()) throw error(who_ + " is closed");
}

bool remote_health::backing_off() {
  std::lock_guard lock(mutex_);
  if (backoff_.count() == 0 || std::chrono::steady_clock::now() >= retry_at_) return false;
  counters_.errors.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void remote_health::failed(const std::string& why) {
  counters_.errors.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  backoff_ = backoff_.count() == 0 ? retry_initial_ : std::min(backoff_ * 2, retry_max_);
  retry_at_ = std::chrono::steady_clock::now() + backoff_;
  const std::string message = who_ + " unavailable (" + why +
                              "): gets are misses and puts are dropped; retrying in " +
                              std::to_string(backoff_.count()) + " ms";
  if (!outage_logged_) {
    outage_logged_ = true;
    log(log_level::warning, message + " (further failures are logged at debug level)");
  } else {
    log(log_level::debug, message);
  }
}

void remote_health::answered() {
  std::lock_guard lock(mutex_);
  backoff_ = std::chrono::milliseconds(0);
}

void remote_health::reachable() {
  std::lock_guard lock(mutex_);
  if (outage_logged_) {
    outage_logged_ = false;
    log(log_level::info, who_ + " reachable again");
  }
}

void remote_health::note_error(std::string_view what) noexcept {
  counters_.errors.fetch_add(1, std::memory_order_relaxed);
  log(log_level::debug, who_ + ": " + std::string(what));
}

void remote_health::put_refused(const std::string& why, std::string_view first_note) {
  counters_.errors.fetch_add(1, std::memory_order_relaxed);
  const std::string message = who_ + " refused a put: " + why;
  if (!refusal_logged_.exchange(true)) {
    log(log_level::warning, message + " (" + std::string(first_note) + ")");
  } else {
    log(log_level::debug, message);
  }
}

void remote_health::record_statistics_in(std::shared_ptr<cache_statistics> store, cache_tier tier) {
  statistics_ = std::move(store);
  counters_.attach(statistics_.get(), tier);
}

}  // namespace cucore::detail
