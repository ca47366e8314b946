// Single-flight claims (program_cache::try_claim) and get_or_compile, in one process: each
// backend's claim (directory and SQLite: a lock held by an open file; in-memory: a set; Redis:
// SET NX PX and a compare-and-delete; tiered: both), a claim that dies with its process, and
// threads that miss one key at once. The compiles here are callbacks that count their calls;
// single_flight_stress_test has the real processes and real NVRTC.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
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
#include "single_flight_test_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using namespace std::chrono_literals;
using testing::redis_server;
using testing::redis_test_options;
using testing::temp_dir;
using namespace single_flight_testing;  // single_flight_test_support.hpp

struct cache_pair {
  std::unique_ptr<program_cache> a;
  std::unique_ptr<program_cache> b;
};

// The claim contract every claiming backend keeps: one owner per key at a time, other keys free,
// the claim free again once released.
void expect_claims_exclusive(program_cache& a, program_cache& b) {
  claim_result first = a.try_claim("k", 10s);
  ASSERT_EQ(first.status, claim_status::owned);
  ASSERT_NE(first.claim, nullptr);
  EXPECT_EQ(b.try_claim("k", 10s).status, claim_status::held_elsewhere);
  EXPECT_EQ(a.try_claim("k", 10s).status, claim_status::held_elsewhere);  // same object too
  claim_result other = b.try_claim("other key", 10s);
  EXPECT_EQ(other.status, claim_status::owned);
  first.claim.reset();
  claim_result again = b.try_claim("k", 10s);
  EXPECT_EQ(again.status, claim_status::owned);
  EXPECT_EQ(a.try_claim("k", 10s).status, claim_status::held_elsewhere);
}

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
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = testing::fork_until_killed([&] {
    file_stream_program_cache cache(dir.path());
    claim_result claim = cache.try_claim("k", 10s);
    const char c = claim.status == claim_status::owned ? 'y' : 'n';
    testing::write_all(ready[1], &c, 1);
    for (;;) ::pause();
  });
  ASSERT_GT(holder, 0);
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, 'y');
  file_stream_program_cache cache(dir.path());
  EXPECT_EQ(cache.try_claim("k", 10s).status, claim_status::held_elsewhere);
  EXPECT_TRUE(testing::kill_after(holder, 0us));
  EXPECT_EQ(cache.try_claim("k", 10s).status, claim_status::owned);
}

// ---------------------------------------------------------------------------------------------
// get_or_compile with threads

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

// ---------------------------------------------------------------------------------------------
// Redis: SET NX PX claims

TEST(SingleFlightRedis, ClaimsAreExclusiveAndOutOfTheEntries) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache a(redis_test_options(server)), b(redis_test_options(server));
  expect_claims_exclusive(a, b);
  // A held claim is a key under the prefix, but no entry: maintenance does not see it.
  claim_result held = a.try_claim("k2", 10s);
  ASSERT_EQ(held.status, claim_status::owned);
  a.put("k2", sample('r'));
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(a.list().size(), 1u);
  EXPECT_EQ(a.verify(true).corrupt, 0u);
  EXPECT_EQ(server.client().integer({"EXISTS", "cucore:v1:claim:" + a.redis_key("k2").substr(10)}),
            1);
}

// A live holder renews its claim: it outlasts its lease for as long as the holder holds it.
TEST(SingleFlightRedis, ALiveHolderKeepsItsClaimPastTheLease) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache a(redis_test_options(server)), b(redis_test_options(server));
  claim_result held = a.try_claim("k", 300ms);
  ASSERT_EQ(held.status, claim_status::owned);
  std::this_thread::sleep_for(1s);  // three leases
  EXPECT_EQ(b.try_claim("k", 300ms).status, claim_status::held_elsewhere);
  held.claim.reset();
  EXPECT_EQ(b.try_claim("k", 300ms).status, claim_status::owned);
}

