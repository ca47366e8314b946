// A local cache in front of a remote one (typically a directory or SQLite cache in front of
// redis_program_cache): the fleet shares compiles through the remote tier, and each machine pays
// the network only on its first use of an entry.
//
//   get  the local tier; on a local miss, the remote tier, and a remote hit is written to the
//        local tier (backfill), so the next get of that key is a local hit.
//   put  the local tier, then the remote tier, synchronously: one round trip (a SET) per compile
//        that missed. A compile that missed already paid one remote round trip (its GET), so a
//        miss costs two; a hit in either tier costs at most one.
//   erase both tiers.
//
// Maintenance (size, size_bytes, list, verify, trim, clear) works on the local tier only: the
// remote tier is shared by the fleet, and wiping or trimming it is a decision for its own tool
// (open the remote alone: `cucore cache clear --cache redis://...`). compiler_version_memo() is
// the local tier's.
//
// The remote tier never fails a compile: anything it throws from get, put or erase is caught,
// logged (the first at warning level, then debug) and counted in stats().errors; a remote get
// that throws is a miss. The local tier's own failure policy (write_failure_policy) is kept.
//
// Thread safety: as the tiers' (the backends cucore ships are all thread-safe).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "cucore/cache/program_cache.hpp"

namespace cucore {

// Counts of one tiered cache, with each tier's own.
struct tiered_cache_stats {
  std::uint64_t local_hits = 0;     // gets answered by the local tier
  std::uint64_t remote_hits = 0;    // gets answered by the remote tier (each backfilled)
  std::uint64_t misses = 0;         // gets neither tier answered
  std::uint64_t remote_errors = 0;  // exceptions from the remote tier, caught
  cache_stats local;                // local->stats()
  cache_stats remote;               // remote->stats()
};

class tiered_program_cache final : public program_cache {
 public:
  // Takes both tiers; neither may be null (invalid_argument).
  tiered_program_cache(std::unique_ptr<program_cache> local, std::unique_ptr<program_cache> remote);
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
  std::optional<std::filesystem::path> compiler_version_memo() const override;
  void close() noexcept override;

  program_cache& local() noexcept { return *local_; }
  program_cache& remote() noexcept { return *remote_; }
  const program_cache& local() const noexcept { return *local_; }
  const program_cache& remote() const noexcept { return *remote_; }

 private:
  void remote_failed(const char* operation, const std::exception& e) noexcept;

  std::unique_ptr<program_cache> local_;
  std::unique_ptr<program_cache> remote_;
  std::atomic<std::uint64_t> local_hits_{0}, remote_hits_{0}, misses_{0}, puts_{0},
      remote_errors_{0};
  std::atomic<bool> remote_failure_logged_{false};
};

}  // namespace cucore
