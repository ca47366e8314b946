// The tiered cache over the Redis tier against a real redis-server (started per test on a free
// loopback port; every test skips where redis-server is not installed): backfill, write-behind,
// specs, real compiles through the tiered cache, and real processes sharing one server through the
// CLI.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache_test_support.hpp"
#include "cli_support.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/open.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"
#include "process_support.hpp"
#include "redis_test_support.hpp"
#include "remote_tier_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using namespace std::chrono_literals;
using namespace testing;  // the shared test helpers (remote_tier_support.hpp and the rest)

// ---------------------------------------------------------------------------------------------
// The tiered cache

TEST(TieredCache, RemoteHitBackfillsTheLocalTier) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  temp_dir dir_a, dir_b;
  tiered_program_cache a(std::make_unique<file_stream_program_cache>(dir_a.path()),
                         std::make_unique<redis_program_cache>(redis_test_options(server)));
  tiered_program_cache b(std::make_unique<file_stream_program_cache>(dir_b.path()),
                         std::make_unique<redis_program_cache>(redis_test_options(server)));
  const object_code code = sample(3000, std::byte{9});
  a.put("k", code);
  a.flush();  // the remote put is written behind
  EXPECT_EQ(a.local().size(), 1u);
  EXPECT_EQ(b.local().size(), 0u);

  auto hit = b.get("k");
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, code);
  EXPECT_EQ(b.tier_stats().remote_hits, 1u);
  EXPECT_EQ(b.local().size(), 1u);  // backfilled
  ASSERT_TRUE(b.local().get("k"));
  EXPECT_EQ(*b.local().get("k"), code);

  hit = b.get("k");
  ASSERT_TRUE(hit);
  EXPECT_EQ(b.tier_stats().local_hits, 1u);
  EXPECT_EQ(b.tier_stats().remote_hits, 1u);
  EXPECT_EQ(b.tier_stats().remote.hits, 1u);  // the remote was not asked again
  EXPECT_FALSE(b.get("absent"));
  EXPECT_EQ(b.stats().hits, 2u);
  EXPECT_EQ(b.stats().misses, 1u);
  EXPECT_TRUE(contains(b.description(), "directory"));
  EXPECT_TRUE(contains(b.description(), "redis"));
  EXPECT_EQ(b.compiler_version_memo(), b.local().compiler_version_memo());

  EXPECT_TRUE(a.erase("k"));
  EXPECT_FALSE(a.remote().get("k"));
  b.clear();  // the local tier only
  EXPECT_EQ(b.local().size(), 0u);
}

// The remote tier throwing (a closed cache here) never reaches the caller.
TEST(TieredCache, RemoteExceptionsAreMisses) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  log_capture logs;
  auto remote = std::make_unique<redis_program_cache>(redis_test_options(server));
  remote->close();  // every call now throws cucore::error
  tiered_program_cache cache(std::make_unique<in_memory_program_cache>(), std::move(remote));
  EXPECT_FALSE(cache.get("k"));
  EXPECT_NO_THROW(cache.put("k", sample(10, std::byte{1})));
  cache.flush();
  EXPECT_TRUE(cache.get("k"));  // the local tier has it
  EXPECT_EQ(cache.tier_stats().remote_errors, 2u);
  EXPECT_EQ(logs.warnings("remote cache tier"), 1u) << logs.all();
  EXPECT_THROW(tiered_program_cache(nullptr, std::make_unique<in_memory_program_cache>()),
               invalid_argument);
}

TEST(TieredCache, OpenSpecs) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  temp_dir dir;
  auto remote_only = open_program_cache(server.url("/0"));
  EXPECT_NE(dynamic_cast<redis_program_cache*>(remote_only.get()), nullptr);

  auto tiered = open_program_cache("dir:" + dir.path().string() + "+" + server.url("/0"));
  auto* t = dynamic_cast<tiered_program_cache*>(tiered.get());
  ASSERT_NE(t, nullptr);
  EXPECT_NE(dynamic_cast<file_stream_program_cache*>(&t->local()), nullptr);
  tiered->put("k", sample(10, std::byte{1}));
  t->flush();
  EXPECT_TRUE(remote_only->get("k"));

  auto mem = open_program_cache("memory+" + server.url());
  ASSERT_NE(dynamic_cast<tiered_program_cache*>(mem.get()), nullptr);
  EXPECT_TRUE(mem->get("k"));
  EXPECT_THROW(open_program_cache("none+" + server.url()), invalid_argument);

  // $CUCORE_REMOTE_CACHE puts the remote tier behind the default cache only.
  ::setenv("CUCORE_CACHE_DIR", dir.path().c_str(), 1);
  ::setenv("CUCORE_REMOTE_CACHE", server.url("/0").c_str(), 1);
  auto by_env = open_program_cache("");
  EXPECT_NE(dynamic_cast<tiered_program_cache*>(by_env.get()), nullptr);
  EXPECT_TRUE(by_env->get("k"));
  EXPECT_EQ(dynamic_cast<tiered_program_cache*>(open_program_cache("memory").get()), nullptr);
  ::setenv("CUCORE_REMOTE_CACHE", "redis://host:bad", 1);
  try {
    open_program_cache("");
    ADD_FAILURE() << "accepted";
  } catch (const invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "CUCORE_REMOTE_CACHE")) << e.what();
  }
  ::unsetenv("CUCORE_REMOTE_CACHE");
  ::unsetenv("CUCORE_CACHE_DIR");
}

