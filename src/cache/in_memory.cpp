#include "cucore/cache/in_memory.hpp"

#include <new>
#include <string_view>
#include <utility>

#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"

namespace cucore {
namespace {

// What an entry holds: the code and the Tile IR compiled alongside it.
std::size_t held_bytes(const object_code& code) {
  const auto tile_ir = code.tile_ir();
  return code.size() + (tile_ir ? tile_ir->size() : 0);
}

}  // namespace

// Erases its key from the cache's claimed set when destroyed, if it put it there.
class in_memory_claim final : public cache_claim {
 public:
  in_memory_claim(in_memory_program_cache& cache, std::string_view key)
      : cache_(cache), key_(key) {}
  ~in_memory_claim() override {
    if (!held_) return;
    std::lock_guard lock(cache_.mutex_);
    cache_.claimed_.erase(key_);
    ++cache_.changes_;
    cache_.changed_.notify_all();
  }
  void abandon() noexcept override {
    std::lock_guard lock(cache_.mutex_);
    ++cache_.abandoned_;
  }
  // Takes the key if free (called with the cache's mutex held).
  bool take_locked() {
    held_ = cache_.claimed_.insert(key_).second;
    return held_;
  }

 private:
  in_memory_program_cache& cache_;
  std::string key_;
  bool held_ = false;
};

claim_result in_memory_program_cache::try_claim(cache_key_ref key, std::chrono::milliseconds) {
  try {
    auto claim = std::make_unique<in_memory_claim>(*this, key.as_string_view());
    {
      std::lock_guard lock(mutex_);
      if (!claim->take_locked()) return {claim_status::held_elsewhere, nullptr};
    }
    return {claim_status::owned, std::move(claim)};
  } catch (const std::bad_alloc&) {
    return {};
  }
}

// Waits for the next claim release or put of the cache (any key: the caller looks).
class in_memory_watch final : public claim_watch {
 public:
  explicit in_memory_watch(in_memory_program_cache& cache) noexcept : cache_(cache) {}
  bool wait(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(cache_.mutex_);
    const std::uint64_t seen = cache_.changes_;
    return cache_.changed_.wait_for(lock, timeout, [&] { return cache_.changes_ != seen; });
  }

 private:
  in_memory_program_cache& cache_;
};

std::uint64_t in_memory_program_cache::claim_abandonments(cache_key_ref) {
  std::lock_guard lock(mutex_);
  return abandoned_;
}

std::unique_ptr<claim_watch> in_memory_program_cache::watch_claim(cache_key_ref) {
  try {
    return std::make_unique<in_memory_watch>(*this);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

in_memory_program_cache::in_memory_program_cache(in_memory_cache_options options)
    : options_(options) {
  if (options_.max_entries && *options_.max_entries == 0) {
    throw invalid_argument("max_entries must be positive or unset (0 would evict every write)");
  }
  if (options_.max_size_bytes && *options_.max_size_bytes == 0) {
    throw invalid_argument("max_size_bytes must be positive or unset (0 would evict every write)");
  }
}

std::optional<object_code> in_memory_program_cache::get(cache_key_ref key) {
  std::lock_guard lock(mutex_);
  auto it = index_.find(key.as_string_view());
  if (it == index_.end()) {
    // A lookup single-flight repeats while another thread compiles is waiting, not a miss.
    if (!detail::waiting_for_entry) ++stats_.misses;
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it->second);  // promote; iterators stay valid
  ++stats_.hits;
  return it->second->code;
}

void in_memory_program_cache::put(cache_key_ref key, const object_code& code) {
  std::lock_guard lock(mutex_);
  ++stats_.puts;
  auto it = index_.find(key.as_string_view());
  if (it != index_.end()) {
    total_bytes_ -= held_bytes(it->second->code);
    it->second->code = code;
    lru_.splice(lru_.begin(), lru_, it->second);
  } else {
    lru_.push_front(entry{std::string(key.as_string_view()), code});
    try {
      index_.emplace(lru_.front().key, lru_.begin());
    } catch (...) {
      lru_.pop_front();
      throw;
    }
  }
  total_bytes_ += held_bytes(code);
  evict_locked([&] {
    return (options_.max_entries && lru_.size() > *options_.max_entries) ||
           (options_.max_size_bytes && total_bytes_ > *options_.max_size_bytes);
  });
  // An entry larger than the cap evicted itself: nothing stored, as if the store had failed.
  if (index_.find(key.as_string_view()) == index_.end()) ++abandoned_;
  ++changes_;
  changed_.notify_all();
}

template <class Over>
std::size_t in_memory_program_cache::evict_locked(Over over) {
  std::size_t evicted = 0;
  while (!lru_.empty() && over()) {
    const entry& victim = lru_.back();
    total_bytes_ -= held_bytes(victim.code);
    index_.erase(victim.key);
    lru_.pop_back();
    ++stats_.evictions;
    ++evicted;
  }
  return evicted;
}

bool in_memory_program_cache::erase(cache_key_ref key) {
  std::lock_guard lock(mutex_);
  auto it = index_.find(key.as_string_view());
  if (it == index_.end()) return false;
  total_bytes_ -= held_bytes(it->second->code);
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

std::size_t in_memory_program_cache::size() {
  std::lock_guard lock(mutex_);
  return lru_.size();
}

std::uint64_t in_memory_program_cache::size_bytes() {
  std::lock_guard lock(mutex_);
  return total_bytes_;
}

void in_memory_program_cache::clear() {
  std::lock_guard lock(mutex_);
  index_.clear();
  lru_.clear();
  total_bytes_ = 0;
}

cache_stats in_memory_program_cache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace cucore

namespace cucore {

std::vector<cache_entry_info> in_memory_program_cache::list() {
  std::lock_guard lock(mutex_);
  std::vector<cache_entry_info> out;
  out.reserve(lru_.size());
  for (const auto& e : lru_) {
    auto key = std::as_bytes(std::span<const char>(e.key.data(), e.key.size()));
    out.push_back(cache_entry_info{{key.begin(), key.end()},
                                   e.code.type(),
                                   e.code.name(),
                                   e.code.symbol_mapping().size(),
                                   e.code.size(),
                                   e.code.size(),
                                   std::nullopt});
  }
  return out;
}

cache_verify_report in_memory_program_cache::verify(bool) {
  // Entries live in this process's memory and are immutable: nothing can damage them.
  std::lock_guard lock(mutex_);
  cache_verify_report report;
  report.entries = report.ok = lru_.size();
  return report;
}

std::size_t in_memory_program_cache::trim(std::uint64_t max_size_bytes) {
  std::lock_guard lock(mutex_);
  return evict_locked([&] { return total_bytes_ > max_size_bytes; });
}

}  // namespace cucore
