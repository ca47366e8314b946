// Single-flight claims (program_cache::try_claim) and get_or_compile, in one process: each local
// backend's claim (directory and SQLite: a lock held by an open file; in-memory: a set), a claim
// that dies with its process, the settings, and threads that miss one key at once. The compiles
// here are callbacks that count their calls. Redis, holders that die and watches are in
// single_flight_processes_test.cpp; single_flight_stress_test has real NVRTC.
#include <stdlib.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/statistics.hpp"
#include "redis_test_support.hpp"
#include "remote_tier_support.hpp"
#include "single_flight_test_support.hpp"

namespace cucore {
namespace {

using namespace cucore::testing;  // NOLINT: the single-flight tests' helpers

TEST(SingleFlightClaims, DirectoryCache) {
  temp_dir dir;
  file_stream_program_cache a(dir.path()), b(dir.path());
  expect_claims_exclusive(a, b);
  // The claims file is outside entries/: not an entry, not touched by clear().
  a.put("k", sample('x'));
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(a.verify(true).corrupt, 0u);
  a.clear();
  EXPECT_EQ(a.size(), 0u);
}

TEST(SingleFlightClaims, SqliteCache) {
  temp_dir dir;
  sqlite_program_cache a(dir / "cache.db"), b(dir / "cache.db");
  expect_claims_exclusive(a, b);
}

TEST(SingleFlightClaims, InMemoryCacheWithinTheObject) {
  in_memory_program_cache a;
  expect_claims_exclusive(a, a);
}

TEST(SingleFlightClaims, CustomCacheCannotClaim) {
  // A backend that does not override try_claim: unsupported, and get_or_compile compiles.
  struct plain final : program_cache {
    std::optional<object_code> get(cache_key_ref) override { return std::nullopt; }
    void put(cache_key_ref, const object_code&) override {}
    bool erase(cache_key_ref) override { return false; }
    std::size_t size() override { return 0; }
    std::uint64_t size_bytes() override { return 0; }
    void clear() override {}
    cache_stats stats() const override { return {}; }
    std::vector<cache_entry_info> list() override { return {}; }
    cache_verify_report verify(bool) override { return {}; }
    std::size_t trim(std::uint64_t) override { return 0; }
    std::string description() const override { return "plain"; }
  } cache;
  EXPECT_EQ(cache.try_claim("k", 1s).status, claim_status::unsupported);
  const flight_result r = get_or_compile(
      cache, "k", [] { return sample('p'); }, [](const object_code&) {});
  EXPECT_EQ(r.outcome, flight_outcome::unclaimed);
}

// A claim held by a process dies with it: a SIGKILLed holder's lock is released by the kernel.
TEST(SingleFlightClaims, DirectoryClaimDiesWithItsProcess) {
  temp_dir dir;
  std::optional<child_guard> holder;
  ASSERT_NO_FATAL_FAILURE(fork_claim_holder(
      [&] { return std::make_unique<file_stream_program_cache>(dir.path()); }, 10s, holder));
  file_stream_program_cache cache(dir.path());
  EXPECT_EQ(cache.try_claim("k", 10s).status, claim_status::held_elsewhere);
  EXPECT_TRUE(holder->reap());
  EXPECT_EQ(cache.try_claim("k", 10s).status, claim_status::owned);
}

// ---------------------------------------------------------------------------------------------
// get_or_compile with threads

// `threads` threads miss one key at once; the compile takes `compile_time` and counts itself.
struct stampede_result {
  int compiles = 0;
  int most_at_once = 0;  // compiles running at the same time, at most
  std::vector<flight_outcome> outcomes;
  std::vector<std::string> errors;
  std::vector<object_code> codes;
};

stampede_result thread_stampede(program_cache& cache, int threads,
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

void expect_one_compile(const stampede_result& r) {
  EXPECT_EQ(r.compiles, 1);
  int compiled = 0;
  for (std::size_t i = 0; i < r.outcomes.size(); ++i) {
    EXPECT_EQ(r.errors[i], "");
    EXPECT_EQ(r.codes[i], sample('c'));
    if (r.outcomes[i] == flight_outcome::compiled) {
      ++compiled;
    } else {
      EXPECT_TRUE(r.outcomes[i] == flight_outcome::waited || r.outcomes[i] == flight_outcome::hit)
          << to_string(r.outcomes[i]);
    }
  }
  EXPECT_EQ(compiled, 1);
}

TEST(SingleFlightThreads, InMemoryOneCompile) {
  in_memory_program_cache cache;
  expect_one_compile(thread_stampede(cache, 8, 200ms));
}

TEST(SingleFlightThreads, DirectoryOneCompile) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path());
  expect_one_compile(thread_stampede(cache, 8, 200ms));
}

TEST(SingleFlightThreads, SqliteOneCompile) {
  temp_dir dir;
  sqlite_program_cache cache(dir / "c.db");
  expect_one_compile(thread_stampede(cache, 8, 200ms));
}

// Waiting is not missing: the lookups a waiter repeats while another thread compiles count
// neither in stats() nor in the persistent statistics. Each thread's first lookup counts (a miss,
// or a hit), an entry a waiter finds counts as a hit, and the persistent compile counters see one
// compile and every other thread answered from the cache.
TEST(SingleFlightThreads, WaitersLookupsAreNotCountedAsMisses) {
  for (const bool sqlite : {false, true}) {
    SCOPED_TRACE(sqlite ? "SQLite" : "directory");
    temp_dir dir;
    std::unique_ptr<program_cache> cache;
    if (sqlite) {
      cache = std::make_unique<sqlite_program_cache>(dir / "c.db");
    } else {
      cache = std::make_unique<file_stream_program_cache>(dir.path());
    }
    const stampede_result r = thread_stampede(*cache, 8, 300ms);
    expect_one_compile(r);
    std::uint64_t compiled = 0, waited = 0, hit = 0;
    for (const flight_outcome o : r.outcomes) {
      compiled += o == flight_outcome::compiled;
      waited += o == flight_outcome::waited;
      hit += o == flight_outcome::hit;
    }
    EXPECT_GT(waited, 0u) << "the stampede had no waiter: the test did not test anything";
    const cache_stats s = cache->stats();
    EXPECT_EQ(s.misses, compiled + waited);
    EXPECT_EQ(s.hits, waited + hit);
    const auto store = cache->statistics();
    ASSERT_NE(store, nullptr);
    const persistent_cache_stats p = store->read();
    EXPECT_EQ(p.local.misses, compiled + waited);
    EXPECT_EQ(p.local.hits, waited + hit);
    EXPECT_EQ(p.compiles, 1u);
    EXPECT_EQ(p.compile_hits, waited + hit);
  }
}

// The environment sets what every cache object starts with (Python and programs that do not
// call set_single_flight); a malformed value is ignored.
TEST(SingleFlightSettings, EnvironmentOverridesTheDefaults) {
  EXPECT_TRUE(in_memory_program_cache().single_flight().enabled);
  ::setenv("CUCORE_SINGLE_FLIGHT", "off", 1);
  ::setenv("CUCORE_SINGLE_FLIGHT_WAIT", "2.5", 1);
  in_memory_program_cache off;
  EXPECT_FALSE(off.single_flight().enabled);
  EXPECT_EQ(off.single_flight().max_wait, 2500ms);
  ::setenv("CUCORE_SINGLE_FLIGHT", "perhaps", 1);
  ::setenv("CUCORE_SINGLE_FLIGHT_WAIT", "soon", 1);
  in_memory_program_cache malformed;
  EXPECT_TRUE(malformed.single_flight().enabled);
  EXPECT_EQ(malformed.single_flight().max_wait, single_flight_options{}.max_wait);
  ::unsetenv("CUCORE_SINGLE_FLIGHT");
  ::unsetenv("CUCORE_SINGLE_FLIGHT_WAIT");
}

TEST(SingleFlightThreads, OffEveryThreadCompiles) {
  in_memory_program_cache cache;
  single_flight_options o;
  o.enabled = false;
  cache.set_single_flight(o);
  const stampede_result r = thread_stampede(cache, 4, 100ms);
  EXPECT_EQ(r.compiles, 4);
  for (auto outcome : r.outcomes) EXPECT_EQ(outcome, flight_outcome::unclaimed);
}

// A compile that throws releases the claim; the waiters compile then (side by side, not one after
// another) and each gets the error: nothing is cached, nothing hangs.
TEST(SingleFlightThreads, CompileErrorReleasesTheClaim) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path());
  const stampede_result r = thread_stampede(cache, 6, 300ms, /*fail=*/true);
  EXPECT_EQ(r.compiles, 6);
  for (const auto& e : r.errors) EXPECT_EQ(e, "error: expected a ';'");
  // The first compile alone (the claim held), then the waiters' compiles overlapping (each took
  // over and let go of the claim at once), not one after another.
  EXPECT_GE(r.most_at_once, 2);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.try_claim("slow kernel", 1s).status, claim_status::owned);
}

