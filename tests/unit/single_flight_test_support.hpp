// The single-flight tests' shared pieces (single_flight*_test.cpp): a sample value, a forked
// child killed at the end of its scope, and threads that miss one key at once.
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/single_flight.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/cache/tiered.hpp"
#include "process_support.hpp"
#include "redis_test_support.hpp"
#include "remote_tier_support.hpp"
#include "test_support.hpp"

namespace cucore::single_flight_testing {

using namespace std::chrono_literals;

inline object_code sample(char fill) {
  return object_code(code_type::cubin, std::vector<std::byte>(64, std::byte(fill)), "sample");
}

// Kills and reaps a forked child when it goes out of scope (an assertion that returns early must
// not leave it running), unless reap() did already.
class child_guard {
 public:
  explicit child_guard(pid_t pid) noexcept : pid_(pid) {}
  child_guard(const child_guard&) = delete;
  child_guard& operator=(const child_guard&) = delete;
  ~child_guard() {
    if (pid_ > 0) (void)testing::kill_after(pid_, 0us);
  }
  // SIGKILLs it now: true when the SIGKILL is what ended it.
  bool reap() {
    const bool killed = testing::kill_after(pid_, 0us);
    pid_ = -1;
    return killed;
  }

 private:
  pid_t pid_;
};

// Two cache objects on one store (as two processes would have), by backend.

// `threads` threads miss one key at once; the compile takes `compile_time` and counts itself.
struct stampede_result {
  int compiles = 0;
  int most_at_once = 0;  // compiles running at the same time, at most
  std::vector<flight_outcome> outcomes;
  std::vector<std::string> errors;
  std::vector<object_code> codes;
};

inline stampede_result thread_stampede(program_cache& cache, int threads,
                                       std::chrono::milliseconds compile_time, bool fail = false) {
  std::atomic<int> compiles{0};
  std::atomic<int> arrived{0};
  std::atomic<int> active{0};
  std::atomic<int> most_at_once{0};
  stampede_result out;
  out.outcomes.resize(static_cast<std::size_t>(threads));
  out.errors.resize(static_cast<std::size_t>(threads));
  out.codes.resize(static_cast<std::size_t>(threads), sample('?'));
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      arrived.fetch_add(1);
      while (arrived.load() < threads) std::this_thread::yield();
      try {
        flight_result r = get_or_compile(
            cache, "slow kernel",
            [&] {
              compiles.fetch_add(1);
              const int now = active.fetch_add(1) + 1;
              for (int seen = most_at_once.load();
                   now > seen && !most_at_once.compare_exchange_weak(seen, now);) {
              }
              std::this_thread::sleep_for(compile_time);
              active.fetch_sub(1);
              if (fail) throw std::runtime_error("error: expected a ';'");
              return sample('c');
            },
            [&](const object_code& code) { cache.put("slow kernel", code); });
        out.outcomes[static_cast<std::size_t>(i)] = r.outcome;
        out.codes[static_cast<std::size_t>(i)] = std::move(r.code);
      } catch (const std::exception& e) {
        out.errors[static_cast<std::size_t>(i)] = e.what();
      }
    });
  }
  for (auto& t : pool) t.join();
  out.compiles = compiles.load();
  out.most_at_once = most_at_once.load();
  return out;
}

}  // namespace cucore::single_flight_testing
