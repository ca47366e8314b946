// Single-flight claims across processes and machines: Redis (SET NX PX and a compare-and-delete;
// tiered: both), a holder process that dies (exactly one waiter takes over), and the watches that
// wake a waiter before its next poll. Real processes; the compiles are callbacks.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/tiered.hpp"
#include "redis_test_support.hpp"
#include "remote_tier_support.hpp"
#include "single_flight_test_support.hpp"

namespace cucore {
namespace {

using namespace cucore::testing;  // NOLINT: the single-flight tests' helpers

// One machine of a tiered cache: its own local directory `local`, the shared Redis `server`.
tiered_program_cache tiered_machine(const redis_server& server,
                                    const std::filesystem::path& local) {
  return tiered_program_cache(std::make_unique<file_stream_program_cache>(local),
                              std::make_unique<redis_program_cache>(redis_test_options(server)));
}

// ---------------------------------------------------------------------------------------------
// Redis: SET NX PX claims

// A redis-server of the test's own (the test skips where none is installed), and a directory for
// the local tiers of tiered caches over it.
class SingleFlightRedis : public ::testing::Test {
 protected:
  void SetUp() override { CUCORE_REQUIRE_REDIS(server_); }
  redis_cache_options options() const { return redis_test_options(server_); }
  // One machine of a tiered cache over the server: its local directory `local`.
  tiered_program_cache machine(const char* local) const {
    return tiered_machine(server_, dir_ / local);
  }