// A waiter whose holder never finishes gives up after max_wait and compiles itself.
TEST(SingleFlightThreads, WaiterGivesUpAfterMaxWait) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path());
  single_flight_options o;
  o.max_wait = 300ms;
  cache.set_single_flight(o);
  claim_result stuck = cache.try_claim("k", 10s);
  ASSERT_EQ(stuck.status, claim_status::owned);
  int compiles = 0;
  const auto start = std::chrono::steady_clock::now();
  const flight_result r = get_or_compile(
      cache, "k",
      [&] {
        ++compiles;
        return sample('g');
      },
      [&](const object_code& code) { cache.put("k", code); });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.outcome, flight_outcome::gave_up);
  EXPECT_EQ(compiles, 1);
  EXPECT_GE(elapsed, 300ms);
  EXPECT_LT(elapsed, 10s);
  EXPECT_EQ(cache.get("k"), sample('g'));
}

// A holder that stores nothing and releases (its store failed) lets the waiter compile at once.
TEST(SingleFlightThreads, ReleaseWithoutEntryLetsTheWaiterTakeOver) {
  in_memory_program_cache cache;
  claim_result held = cache.try_claim("k", 10s);
  ASSERT_EQ(held.status, claim_status::owned);
  std::thread release([&] {
    std::this_thread::sleep_for(100ms);
    held.claim.reset();
  });
  const flight_result r = get_or_compile(
      cache, "k", [] { return sample('t'); }, [](const object_code&) {});
  release.join();
  EXPECT_EQ(r.outcome, flight_outcome::took_over);
  EXPECT_EQ(r.code, sample('t'));
}