// A claim whose holder died expires after its lease (here its holder process is killed and stops
// renewing it); a holder whose claim expired and was taken over does not release (nor renew) the
// new owner's claim (compare-and-delete on its token).
TEST(SingleFlightRedis, LeaseExpiresAndOnlyTheOwnerReleases) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache b(redis_test_options(server));
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = testing::fork_until_killed([&] {
    redis_program_cache a(redis_test_options(server));
    claim_result claim = a.try_claim("k", 300ms);
    const char c = claim.status == claim_status::owned ? 'y' : 'n';
    testing::write_all(ready[1], &c, 1);
    for (;;) ::pause();
  });
  child_guard guard(holder);
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, 'y');
  EXPECT_EQ(b.try_claim("k", 300ms).status, claim_status::held_elsewhere);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(b.try_claim("k", 300ms).status, claim_status::held_elsewhere) << "renewed";
  EXPECT_TRUE(guard.reap());
  std::this_thread::sleep_for(500ms);
  claim_result second = b.try_claim("k", 10s);
  ASSERT_EQ(second.status, claim_status::owned) << "expired after its holder died";

  // A late release of an expired claim: the raw client deletes "a"'s claim as an expiry would.
  redis_program_cache a(redis_test_options(server));
  claim_result first = a.try_claim("k2", 10s);
  ASSERT_EQ(first.status, claim_status::owned);
  const std::string claim_key = "cucore:v1:claim:" + a.redis_key("k2").substr(10);
  EXPECT_EQ(server.client().integer({"DEL", claim_key}), 1);
  claim_result taken = b.try_claim("k2", 10s);
  ASSERT_EQ(taken.status, claim_status::owned);
  first.claim.reset();  // late release
  EXPECT_EQ(a.try_claim("k2", 10s).status, claim_status::held_elsewhere);
  taken.claim.reset();
  EXPECT_EQ(a.try_claim("k2", 10s).status, claim_status::owned);
  second.claim.reset();
}

TEST(SingleFlightRedis, DownServerOrReadOnlyCannotClaim) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_cache_options ro = redis_test_options(server);
  ro.read_only = true;
  redis_program_cache read_only(ro);
  EXPECT_EQ(read_only.try_claim("k", 1s).status, claim_status::unsupported);
  redis_cache_options down = redis_test_options(server);
  down.url = "redis://127.0.0.1:" + std::to_string(testing::free_loopback_port());
  down.connect_timeout = 200ms;
  redis_program_cache unreachable(down);
  EXPECT_EQ(unreachable.try_claim("k", 1s).status, claim_status::unsupported);
}

// Tiered: the local claim, then the remote one; machines (separate local directories) exclude
// each other through the remote claim.
TEST(SingleFlightRedis, TieredClaimsLocalThenRemote) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  temp_dir dir;
  auto make = [&](const char* local) {
    return tiered_program_cache(std::make_unique<file_stream_program_cache>(dir / local),
                                std::make_unique<redis_program_cache>(redis_test_options(server)));
  };
  tiered_program_cache machine1 = make("a");
  tiered_program_cache machine1_peer = make("a");
  tiered_program_cache machine2 = make("b");
  claim_result held = machine1.try_claim("k", 10s);
  ASSERT_EQ(held.status, claim_status::owned);
  EXPECT_EQ(machine1_peer.try_claim("k", 10s).status, claim_status::held_elsewhere);
  EXPECT_EQ(machine2.try_claim("k", 10s).status, claim_status::held_elsewhere);
  // machine2's failed attempt released its local claim: its local peers are not blocked by it.
  EXPECT_EQ(file_stream_program_cache(dir / "b").try_claim("k", 10s).status, claim_status::owned);
  held.claim.reset();
  EXPECT_EQ(machine2.try_claim("k", 10s).status, claim_status::owned);
}

// With write-behind, the remote claim goes only after the holder's remote put: a waiter on
// another machine finds the entry, and does not compile.
TEST(SingleFlightRedis, TieredWaiterOnAnotherMachineReadsTheEntry) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  temp_dir dir;
  tiered_program_cache machine1(std::make_unique<file_stream_program_cache>(dir / "a"),
                                std::make_unique<redis_program_cache>(redis_test_options(server)));
  tiered_program_cache machine2(std::make_unique<file_stream_program_cache>(dir / "b"),
                                std::make_unique<redis_program_cache>(redis_test_options(server)));
  std::atomic<int> compiles{0};
  auto run = [&](tiered_program_cache& cache, std::chrono::milliseconds delay) {
    std::this_thread::sleep_for(delay);
    return get_or_compile(
        cache, "k",
        [&] {
          compiles.fetch_add(1);
          std::this_thread::sleep_for(200ms);
          return sample('w');
        },
        [&](const object_code& code) { cache.put("k", code); });
  };
  std::optional<flight_result> r1, r2;
  std::thread first([&] { r1 = run(machine1, 0ms); });
  std::thread second([&] { r2 = run(machine2, 50ms); });
  first.join();
  second.join();
  EXPECT_EQ(compiles.load(), 1);
  ASSERT_TRUE(r1 && r2);
  EXPECT_EQ(r1->outcome, flight_outcome::compiled);
  EXPECT_EQ(r2->outcome, flight_outcome::waited);
  EXPECT_EQ(r2->code, sample('w'));
}

// ---------------------------------------------------------------------------------------------

}  // namespace
}  // namespace cucore
