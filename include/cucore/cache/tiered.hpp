// A local cache in front of a remote one (typically a directory or SQLite cache in front of
// redis_program_cache): the fleet shares compiles through the remote tier, and each machine pays
// the network only on its first use of an entry.
//
//   get  the local tier; on a local miss, the remote tier, and a remote hit is written to the
//        local tier (backfill), so the next get of that key is a local hit.
//   put  the local tier at once; the remote tier by a background writer (write_behind, the
//        default), so the compile that missed pays one remote round trip in all (its GET) and
//        none for its store. The writer starts on the first put, takes the puts in order, and
//        drops a put (counted in tier_stats().remote_puts_dropped) rather than make a compile
//        wait when max_pending_puts are already waiting. flush() waits for the writer; close()
//        and the destructor flush, then stop it, so a process that compiles and exits has
//        stored its entries remotely (a server that hangs delays the exit by at most about one
//        command timeout: the remote tier's backoff drops the rest at once). Without
//        write_behind, put writes the remote tier before it returns (one more round trip).
//   erase both tiers (after a flush, so a pending put cannot bring the entry back).
//
// A tier that is a read-only layer (program_cache::read_only(); docs/cache-layers.md) is looked
// up and never written: no backfill into it, no put, erase or claim.
//
// Maintenance (size, size_bytes, list, verify, trim, clear) works on the local tier only: the
// remote tier is shared by the fleet, and wiping or trimming it is a decision for its own tool
// (open the remote alone: `cucore cache clear --cache redis://...`). compiler_version_memo() is
// the local tier's, and so are the persistent statistics (statistics()): the remote tier's events
// are counted there as cache_tier::remote.
//
// The remote tier never fails a compile: anything it throws from get, put or erase is caught,
// logged (the first at warning level, then debug) and counted in stats().errors; a remote get
// that throws is a miss. The local tier's own failure policy (write_failure_policy) is kept.
//
// Single-flight (try_claim): the local tier's claim, then the remote tier's. With write_behind,
// the remote claim is released by the writer after the puts queued before the release, so that
// another machine's waiter finds the entry once the claim is gone.
//
// Thread safety: as the tiers' (the backends cucore ships are all thread-safe). The remote tier
// is called from the writer thread too. With write_behind, a cache that has been written to must
// not be used in a child after fork() (the writer thread is not in the child).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cucore/cache/program_cache.hpp"

namespace cucore {

// Counts of one tiered cache, with each tier's own.
struct tiered_cache_stats {
  std::uint64_t local_hits = 0;           // gets answered by the local tier
  std::uint64_t remote_hits = 0;          // gets answered by the remote tier (each backfilled)
  std::uint64_t misses = 0;               // gets neither tier answered
  std::uint64_t remote_errors = 0;        // exceptions from the remote tier, caught
  std::uint64_t remote_puts_dropped = 0;  // write-behind puts dropped: too many already waiting
  std::size_t remote_puts_pending = 0;    // write-behind puts not yet done
  cache_stats local;                      // local->stats()
  cache_stats remote;                     // remote->stats()
};

struct tiered_cache_options {
  // Remote puts on a background thread: see the top of this file.
  bool write_behind = true;
  // With write_behind, puts beyond this many waiting are dropped (the local tier has them).
  std::size_t max_pending_puts = 256;
};

class tiered_program_cache final : public program_cache {
 public:
  // Takes both tiers; neither may be null, and max_pending_puts not 0 (invalid_argument).
  tiered_program_cache(std::unique_ptr<program_cache> local, std::unique_ptr<program_cache> remote,
                       tiered_cache_options options = {});
  ~tiered_program_cache() override;
  tiered_program_cache(const tiered_program_cache&) = delete;
  tiered_program_cache& operator=(const tiered_program_cache&) = delete;

