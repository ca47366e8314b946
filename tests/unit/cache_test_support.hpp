// Helpers for the tests of cucore's caches that need cucore's public headers: what cucore logs,
// a round trip through a cache, and a cache that forwards to another one.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cucore/cache/program_cache.hpp"
#include "cucore/log.hpp"

namespace cucore::testing {

// Collects what cucore logs while alive.
class log_capture {
 public:
  log_capture() {
    previous_ = set_log_handler([this](log_level level, std::string_view message) {
      std::lock_guard lock(mutex_);
      messages_.emplace_back(level, std::string(message));
    });
  }
  log_capture(const log_capture&) = delete;
  log_capture& operator=(const log_capture&) = delete;
  ~log_capture() { set_log_handler(std::move(previous_)); }

  // The messages at `level`, in order.
  std::vector<std::string> at(log_level level) const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [l, m] : messages_) {
      if (l == level) out.push_back(m);
    }
    return out;
  }
  // How many messages at `level` contain `needle`.
  std::size_t count(log_level level, std::string_view needle = {}) const {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& [l, m] : messages_) {
      if (l == level && m.find(needle) != std::string::npos) ++n;
    }
    return n;
  }
  std::size_t warnings(std::string_view needle = {}) const {
    return count(log_level::warning, needle);
  }
  // Every message, one a line.
  std::string all() const {
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& [l, m] : messages_) out += m + "\n";
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<log_level, std::string>> messages_;
  log_handler previous_;
};

// Puts a PTX entry with two symbols and gets it back: the whole object code comes back (bytes,
// type, name, the symbol mapping).
inline void expect_round_trip(program_cache& cache) {
  const object_code code(code_type::ptx, {std::byte{1}, std::byte{2}, std::byte{3}}, "kernel.cu",
                         symbol_map{{"k<float>", "_Z1kIfEvv"}, {"k<int>", "_Z1kIiEvv"}});
  cache.put("key", code);
  auto hit = cache.get("key");
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, code);
  EXPECT_EQ(hit->type(), code_type::ptx);
  EXPECT_EQ(hit->name(), "kernel.cu");
  EXPECT_EQ(hit->symbol("k<float>"), "_Z1kIfEvv") << "symbol mapping survives a round trip";
  EXPECT_EQ(hit->symbol("k<int>"), "_Z1kIiEvv");
  EXPECT_EQ(hit->symbol_mapping().size(), 2u);
}

// Forwards every call to another cache: a pass-through, not a fake. A test derives from it and
// overrides what it changes; everything else reaches the real cache.
class forwarding_cache : public program_cache {
 public:
  explicit forwarding_cache(program_cache& inner) : inner_(inner) {}
  std::optional<object_code> get(cache_key_ref key) override { return inner_.get(key); }
  void put(cache_key_ref key, const object_code& code) override { inner_.put(key, code); }
  bool erase(cache_key_ref key) override { return inner_.erase(key); }
  std::size_t size() override { return inner_.size(); }
  std::uint64_t size_bytes() override { return inner_.size_bytes(); }
  void clear() override { inner_.clear(); }
  cache_stats stats() const override { return inner_.stats(); }
  std::vector<cache_entry_info> list() override { return inner_.list(); }
  cache_verify_report verify(bool remove_bad) override { return inner_.verify(remove_bad); }
  std::size_t trim(std::uint64_t max) override { return inner_.trim(max); }
  std::string description() const override { return inner_.description(); }

 private:
  program_cache& inner_;
};

}  // namespace cucore::testing