// Without write_behind the remote put is done when put returns.
TEST(TieredCache, SynchronousRemotePuts) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  tiered_program_cache cache(std::make_unique<in_memory_program_cache>(),
                             std::make_unique<redis_program_cache>(redis_test_options(server)),
                             {.write_behind = false});
  cache.put("k", sample(10, std::byte{1}));
  EXPECT_EQ(server.client().integer({"DBSIZE"}), 1);
  EXPECT_EQ(cache.tier_stats().remote_puts_pending, 0u);
  EXPECT_THROW(
      tiered_program_cache(std::make_unique<in_memory_program_cache>(),
                           std::make_unique<in_memory_program_cache>(), {.max_pending_puts = 0}),
      invalid_argument);
}

// The destructor waits for the writer: a process that compiles and exits has stored remotely.
TEST(TieredCache, DestructionFlushesWriteBehindPuts) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  {
    tiered_program_cache cache(std::make_unique<in_memory_program_cache>(),
                               std::make_unique<redis_program_cache>(redis_test_options(server)));
    for (int i = 0; i < 50; ++i) cache.put("k" + std::to_string(i), sample(1000, std::byte{1}));
  }
  EXPECT_EQ(server.client().integer({"DBSIZE"}), 50);
}

// A hung server does not hold up puts: they return at once, those beyond max_pending_puts are
// dropped (the local tier has them), and closing waits about one command timeout, not one per
// pending put.
TEST(TieredCache, WriteBehindNeverWaitsForTheServer) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  log_capture logs;
  auto remote_options = redis_test_options(server);
  remote_options.retry_initial = 5s;  // once it has timed out, the rest are dropped at once
  remote_options.retry_max = 5s;
  remote_options.command_timeout = 2000ms;
  tiered_program_cache cache(std::make_unique<in_memory_program_cache>(),
                             std::make_unique<redis_program_cache>(remote_options),
                             {.max_pending_puts = 4});
  cache.put("first", sample(10, std::byte{1}));
  cache.flush();
  server.pause();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) cache.put("k" + std::to_string(i), sample(10, std::byte{2}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);  // command_timeout is 2 s
  const tiered_cache_stats during = cache.tier_stats();
  EXPECT_GT(during.remote_puts_dropped, 0u);
  EXPECT_LE(during.remote_puts_pending, 5u);  // 4 waiting, 1 being written
  EXPECT_EQ(logs.warnings("dropping puts"), 1u) << logs.all();
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(cache.local().get("k" + std::to_string(i)));
  const auto closing = std::chrono::steady_clock::now();
  cache.close();
  EXPECT_LT(std::chrono::steady_clock::now() - closing, 4s);  // one timeout, not one per put
  server.resume();
  // "first", and perhaps k0: the SET that timed out is still in the server's socket buffer, and
  // a resumed server may run it before it sees the connection closed.
  const long long stored = server.client().integer({"DBSIZE"});
  EXPECT_GE(stored, 1);
  EXPECT_LE(stored, 2);
}

// Threads putting and getting through one tiered cache (run under TSan by the tsan preset).
TEST(TieredCache, ConcurrentThreadsWithWriteBehind) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  temp_dir dir;
  tiered_program_cache cache(std::make_unique<file_stream_program_cache>(dir.path()),
                             std::make_unique<redis_program_cache>(redis_test_options(server)));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const int k = (i + t * 5) % 20;
        const std::string key = "k" + std::to_string(k);
        if (auto hit = cache.get(key)) {
          if (*hit != sample(64 + k, static_cast<std::byte>(k))) ++wrong;
        } else {
          cache.put(key, sample(64 + k, static_cast<std::byte>(k)));
        }
        if (i % 10 == 0) cache.flush();
        (void)cache.tier_stats();
      }
    });
  }
  for (auto& th : threads) th.join();
  cache.flush();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(server.client().integer({"DBSIZE"}), 20);
  EXPECT_EQ(cache.tier_stats().remote_puts_pending, 0u);
  EXPECT_EQ(cache.stats().errors, 0u);
}

