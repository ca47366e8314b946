// A mixed get/put/erase workload for cache tests, shared by the backends' multi-process and
// crash tests. Every value is derived from its key and a version, so any reader in any process can
// check what it got: a wrong value is never a matter of timing.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cucore/cache/program_cache.hpp"

namespace cucore::testing {

inline std::string workload_key(std::uint32_t index) {
  return "workload-key-" + std::to_string(index);
}

// Deterministic code for (index, version): a PTX-typed payload whose length (64 B .. ~64 KiB)
// and bytes depend on both, plus a name and a symbol mapping that depend on both.
inline object_code workload_value(std::uint32_t index, std::uint32_t version) {
  std::mt19937_64 rng((std::uint64_t{index} << 32) | version);
  const std::size_t length = 64 + static_cast<std::size_t>(rng() % 65536);
  std::vector<std::byte> bytes(length);
  for (std::size_t i = 0; i < length; i += 8) {
    const std::uint64_t word = rng();
    std::memcpy(bytes.data() + i, &word, std::min<std::size_t>(8, length - i));
  }
  std::string tag = std::to_string(index) + ":" + std::to_string(version);
  symbol_map symbols{{"expr<" + tag + ">", "_Z" + tag}};
  return object_code(code_type::cubin, std::move(bytes), "name-" + tag, std::move(symbols));
}

// True when `code` is workload_value(index, v) for some v (the version is read from the name).
inline bool is_valid_workload_value(std::uint32_t index, const object_code& code) {
  const std::string prefix = "name-" + std::to_string(index) + ":";
  if (code.name().rfind(prefix, 0) != 0) return false;
  std::uint32_t version = 0;
  try {
    version = static_cast<std::uint32_t>(std::stoul(code.name().substr(prefix.size())));
  } catch (...) {
    return false;
  }
  return code == workload_value(index, version);
}

struct workload_result {
  std::uint64_t gets = 0;
  std::uint64_t hits = 0;
  std::uint64_t puts = 0;
  std::uint64_t erases = 0;
  std::uint64_t wrong = 0;   // a hit whose value was not valid for its key
  std::uint64_t errors = 0;  // an exception from the cache
};

// `operations` random operations over `key_count` keys: 60% get, 30% put, 10% erase.
inline workload_result run_workload(program_cache& cache, std::uint64_t seed,
                                    std::uint32_t key_count, std::uint64_t operations) {
  workload_result r;
  std::mt19937_64 rng(seed);
  for (std::uint64_t i = 0; i < operations; ++i) {
    const auto index = static_cast<std::uint32_t>(rng() % key_count);
    const auto dice = rng() % 10;
    const std::string key = workload_key(index);
    try {
      if (dice < 6) {
        ++r.gets;
        if (auto hit = cache.get(key)) {
          ++r.hits;
          if (!is_valid_workload_value(index, *hit)) ++r.wrong;
        }
      } else if (dice < 9) {
        ++r.puts;
        cache.put(key, workload_value(index, static_cast<std::uint32_t>(rng() % 4)));
      } else {
        ++r.erases;
        cache.erase(key);
      }
    } catch (...) {
      ++r.errors;
    }
  }
  return r;
}

// The counts of `results`, added up.
inline workload_result sum(const std::vector<workload_result>& results) {
  workload_result total;
  for (const auto& r : results) {
    total.gets += r.gets;
    total.hits += r.hits;
    total.puts += r.puts;
    total.erases += r.erases;
    total.wrong += r.wrong;
    total.errors += r.errors;
  }
  return total;
}

// run_workload in `threads` threads at once on one cache, thread t with seed `first_seed + t`;
// their results, in thread order.
inline std::vector<workload_result> run_workload_in_threads(program_cache& cache,
                                                            std::size_t threads,
                                                            std::uint64_t first_seed,
                                                            std::uint32_t key_count,
                                                            std::uint64_t operations) {
  std::vector<workload_result> results(threads);
  std::vector<std::thread> running;
  for (std::size_t t = 0; t < threads; ++t) {
    running.emplace_back(
        [&, t] { results[t] = run_workload(cache, first_seed + t, key_count, operations); });
  }
  for (auto& th : running) th.join();
  return results;
}

// Every workload got only right values and no exceptions, and they hit at least once.
inline void expect_clean(const std::vector<workload_result>& results) {
  for (const auto& r : results) {
    EXPECT_EQ(r.wrong, 0u);
    EXPECT_EQ(r.errors, 0u);
  }
  EXPECT_GT(sum(results).hits, 0u);
}

}  // namespace cucore::testing
