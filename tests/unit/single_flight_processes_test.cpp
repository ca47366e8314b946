// Single-flight with real processes: a holder that dies and exactly one waiter that takes over,
// compile errors and empty stores that let the waiters compile side by side, and the watches that
// wake a waiter before its next poll (single_flight_test_support.hpp).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
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
