// An in-process LRU program cache.
#pragma once

#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "cucore/cache/program_cache.hpp"

namespace cucore {

struct in_memory_cache_options {
  std::optional<std::size_t> max_entries{};       // evict least recently used beyond this many
  std::optional<std::uint64_t> max_size_bytes{};  // ... or beyond this many code bytes
};

// Thread-safe. Entries are immutable and shared: a hit hands out the stored object_code (a
// reference-counted handle), never a copy of the bytes. A read promotes the entry. An entry larger
// than max_size_bytes evicts itself on insertion (it is never stored).
class in_memory_program_cache final : public program_cache {
 public:
  explicit in_memory_program_cache(in_memory_cache_options options = {});

  std::optional<object_code> get(cache_key_ref key) override;
  void put(cache_key_ref key, const object_code& code) override;
  bool erase(cache_key_ref key) override;
  std::size_t size() override;
  std::uint64_t size_bytes() override;
  void clear() override;
  cache_stats stats() const override;
  std::vector<cache_entry_info> list() override;
  cache_verify_report verify(bool remove_bad) override;
  std::size_t trim(std::uint64_t max_size_bytes) override;
  std::string description() const override { return "in-memory"; }
  // Single-flight between the threads of this process (the cache is not shared beyond it).
  claim_result try_claim(cache_key_ref key, std::chrono::milliseconds lease) override;
  // Abandoned claims of this object (any key).
  std::uint64_t claim_abandonments(cache_key_ref key) override;
  // Wakes a waiting thread when a claim of this object is released or an entry is put.
  std::unique_ptr<claim_watch> watch_claim(cache_key_ref key) override;

 private:
  struct entry {
    std::string key;
    object_code code;
  };
  using lru_list = std::list<entry>;  // front: most recently used
  struct key_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view k) const noexcept {
      return std::hash<std::string_view>{}(k);
    }
  };
  // Evicts from the cold end while `over()` holds; returns how many were evicted.
  template <class Over>
  std::size_t evict_locked(Over over);

  in_memory_cache_options options_;
  mutable std::mutex mutex_;
  lru_list lru_;
  std::unordered_map<std::string, lru_list::iterator, key_hash, std::equal_to<>> index_;
  std::uint64_t total_bytes_ = 0;
  // Keys claimed for a compile (single-flight), guarded by mutex_.
  std::unordered_set<std::string, key_hash, std::equal_to<>> claimed_;
  std::uint64_t abandoned_ = 0;      // claims abandoned (guarded by mutex_)
  std::uint64_t changes_ = 0;        // claims released and entries put (guarded by mutex_)
  std::condition_variable changed_;  // notified with each change
  friend class in_memory_claim;
  friend class in_memory_watch;
  cache_stats stats_;
};

}  // namespace cucore