  std::optional<object_code> get(cache_key_ref key) override;
  void put(cache_key_ref key, const object_code& code) override;
  bool erase(cache_key_ref key) override;
  std::size_t size() override;
  std::uint64_t size_bytes() override;
  void clear() override;
  // hits: either tier; misses: neither; puts: this object's puts; errors, evictions,
  // corrupt_dropped: both tiers' (errors also the remote exceptions caught here).
  cache_stats stats() const override;
  tiered_cache_stats tier_stats() const;
  std::vector<cache_entry_info> list() override;
  cache_verify_report verify(bool remove_bad) override;
  std::size_t trim(std::uint64_t max_size_bytes) override;
  // "LOCAL + REMOTE" in the tiers' own words.
  std::string description() const override;
  // Both tiers read-only layers (then nothing is ever written).
  bool read_only() const noexcept override { return local_->read_only() && remote_->read_only(); }
  std::optional<std::filesystem::path> compiler_version_memo() const override;
  // Claims the local tier first (processes on this machine wait for each other), then the remote
  // one (machines wait for each other). Held elsewhere on either: held elsewhere (the local claim
  // is released: local waiters then wait on the remote claim too). A remote tier that cannot
  // claim (down, read-only) leaves the local claim alone in force.
  claim_result try_claim(cache_key_ref key, std::chrono::milliseconds lease) override;
  // Both tiers' (a change in either changes it).
  std::uint64_t claim_abandonments(cache_key_ref key) override;
  // Both tiers' watches, waited on together.
  std::unique_ptr<claim_watch> watch_claim(cache_key_ref key) override;
  // The local tier's statistics, into which the remote tier's events are counted too (as
  // cache_tier::remote), remote exceptions caught here included.
  std::shared_ptr<cache_statistics> statistics() const override { return statistics_; }
  // Both tiers count into `store` as `tier` (a tiered cache behind another: read-only layers).
  void record_statistics_in(std::shared_ptr<cache_statistics> store, cache_tier tier) override {
    local_->record_statistics_in(store, tier);
    remote_->record_statistics_in(std::move(store), tier);
  }
  // Flushes, stops the writer, closes both tiers.
  void close() noexcept override;
  // Returns once every put made before the call has reached the remote tier (or failed there).
  void flush();

  program_cache& local() noexcept { return *local_; }
  program_cache& remote() noexcept { return *remote_; }
  const program_cache& local() const noexcept { return *local_; }
  const program_cache& remote() const noexcept { return *remote_; }

 private:
  // A put for the writer, or (code empty) a remote claim to release once the puts queued before
  // it are done, so that a waiter on another machine finds the entry when the claim goes.
  struct pending_put {
    std::vector<std::byte> key;
    std::optional<object_code> code;
    std::unique_ptr<cache_claim> claim;
  };

  void remote_failed(const char* operation, const std::exception& e) noexcept;
  void remote_put(cache_key_ref key, const object_code& code) noexcept;
  void write_behind_loop() noexcept;
  void stop_writer() noexcept;
  void release_remote_claim(std::unique_ptr<cache_claim> claim) noexcept;
  friend struct tiered_claim;

  std::unique_ptr<program_cache> local_;
  std::unique_ptr<program_cache> remote_;
  tiered_cache_options options_;
  std::shared_ptr<cache_statistics> statistics_;  // the local tier's (or null)

  mutable std::mutex queue_mutex_;   // guards the queue and the writer's state below
  std::condition_variable work_cv_;  // a put was queued, or stopping_
  std::condition_variable idle_cv_;  // the queue emptied and the writer is idle
  std::deque<pending_put> queue_;
  bool writing_ = false;   // the writer is inside a remote put
  bool stopping_ = false;  // the writer ends once the queue is empty
  std::thread writer_;
  std::atomic<std::uint64_t> remote_puts_dropped_{0};
  std::atomic<bool> drop_logged_{false};
  std::atomic<std::uint64_t> local_hits_{0}, remote_hits_{0}, misses_{0}, puts_{0},
      remote_errors_{0};
  std::atomic<bool> remote_failure_logged_{false};
};

}  // namespace cucore
