// What the two remote tiers (http.hpp, redis.hpp) share: their counters, the backoff after a
// failure of the server, and the outage and refusal logging ("unavailable" once as a warning, then
// at debug level, "reachable again" at info level), so that both degrade and report alike.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/statistics.hpp"

namespace cucore::detail {

class remote_health {
 public:
  // `who` begins every message: "redis cache <redacted URL>". The backoff starts at
  // retry_initial after a failure and doubles with each further one up to retry_max.
  remote_health(std::string who, std::chrono::milliseconds retry_initial,
                std::chrono::milliseconds retry_max);
  remote_health(const remote_health&) = delete;
  remote_health& operator=(const remote_health&) = delete;

  const std::string& who() const noexcept { return who_; }

  // Throws cucore::error once close() was called.
  void check_open() const;
  void close() noexcept { closed_.store(true, std::memory_order_release); }
  bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }

  // True while the backoff after a failure runs: the call returns at once, counted as an error.
  bool backing_off();
  // A failure of the server: counted, the backoff started or doubled, logged (a warning for the
  // first failure of an outage, debug level for the rest).
  void failed(const std::string& why);
  // The server did what was asked: the next failure starts the backoff afresh.
  void answered();
  // The server is reachable (again): ends an outage, saying so at info level.
  void reachable();
  // A failure of one call that says nothing about the server: counted, logged at debug level.
  void note_error(std::string_view what) noexcept;
  // The server is up but will not take puts (a refusal that will not fix itself): counted, and
  // logged as "<who> refused a put: <why>", the first time as a warning with " (<first_note>)".
  void put_refused(const std::string& why, std::string_view first_note);

  // The counters stats() reports; record_statistics_in also counts them into `store`.
  cache_counters& counters() const noexcept { return counters_; }
  cache_stats stats() const noexcept { return counters_.snapshot(); }
  void record_statistics_in(std::shared_ptr<cache_statistics> store, cache_tier tier);

 private:
  const std::string who_;
  const std::chrono::milliseconds retry_initial_;
  const std::chrono::milliseconds retry_max_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> refusal_logged_{false};
  mutable cache_counters counters_;
  std::shared_ptr<cache_statistics> statistics_;  // kept alive for counters_

  std::mutex mutex_;  // guards the backoff below
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::milliseconds backoff_{0};
  bool outage_logged_ = false;
};

}  // namespace cucore::detail