// ---------------------------------------------------------------------------------------------
// Real compiles through the tiered cache

// The oracle: what the tiered cache stores and returns is what an uncached compile gives.
TEST(TieredCache, CompileThroughTheTieredCacheEqualsAnUncachedCompile) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  temp_dir dir_a, dir_b;
  // Two machines: each its own local directory, the same server.
  auto machine = [&](const temp_dir& dir) -> std::unique_ptr<program_cache> {
    return std::make_unique<tiered_program_cache>(
        std::make_unique<file_stream_program_cache>(dir.path()),
        std::make_unique<redis_program_cache>(redis_test_options(server)));
  };
  const testing::two_machines compiled = testing::compile_on_two_machines(
      [&] { return machine(dir_a); }, [&] { return machine(dir_b); });
  redis_program_cache remote(redis_test_options(server));
  auto stored = remote.get(*compiled.key);
  ASSERT_TRUE(stored);
  EXPECT_EQ(*stored, compiled.uncached);
}

// A compile with the remote tier down succeeds, and stores locally.
TEST(TieredCache, CompileWithTheServerDownSucceeds) {
  temp_dir dir;
  redis_cache_options o;
  o.url = "redis://127.0.0.1:" + std::to_string(testing::free_loopback_port());
  log_capture logs;
  tiered_program_cache cache(std::make_unique<file_stream_program_cache>(dir.path()),
                             std::make_unique<redis_program_cache>(o));
  const object_code uncached =
      program(kSource, source_type::cxx, compile_options()).compile(code_type::ptx);
  program p(kSource, source_type::cxx, compile_options());
  EXPECT_EQ(p.compile(code_type::ptx, {}, &cache), uncached);
  program again(kSource, source_type::cxx, compile_options());
  EXPECT_EQ(again.compile(code_type::ptx, {}, &cache), uncached);
  EXPECT_EQ(again.last_cache_outcome(), cache_outcome::hit);
  EXPECT_EQ(logs.warnings("unavailable"), 1u) << logs.all();
}

// Processes sharing one local directory in front of one server: the remote tier's counts land in
// the local tier's persistent statistics, exactly, and a dead server's failures are counted there.
TEST(TieredCacheProcesses, StatisticsCountBothTiersExactly) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  temp_dir dir;
  constexpr int kProcesses = 8;
  {
    redis_program_cache remote(redis_test_options(server));
    for (int i = 0; i < kProcesses; ++i) {
      remote.put("r" + std::to_string(i), sample(500, std::byte{6}));
    }
  }
  auto open = [&] {
    tiered_cache_options o;
    o.write_behind = false;
    return std::make_unique<tiered_program_cache>(
        std::make_unique<file_stream_program_cache>(dir.path()),
        std::make_unique<redis_program_cache>(redis_test_options(server)), o);
  };
  const auto reports = testing::run_children(kProcesses, [&](int i) {
    auto cache = open();
    const std::string key = "r" + std::to_string(i);
    if (!cache->get(key)) return std::string("remote miss");  // remote hit, backfilled
    if (!cache->get(key)) return std::string("local miss");   // local hit
    if (cache->get("absent")) return std::string("hit on an absent key");
    return std::string();
  });
  for (const auto& r : reports) ASSERT_EQ(r, "");
  auto cache = open();
  persistent_cache_stats p = cache->statistics()->read();
  EXPECT_EQ(p.local.hits, std::uint64_t{kProcesses});
  EXPECT_EQ(p.local.misses, 2u * kProcesses);
  EXPECT_EQ(p.local.puts, std::uint64_t{kProcesses});
  EXPECT_EQ(p.remote.hits, std::uint64_t{kProcesses});
  EXPECT_EQ(p.remote.misses, std::uint64_t{kProcesses});
  EXPECT_EQ(p.remote.errors, 0u);

  server.kill();
  EXPECT_FALSE(cache->get("absent"));
  p = cache->statistics()->read();
  EXPECT_EQ(p.remote.misses, kProcesses + 1u);
  EXPECT_GE(p.remote.errors, 1u);
  EXPECT_EQ(p.remote.errors, cache->remote().stats().errors);
}