// A compile error is not a death: the waiters compile side by side (each gets the error), not one
// after another, on every backend that claims.
TEST(SingleFlightThreads, CompileErrorWaitersCompileSideBySideEverywhere) {
  redis_server server;
  temp_dir dir;
  std::vector<std::pair<std::string, std::unique_ptr<program_cache>>> caches;
  caches.emplace_back("in-memory", std::make_unique<in_memory_program_cache>());
  caches.emplace_back("sqlite", std::make_unique<sqlite_program_cache>(dir / "c.db"));
  if (server.running()) {
    caches.emplace_back("redis", std::make_unique<redis_program_cache>(redis_test_options(server)));
  }
  for (auto& [name, cache] : caches) {
    SCOPED_TRACE(name);
    const stampede_result r = thread_stampede(*cache, 6, 300ms, /*fail=*/true);
    EXPECT_EQ(r.compiles, 6);
    for (const auto& e : r.errors) EXPECT_EQ(e, "error: expected a ';'");
    EXPECT_GE(r.most_at_once, 2);
    EXPECT_EQ(cache->try_claim("slow kernel", 1s).status, claim_status::owned);
  }
}

// A holder whose store stores nothing (here: an entry larger than the cache's cap) marks the
// claim abandoned: the waiters compile side by side rather than one after another.
TEST(SingleFlightThreads, StoreThatStoresNothingLetsTheWaitersCompileSideBySide) {
  temp_dir dir;
  file_stream_cache_options o;
  o.max_size_bytes = 16;  // every entry is larger: never stored
  file_stream_program_cache cache(dir.path(), o);
  const stampede_result r = thread_stampede(cache, 6, 300ms);
  EXPECT_EQ(r.compiles, 6);
  EXPECT_GE(r.most_at_once, 2);
}

}  // namespace
}  // namespace cucore