  redis_server server_;
  temp_dir dir_;
};

TEST_F(SingleFlightRedis, ClaimsAreExclusiveAndOutOfTheEntries) {
  redis_program_cache a(options()), b(options());
  expect_claims_exclusive(a, b);
  // A held claim is a key under the prefix, but no entry: maintenance does not see it.
  claim_result held = a.try_claim("k2", 10s);
  ASSERT_EQ(held.status, claim_status::owned);
  a.put("k2", sample('r'));
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(a.list().size(), 1u);
  EXPECT_EQ(a.verify(true).corrupt, 0u);
  EXPECT_EQ(server_.client().integer({"EXISTS", "cucore:v1:claim:" + a.redis_key("k2").substr(10)}),
            1);
}

// A live holder renews its claim: it outlasts its lease for as long as the holder holds it.
TEST_F(SingleFlightRedis, ALiveHolderKeepsItsClaimPastTheLease) {
  redis_program_cache a(options()), b(options());
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
TEST_F(SingleFlightRedis, LeaseExpiresAndOnlyTheOwnerReleases) {
  redis_program_cache b(options());
  std::optional<child_guard> holder;
  ASSERT_NO_FATAL_FAILURE(fork_claim_holder(
      [&] { return std::make_unique<redis_program_cache>(options()); }, 300ms, holder));
  EXPECT_EQ(b.try_claim("k", 300ms).status, claim_status::held_elsewhere);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(b.try_claim("k", 300ms).status, claim_status::held_elsewhere) << "renewed";
  EXPECT_TRUE(holder->reap());
  std::this_thread::sleep_for(500ms);
  claim_result second = b.try_claim("k", 10s);
  ASSERT_EQ(second.status, claim_status::owned) << "expired after its holder died";

  // A late release of an expired claim: the raw client deletes "a"'s claim as an expiry would.
  redis_program_cache a(options());
  claim_result first = a.try_claim("k2", 10s);
  ASSERT_EQ(first.status, claim_status::owned);
  const std::string claim_key = "cucore:v1:claim:" + a.redis_key("k2").substr(10);
  EXPECT_EQ(server_.client().integer({"DEL", claim_key}), 1);
  claim_result taken = b.try_claim("k2", 10s);
  ASSERT_EQ(taken.status, claim_status::owned);
  first.claim.reset();  // late release
  EXPECT_EQ(a.try_claim("k2", 10s).status, claim_status::held_elsewhere);
  taken.claim.reset();
  EXPECT_EQ(a.try_claim("k2", 10s).status, claim_status::owned);
  second.claim.reset();
}

TEST_F(SingleFlightRedis, DownServerOrReadOnlyCannotClaim) {
  redis_cache_options ro = options();
  ro.read_only = true;
  redis_program_cache read_only(ro);
  EXPECT_EQ(read_only.try_claim("k", 1s).status, claim_status::unsupported);
  redis_cache_options down = options();
  down.url = "redis://127.0.0.1:" + std::to_string(testing::free_loopback_port());
  down.connect_timeout = 200ms;
  redis_program_cache unreachable(down);
  EXPECT_EQ(unreachable.try_claim("k", 1s).status, claim_status::unsupported);
}

// Tiered: the local claim, then the remote one; machines (separate local directories) exclude
// each other through the remote claim.
TEST_F(SingleFlightRedis, TieredClaimsLocalThenRemote) {
  tiered_program_cache machine1 = machine("a");
  tiered_program_cache machine1_peer = machine("a");
  tiered_program_cache machine2 = machine("b");
  claim_result held = machine1.try_claim("k", 10s);
  ASSERT_EQ(held.status, claim_status::owned);
  EXPECT_EQ(machine1_peer.try_claim("k", 10s).status, claim_status::held_elsewhere);
  EXPECT_EQ(machine2.try_claim("k", 10s).status, claim_status::held_elsewhere);
  // machine2's failed attempt released its local claim: its local peers are not blocked by it.
  EXPECT_EQ(file_stream_program_cache(dir_ / "b").try_claim("k", 10s).status, claim_status::owned);
  held.claim.reset();
  EXPECT_EQ(machine2.try_claim("k", 10s).status, claim_status::owned);
}

// With write-behind, the remote claim goes only after the holder's remote put: a waiter on
// another machine finds the entry, and does not compile.
TEST_F(SingleFlightRedis, TieredWaiterOnAnotherMachineReadsTheEntry) {
  tiered_program_cache machine1 = machine("a");
  tiered_program_cache machine2 = machine("b");
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

// ---------------------------------------------------------------------------------------------
// Watches: what wakes a waiter before its next poll

// `action`, run on another thread 100 ms from now (while this one waits), wakes `watch`.
void expect_wakes(claim_watch& watch, const std::function<void()>& action, std::string_view what) {
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    action();
  });
  EXPECT_TRUE(watch.wait(60s)) << what;
  later.join();
}

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
  expect_wakes(
      *watch, [&] { holder.put("k", sample('k')); }, "the entry landed");
  expect_wakes(
      *watch, [&] { held.claim.reset(); }, "the claim came free");
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
    std::optional<child_guard> holder;
    ASSERT_NO_FATAL_FAILURE(fork_claim_holder(open, 10s, holder));
    std::unique_ptr<program_cache> cache = open();
    std::unique_ptr<claim_watch> watch = cache->watch_claim("k");
    ASSERT_NE(watch, nullptr);
    EXPECT_FALSE(watch->wait(50ms));
    expect_wakes(
        *watch, [&] { EXPECT_TRUE(holder->reap()); }, "the holder's death");
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
  expect_wakes(
      *watch, [&] { held.claim.reset(); }, "the release was published");
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
  tiered_program_cache machine1 = tiered_machine(server, dir / "a");
  tiered_program_cache machine2 = tiered_machine(server, dir / "b");
  claim_result held = machine1.try_claim("k", 10s);
  ASSERT_EQ(held.status, claim_status::owned);
  EXPECT_EQ(machine2.try_claim("k", 10s).status, claim_status::held_elsewhere);
  std::unique_ptr<claim_watch> watch = machine2.watch_claim("k");
  ASSERT_NE(watch, nullptr);
  EXPECT_FALSE(watch->wait(50ms)) << "machine2's free local claim is no sign";
  expect_wakes(
      *watch, [&] { held.claim.reset(); }, "");
}

}  // namespace
}  // namespace cucore
