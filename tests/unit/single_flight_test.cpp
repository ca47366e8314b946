// Single-flight claims (program_cache::try_claim) and get_or_compile, in one process: each
// backend's claim (directory and SQLite: a lock held by an open file; in-memory: a set; Redis:
// SET NX PX and a compare-and-delete; tiered: both), a claim that dies with its process, and
// threads that miss one key at once. The compiles here are callbacks that count their calls;
// single_flight_stress_test has the real processes and real NVRTC.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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

namespace cucore {
namespace {

using namespace std::chrono_literals;
using testing::redis_server;
using testing::redis_test_options;
using testing::temp_dir;

object_code sample(char fill) {
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
// A holder that dies: exactly one waiter takes over (real processes)

// What a holder's death did to its waiters.
struct death_result {
  int compiles = 0;                     // compiles started, the holder's included
  std::map<std::string, int> outcomes;  // the surviving waiters' outcomes
  std::vector<std::string> errors;      // what went wrong in a child
  int killed_waiters = 0;
};

std::string describe(const death_result& r) {
  std::string s = "compiles=" + std::to_string(r.compiles);
  for (const auto& [k, v] : r.outcomes) s += " " + k + "=" + std::to_string(v);
  for (const auto& e : r.errors) s += " error: " + e;
  return s;
}

// Reads one line from `fd` within `limit` ("" when none came).
std::string read_line(int fd, std::chrono::milliseconds limit) {
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char c = 0;
    if (::read(fd, &c, 1) != 1) continue;
    if (c == '\n') return line;
    line += c;
  }
  return "";
}

int count_lines(const std::filesystem::path& file) {
  const std::string text = testing::read_text(file);
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// A holder process claims "k" and compiles it forever; `waiters` processes miss "k" and wait
// for it (each with its own cache object from `open`, as separate programs have). Once they all
// wait, the holder is SIGKILLed. With `kill_taker`, the first waiter to compile in its place is
// SIGKILLed mid-compile too. Every compile appends a line to a log; each surviving waiter reports
// its outcome.
death_result holder_dies(const std::function<std::unique_ptr<program_cache>()>& open, int waiters,
                         bool kill_taker) {
  temp_dir work;
  const std::string log = (work / "compiles").string();
  const std::string taker = (work / "taker").string();
  int events[2];
  if (::pipe(events) != 0) return {0, {}, {"pipe"}, 0};
  auto say = [&](const std::string& line) {
    testing::write_all(events[1], line.data(), line.size());
  };
  auto note_compile = [&] {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const std::string line = std::to_string(::getpid()) + "\n";
    testing::write_all(fd, line.data(), line.size());
    ::close(fd);
  };
  const pid_t holder = testing::fork_until_killed([&] {
    std::unique_ptr<program_cache> cache = open();
    (void)get_or_compile(
        *cache, "k",
        [&]() -> object_code {
          note_compile();
          say("holder\n");
          for (;;) ::pause();
        },
        [&](const object_code& code) { cache->put("k", code); });
  });
  child_guard holder_guard(holder);
  death_result out;
  if (read_line(events[0], 30s) != "holder") {
    out.errors.push_back("the holder did not start compiling");
    return out;
  }
  std::vector<std::unique_ptr<testing::child_process>> children;
  for (int i = 0; i < waiters; ++i) {
    children.push_back(std::make_unique<testing::child_process>([&]() -> std::string {
      std::unique_ptr<program_cache> cache = open();
      say("waiting\n");
      const flight_result r = get_or_compile(
          *cache, "k",
          [&] {
            note_compile();
            if (kill_taker && ::open(taker.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644) >= 0) {
              say("taker " + std::to_string(::getpid()) + "\n");
              for (;;) ::pause();
            }
            std::this_thread::sleep_for(300ms);
            return sample('c');
          },
          [&](const object_code& code) { cache->put("k", code); });
      if (!(r.code == sample('c'))) return "wrong code";
      return std::string(to_string(r.outcome));
    }));
  }
  for (int i = 0; i < waiters; ++i) {
    if (read_line(events[0], 30s) != "waiting") out.errors.push_back("a waiter did not start");
  }
  std::this_thread::sleep_for(300ms);  // every waiter is past its first lookup and claim
  EXPECT_TRUE(holder_guard.reap()) << "the holder finished before it was killed";
  pid_t killed = -1;
  if (kill_taker) {
    const std::string line = read_line(events[0], 30s);
    if (line.starts_with("taker ")) {
      killed = static_cast<pid_t>(std::stol(line.substr(6)));
      ::kill(killed, SIGKILL);
    } else {
      out.errors.push_back("no waiter took over");
    }
  }
  for (auto& child : children) {
    const pid_t pid = child->pid();
    const std::string report = child->wait();
    if (pid == killed) {
      ++out.killed_waiters;
      continue;
    }
    if (report == "waited" || report == "took_over" || report == "compiled" || report == "hit" ||
        report == "gave_up") {
      ++out.outcomes[report];
    } else {
      out.errors.push_back(report);
    }
  }
  ::close(events[0]);
  ::close(events[1]);
  out.compiles = count_lines(log);
  return out;
}

void expect_one_taker(const death_result& r, int waiters, bool kill_taker) {
  EXPECT_TRUE(r.errors.empty()) << describe(r);
  EXPECT_EQ(r.killed_waiters, kill_taker ? 1 : 0) << describe(r);
  // The holder, the waiter killed in its place (if any), and one more: not one per waiter.
  EXPECT_EQ(r.compiles, kill_taker ? 3 : 2) << describe(r);
  const int survivors = waiters - (kill_taker ? 1 : 0);
  EXPECT_EQ(r.outcomes.count("took_over") ? r.outcomes.at("took_over") : 0, 1) << describe(r);
  EXPECT_EQ(r.outcomes.count("waited") ? r.outcomes.at("waited") : 0, survivors - 1) << describe(r);
}

constexpr int kWaiters = 6;

TEST(SingleFlightProcesses, DirectoryHolderKilledOneWaiterTakesOver) {
  temp_dir dir;
  auto open = [&]() -> std::unique_ptr<program_cache> {
    return std::make_unique<file_stream_program_cache>(dir.path());
  };
  expect_one_taker(holder_dies(open, kWaiters, false), kWaiters, false);
}

TEST(SingleFlightProcesses, DirectoryTakerKilledTooAnotherOneTakesOver) {
  temp_dir dir;
  auto open = [&]() -> std::unique_ptr<program_cache> {
    return std::make_unique<file_stream_program_cache>(dir.path());
  };
  expect_one_taker(holder_dies(open, kWaiters, true), kWaiters, true);
}

TEST(SingleFlightProcesses, SqliteHolderKilledOneWaiterTakesOver) {
  temp_dir dir;
  auto open = [&]() -> std::unique_ptr<program_cache> {
    return std::make_unique<sqlite_program_cache>(dir / "c.db");
  };
  expect_one_taker(holder_dies(open, kWaiters, false), kWaiters, false);
  temp_dir again;
  auto open_again = [&]() -> std::unique_ptr<program_cache> {
    return std::make_unique<sqlite_program_cache>(again / "c.db");
  };
  expect_one_taker(holder_dies(open_again, kWaiters, true), kWaiters, true);
}

// Redis: the dead holder's claim lives until its lease (here 1 s) ends; then exactly one waiter's
// SET NX wins, and the others keep waiting for it.
TEST(SingleFlightProcesses, RedisHolderKilledOneWaiterTakesOver) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  for (const bool kill_taker : {false, true}) {
    SCOPED_TRACE(kill_taker ? "the taker killed too" : "the holder killed");
    const std::string prefix = kill_taker ? "/0?prefix=t2:" : "/0?prefix=t1:";
    auto open = [&]() -> std::unique_ptr<program_cache> {
      auto cache = std::make_unique<redis_program_cache>(redis_test_options(server, prefix));
      single_flight_options o;
      o.lease = 1s;
      cache->set_single_flight(o);
      return cache;
    };
    expect_one_taker(holder_dies(open, kWaiters, kill_taker), kWaiters, kill_taker);
  }
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

// ---------------------------------------------------------------------------------------------
// Watches: what wakes a waiter before its next poll

// The entry landing, or the claim coming free, wakes a directory watch; nothing else does.
TEST(SingleFlightWatch, DirectoryWakesOnTheEntryAndOnTheRelease) {
  temp_dir dir;
  file_stream_program_cache holder(dir.path()), waiter(dir.path());
  claim_result held = holder.try_claim("k", 10s);
  ASSERT_EQ(held.status, claim_status::owned);
  std::unique_ptr<claim_watch> watch = waiter.watch_claim("k");
  ASSERT_NE(watch, nullptr);
  EXPECT_FALSE(watch->wait(50ms)) << "nothing happened";
  EXPECT_EQ(waiter.try_claim("k", 10s).status, claim_status::held_elsewhere);
  EXPECT_FALSE(watch->wait(50ms)) << "the waiter's own attempt is no sign";
  holder.put("other key", sample('o'));
  EXPECT_EQ(holder.try_claim("other key", 10s).status, claim_status::owned);
  EXPECT_FALSE(watch->wait(50ms)) << "other keys are no sign";
  std::thread put([&] {
    std::this_thread::sleep_for(100ms);
    holder.put("k", sample('k'));
  });
  EXPECT_TRUE(watch->wait(60s)) << "the entry landed";
  put.join();
  std::thread release([&] {
    std::this_thread::sleep_for(100ms);
    held.claim.reset();
  });
  EXPECT_TRUE(watch->wait(60s)) << "the claim came free";
  release.join();
}

// A holder's death (the kernel closes its descriptors) wakes the watch.
TEST(SingleFlightWatch, DirectoryWakesWhenTheHolderDies) {
  for (const bool sqlite : {false, true}) {
    SCOPED_TRACE(sqlite ? "SQLite" : "directory");
    temp_dir dir;
    auto open = [&]() -> std::unique_ptr<program_cache> {
      if (sqlite) return std::make_unique<sqlite_program_cache>(dir / "c.db");
      return std::make_unique<file_stream_program_cache>(dir.path());
    };
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t holder = testing::fork_until_killed([&] {
      std::unique_ptr<program_cache> cache = open();
      claim_result claim = cache->try_claim("k", 10s);
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
    std::unique_ptr<program_cache> cache = open();
    std::unique_ptr<claim_watch> watch = cache->watch_claim("k");
    ASSERT_NE(watch, nullptr);
    EXPECT_FALSE(watch->wait(50ms));
    std::thread kill([&] {
      std::this_thread::sleep_for(100ms);
      EXPECT_TRUE(guard.reap());
    });
    EXPECT_TRUE(watch->wait(60s)) << "the holder's death";
    kill.join();
    EXPECT_EQ(cache->try_claim("k", 10s).status, claim_status::owned);
  }
}

// Redis: the release publishes; a waiter subscribed wakes. An abandoned claim counts.
TEST(SingleFlightWatch, RedisWakesOnTheReleaseAndCountsAbandonments) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache holder(redis_test_options(server)), waiter(redis_test_options(server));
  claim_result held = holder.try_claim("k", 10s);
  ASSERT_EQ(held.status, claim_status::owned);
  std::unique_ptr<claim_watch> watch = waiter.watch_claim("k");
  ASSERT_NE(watch, nullptr);
  EXPECT_FALSE(watch->wait(50ms));
  const std::uint64_t before = waiter.claim_abandonments("k");
  std::thread release([&] {
    std::this_thread::sleep_for(100ms);
    held.claim.reset();
  });
  EXPECT_TRUE(watch->wait(60s)) << "the release was published";
  release.join();
  EXPECT_EQ(waiter.claim_abandonments("k"), before) << "a release is no abandonment";
  claim_result again = holder.try_claim("k", 10s);
  ASSERT_EQ(again.status, claim_status::owned);
  again.claim->abandon();
  again.claim.reset();
  EXPECT_NE(waiter.claim_abandonments("k"), before);
  EXPECT_TRUE(watch->wait(60s));
  // Not entries: maintenance does not see the counter.
  EXPECT_EQ(waiter.size(), 0u);
  EXPECT_EQ(waiter.verify(true).corrupt, 0u);
}

// Tiered: the remote tier's release (another machine's holder) wakes a waiter through the
// combined watch, and so does the local one.
TEST(SingleFlightWatch, TieredWakesOnEitherTier) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  temp_dir dir;
  auto make = [&](const char* local) {
    return tiered_program_cache(std::make_unique<file_stream_program_cache>(dir / local),
                                std::make_unique<redis_program_cache>(redis_test_options(server)));
  };
  tiered_program_cache machine1 = make("a");
  tiered_program_cache machine2 = make("b");
  claim_result held = machine1.try_claim("k", 10s);
  ASSERT_EQ(held.status, claim_status::owned);
  EXPECT_EQ(machine2.try_claim("k", 10s).status, claim_status::held_elsewhere);
  std::unique_ptr<claim_watch> watch = machine2.watch_claim("k");
  ASSERT_NE(watch, nullptr);
  EXPECT_FALSE(watch->wait(50ms)) << "machine2's free local claim is no sign";
  std::thread release([&] {
    std::this_thread::sleep_for(100ms);
    held.claim.reset();
  });
  EXPECT_TRUE(watch->wait(60s));
  release.join();
}

}  // namespace
}  // namespace cucore