#ifdef CUCORE_CLI_PATH
// ---------------------------------------------------------------------------------------------
// Real processes: the cucore tool, each run with its own local directory, one server

using cli_result = testing::run_result;

// Runs the tool with `env` added to this process's environment (less any CUCORE_REMOTE_CACHE,
// and with CUCORE_CACHE_DIR inside `dir`), its output captured in files in `dir`.
cli_result run_cli(const std::filesystem::path& dir, const std::vector<std::string>& args,
                   const std::vector<std::string>& env = {}) {
  std::vector<std::string> set = {"CUCORE_CACHE_DIR=" + (dir / "default-cache").string()};
  set.insert(set.end(), env.begin(), env.end());
  const std::vector<std::string> child_env =
      testing::environment_with({"CUCORE_REMOTE_CACHE="}, set);
  testing::spawn_options o;
  o.out = (dir / "stdout.txt").string();
  o.err = (dir / "stderr.txt").string();
  o.env = &child_env;
  // The tool gets absolute paths: `dir` only holds what it printed.
  return testing::run_captured(CUCORE_CLI_PATH, args, o);
}

// Two processes with separate local directories share one server: the first compiles and
// stores, the second hits the remote tier and backfills its own directory; the server then dies
// and a third process still compiles, with a cache miss and the same code.
TEST(TieredCacheProcesses, CompileInOneProcessHitInAnother) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  temp_dir work;
  const std::string source = testing::write_source(work);
  auto compile = [&](const std::string& local, const std::string& output,
                     const std::vector<std::string>& env = {}, const std::string& spec = "") {
    std::vector<std::string> args = {"compile",  source,  "--arch", testing::kArch,
                                     "--target", "cubin", "-o",     (work / output).string()};
    if (!local.empty() || !spec.empty()) {
      args.push_back("--cache");
      args.push_back(spec.empty() ? (work / local).string() + "+" + server.url("/0") : spec);
    }
    return run_cli(work.path(), args, env);
  };

  const cli_result first = compile("a", "a.cubin");
  ASSERT_EQ(first.status, 0) << first.err;
  EXPECT_TRUE(contains(first.out, "cache miss")) << first.out;
  const cli_result second = compile("b", "b.cubin");
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_TRUE(contains(second.out, "cache hit")) << second.out;
  EXPECT_EQ(testing::read_text(work / "a.cubin"), testing::read_text(work / "b.cubin"));
  EXPECT_EQ(file_stream_program_cache(work / "b").size(), 1u);  // backfilled

  // $CUCORE_REMOTE_CACHE behind the default cache.
  const cli_result third = compile("", "c.cubin", {"CUCORE_REMOTE_CACHE=" + server.url("/0")});
  ASSERT_EQ(third.status, 0) << third.err;
  EXPECT_TRUE(contains(third.out, "cache hit")) << third.out;

  const cli_result stats = run_cli(
      work.path(), {"cache", "stats", "--cache", (work / "b").string() + "+" + server.url()});
  ASSERT_EQ(stats.status, 0) << stats.err;
  EXPECT_TRUE(contains(stats.out, "local    directory")) << stats.out;
  EXPECT_TRUE(contains(stats.out, "remote   redis redis://127.0.0.1:")) << stats.out;
  EXPECT_TRUE(contains(stats.out, "1 entry")) << stats.out;
  // b's persistent statistics: its one compile was a local miss answered by the remote tier.
  EXPECT_TRUE(contains(stats.out, "lookups  100.0 % hits (1 of 1, either tier)\n")) << stats.out;
  EXPECT_TRUE(contains(stats.out, " local   0 hits, 1 miss (0.0 % hits), 1 put,")) << stats.out;
  EXPECT_TRUE(contains(stats.out, " remote  1 hit, 0 misses (100.0 % hits), 0 puts,")) << stats.out;

  server.kill();
  const cli_result down = compile("d", "d.cubin");
  ASSERT_EQ(down.status, 0) << down.err;
  EXPECT_TRUE(contains(down.out, "cache miss")) << down.out;
  EXPECT_TRUE(contains(down.err, "unavailable")) << down.err;
  EXPECT_EQ(testing::read_text(work / "a.cubin"), testing::read_text(work / "d.cubin"));
  const cli_result down_stats = run_cli(
      work.path(), {"cache", "stats", "--cache", (work / "d").string() + "+" + server.url()});
  EXPECT_EQ(down_stats.status, 0) << down_stats.err;
  EXPECT_TRUE(contains(down_stats.out, "unreachable")) << down_stats.out;
}
#endif

}  // namespace
}  // namespace cucore
