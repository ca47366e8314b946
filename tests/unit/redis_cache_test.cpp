// The Redis tier and the tiered cache against a real redis-server (started per test on a free
// loopback port; every test skips where redis-server is not installed): round trips, the entry
// format verified on every read, damaged and wrong-type values planted with raw commands, the
// server killed, paused and restarted, maxmemory, read-only consumers and ACL users, threads,
// real processes sharing one server through the CLI, and real compiles through the tiered cache.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
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
// URLs

TEST(RedisUrl, ParsesEveryPart) {
  auto u = parse_redis_url(
      "redis://alice:p%40ss:w/rd@cache.example:6380/3?prefix=team:&ttl=60"
      "&read_only=1&connect_timeout_ms=20&command_timeout_ms=30");
  EXPECT_EQ(u.user, "alice");
  EXPECT_EQ(u.password, "p@ss:w/rd");
  EXPECT_EQ(u.host, "cache.example");
  EXPECT_EQ(u.port, 6380);
  EXPECT_EQ(u.db, 3);
  EXPECT_EQ(u.prefix, "team:");
  EXPECT_EQ(u.ttl, 60s);
  EXPECT_EQ(u.read_only, true);
  EXPECT_EQ(u.connect_timeout, 20ms);
  EXPECT_EQ(u.command_timeout, 30ms);

  auto plain = parse_redis_url("redis://localhost");
  EXPECT_EQ(plain.host, "localhost");
  EXPECT_EQ(plain.port, 6379);
  EXPECT_EQ(plain.db, 0);
  EXPECT_TRUE(plain.user.empty());
  EXPECT_TRUE(plain.password.empty());

  auto v6 = parse_redis_url("redis://:secret@[::1]:7000/");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 7000);
  EXPECT_EQ(v6.password, "secret");
  EXPECT_TRUE(v6.user.empty());
}

TEST(RedisUrl, MalformedUrlsAreInvalidArgumentsThatNeverShowThePassword) {
  testing::expect_bad_urls(
      {
          "",
          "http://host:6379",
          "rediss://host:6379",
          "redis://",
          "redis://:secret@",
          "redis://host:0",
          "redis://host:65536",
          "redis://host:port",
          "redis://host:",
          "redis://host/db",
          "redis://host/-1",
          "redis://secret@host",
          "redis://[::1",
          "redis://host?ttl=0",
          "redis://host?ttl=abc",
          "redis://host?prefix=",
          "redis://host?read_only=maybe",
          "redis://host?colour=blue",
          "redis://host?ttl",
          "redis://:bad%zzsecret@host",
      },
      [](const char* url) { parse_redis_url(url); }, "redis cache URL",
      "expected redis://");  // says what to write instead
  EXPECT_THROW(open_program_cache("dir:/tmp/x+redis://host:notaport"), invalid_argument);
  EXPECT_EQ(redact_redis_url("redis://u:hunter2@h:1/0"), "redis://u:***@h:1/0");
  EXPECT_EQ(redact_redis_url("redis://h:1/0"), "redis://h:1/0");
}

TEST(RedisCache, BadOptionsAreInvalidArguments) {
  redis_cache_options o;
  o.key_prefix = "";
  EXPECT_THROW(redis_program_cache{o}, invalid_argument);
  o = {};
  o.command_timeout = 0ms;
  EXPECT_THROW(redis_program_cache{o}, invalid_argument);
  o = {};
  o.ttl = 0s;
  EXPECT_THROW(redis_program_cache{o}, invalid_argument);
  o = {};
  o.retry_max = 1ms;
  EXPECT_THROW(redis_program_cache{o}, invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// The Redis tier alone

TEST(RedisCache, RoundTripKeepsTheWholeObjectCode) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache cache(redis_test_options(server));
  EXPECT_FALSE(cache.get("absent"));
  const object_code code = sample(5000, std::byte{0x5a});
  cache.put("k", code);
  auto hit = cache.get("k");
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, code);
  EXPECT_EQ(hit->name(), "sample");
  EXPECT_EQ(hit->symbol("k<int>"), "_Z1kIiEvv");
  EXPECT_TRUE(
      std::equal(hit->code().begin(), hit->code().end(), code.code().begin(), code.code().end()));
  const cache_stats s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.puts, 1u);
  EXPECT_EQ(s.errors, 0u);

  // Stored under prefix + SHA-256(key), in the entry format.
  raw_redis raw = server.client();
  const std::string value = raw.text({"GET", cache.redis_key("k")});
  EXPECT_TRUE(value.starts_with("CUCOREPC"));
  EXPECT_TRUE(cache.redis_key("k").starts_with("cucore:v1:"));
  EXPECT_EQ(cache.redis_key("k").size(), std::string("cucore:v1:").size() + 64);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.size_bytes(), value.size());

  auto listed = cache.list();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(listed[0].key.data()), listed[0].key.size()),
            "k");
  EXPECT_EQ(listed[0].payload_bytes, 5000u);
  EXPECT_TRUE(listed[0].last_used);

  EXPECT_TRUE(cache.erase("k"));
  EXPECT_FALSE(cache.erase("k"));
  EXPECT_FALSE(cache.get("k"));
}

TEST(RedisCache, PrefixesAndDatabasesAreSeparateNamespaces) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache a(redis_test_options(server, "/0?prefix=a:"));
  redis_program_cache b(redis_test_options(server, "/0?prefix=b:"));
  redis_program_cache db2(redis_test_options(server, "/2?prefix=a:"));
  a.put("k", sample(10, std::byte{1}));
  b.put("k", sample(10, std::byte{2}));
  EXPECT_EQ(a.get("k")->code()[0], std::byte{1});
  EXPECT_EQ(b.get("k")->code()[0], std::byte{2});
  EXPECT_FALSE(db2.get("k"));
  a.clear();
  EXPECT_FALSE(a.get("k"));
  EXPECT_TRUE(b.get("k"));
  raw_redis raw = server.client();
  EXPECT_EQ(raw.integer({"DBSIZE"}), 1);
  db2.put("k", sample(10, std::byte{3}));
  EXPECT_EQ(raw.integer({"DBSIZE"}), 1);  // in database 2, not 0
  raw.text({"SELECT", "2"});
  EXPECT_EQ(raw.integer({"DBSIZE"}), 1);
}

TEST(RedisCache, TtlExpiresEntries) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache cache(redis_test_options(server, "?ttl=100"));
  cache.put("k", sample(10, std::byte{1}));
  raw_redis raw = server.client();
  const long long ttl = raw.integer({"TTL", cache.redis_key("k")});
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, 100);
  redis_program_cache forever(redis_test_options(server, "?prefix=f:"));
  forever.put("k", sample(10, std::byte{1}));
  EXPECT_EQ(raw.integer({"TTL", forever.redis_key("k")}), -1);
}

// Damaged, truncated, foreign and misplaced values: misses, never returned, deleted.
TEST(RedisCache, CorruptValuesAreMissesAndDeleted) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache cache(redis_test_options(server));
  raw_redis raw = server.client();
  cache.put("good", sample(1000, std::byte{7}));
  const std::string good = raw.text({"GET", cache.redis_key("good")});
  ASSERT_FALSE(good.empty());

  std::string flipped = good;
  flipped[flipped.size() - 10] ^= 0x01;  // payload bit rot
  const std::vector<std::pair<std::string, std::string>> planted = {
      {"flipped", flipped}, {"truncated", good.substr(0, good.size() - 1)},
      {"garbage", "hello"}, {"empty", ""},
      {"misplaced", good},  // a valid entry, for another key
  };
  for (const auto& [key, value] : planted) {
    SCOPED_TRACE(key);
    raw.command({"SET", cache.redis_key(key), value});
    EXPECT_FALSE(cache.get(key));
    EXPECT_EQ(raw.integer({"EXISTS", cache.redis_key(key)}), 0) << "not deleted";
  }
  EXPECT_EQ(cache.stats().corrupt_dropped, planted.size());
  EXPECT_TRUE(cache.get("good"));

  // verify() finds them too, and removes them when asked.
  raw.command({"SET", cache.redis_key("x"), flipped});
  raw.command({"RPUSH", cache.redis_key("y"), "a"});
  auto report = cache.verify(false);
  EXPECT_EQ(report.entries, 3u);
  EXPECT_EQ(report.ok, 1u);
  EXPECT_EQ(report.corrupt, 2u);
  EXPECT_EQ(raw.integer({"DBSIZE"}), 3);
  report = cache.verify(true);
  EXPECT_EQ(report.removed, 2u);
  EXPECT_EQ(raw.integer({"DBSIZE"}), 1);
}

TEST(RedisCache, WrongTypeValuesAreMissesAndDeleted) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache cache(redis_test_options(server));
  raw_redis raw = server.client();
  raw.command({"RPUSH", cache.redis_key("list"), "CUCOREPC"});
  raw.command({"HSET", cache.redis_key("hash"), "f", "v"});
  EXPECT_FALSE(cache.get("list"));
  EXPECT_FALSE(cache.get("hash"));
  EXPECT_EQ(raw.integer({"EXISTS", cache.redis_key("list")}), 0);
  EXPECT_EQ(raw.integer({"EXISTS", cache.redis_key("hash")}), 0);
  EXPECT_EQ(cache.stats().corrupt_dropped, 2u);
  cache.put("list", sample(10, std::byte{1}));
  EXPECT_TRUE(cache.get("list"));
}

// A read-only consumer writes nothing: no put, no deletion of what it finds damaged.
TEST(RedisCache, ReadOnlyWritesNothing) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache writer(redis_test_options(server));
  redis_program_cache reader(redis_test_options(server, "?read_only=1"));
  EXPECT_TRUE(reader.options().read_only);
  EXPECT_TRUE(contains(reader.description(), "read-only"));
  raw_redis raw = server.client();
  reader.put("k", sample(10, std::byte{1}));
  EXPECT_EQ(raw.integer({"DBSIZE"}), 0);
  EXPECT_EQ(reader.stats().puts, 0u);

  writer.put("k", sample(10, std::byte{2}));
  ASSERT_TRUE(reader.get("k"));
  EXPECT_EQ(reader.get("k")->code()[0], std::byte{2});
  EXPECT_FALSE(reader.erase("k"));
  EXPECT_EQ(raw.integer({"EXISTS", writer.redis_key("k")}), 1);

  raw.command({"SET", writer.redis_key("bad"), "garbage"});
  EXPECT_FALSE(reader.get("bad"));
  EXPECT_EQ(raw.integer({"EXISTS", writer.redis_key("bad")}), 1);  // left for a writer
  EXPECT_EQ(reader.verify(true).removed, 0u);
  EXPECT_THROW(reader.clear(), invalid_argument);
  EXPECT_THROW(reader.trim(0), invalid_argument);
  EXPECT_EQ(raw.integer({"DBSIZE"}), 2);
}

// A password, and an ACL user that may only read: its puts are refused by the server, dropped,
// and said once.
TEST(RedisCache, AuthAndAclUsers) {
  redis_server server({"--requirepass", "s3cret"});
  CUCORE_REQUIRE_REDIS(server);
  raw_redis admin = server.client();
  ASSERT_EQ(admin.text({"AUTH", "s3cret"}), "OK");
  ASSERT_EQ(admin.text({"ACL", "SETUSER", "reader", "on", ">rpw", "~*", "+@read", "+ping"}), "OK");

  auto with_password = redis_test_options(server);
  with_password.url = "redis://:s3cret@127.0.0.1:" + std::to_string(server.port());
  redis_program_cache owner(with_password);
  owner.put("k", sample(10, std::byte{4}));
  EXPECT_TRUE(owner.get("k"));
  EXPECT_FALSE(contains(owner.description(), "s3cret"));

  log_capture logs;
  auto ro = redis_test_options(server);
  ro.url = "redis://reader:rpw@127.0.0.1:" + std::to_string(server.port());
  redis_program_cache reader(ro);
  EXPECT_TRUE(reader.get("k"));
  reader.put("k2", sample(10, std::byte{5}));
  reader.put("k3", sample(10, std::byte{5}));
  EXPECT_FALSE(owner.get("k2"));
  EXPECT_EQ(reader.stats().errors, 2u);
  EXPECT_EQ(logs.warnings("refused a put"), 1u) << logs.all();

  auto wrong = redis_test_options(server);
  wrong.url = "redis://:nope-not-it@127.0.0.1:" + std::to_string(server.port());
  redis_program_cache intruder(wrong);
  EXPECT_FALSE(intruder.get("k"));
  intruder.put("k", sample(10, std::byte{6}));
  EXPECT_EQ(owner.get("k")->code()[0], std::byte{4});
  EXPECT_EQ(logs.warnings("AUTH refused"), 1u) << logs.all();
  EXPECT_FALSE(contains(logs.all(), "nope-not-it"));
  EXPECT_FALSE(contains(logs.all(), "s3cret"));
}

// No server at all: every call is a miss or a no-op, fast after the first, said once.
TEST(RedisCache, NoServerIsAMissAndBacksOff) {
  log_capture logs;
  redis_cache_options o;
  o.url = "redis://127.0.0.1:" + std::to_string(testing::free_loopback_port());
  o.retry_initial = 10s;
  o.retry_max = 10s;
  redis_program_cache cache(o);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    EXPECT_FALSE(cache.get("k"));
    cache.put("k", sample(10, std::byte{1}));
    EXPECT_FALSE(cache.erase("k"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(cache.stats().misses, 1000u);
  EXPECT_EQ(cache.stats().errors, 3000u);  // every call that did not reach the server
  EXPECT_EQ(logs.warnings("unavailable"), 1u) << logs.all();
  EXPECT_THROW(cache.size(), error);  // a tool must not report an unreachable cache as empty
}

// The server killed mid-run, then restarted: misses and dropped puts while it is down, never an
// exception, one warning; after the backoff the cache works again.
TEST(RedisCache, ServerKilledThenRestarted) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  log_capture logs;
  redis_program_cache cache(redis_test_options(server));
  cache.put("before", sample(100, std::byte{1}));
  ASSERT_TRUE(cache.get("before"));

  server.kill();
  // The first command goes to the dead server's socket: a large value takes several writes, and
  // those after the peer's reset raise SIGPIPE, which must not reach the process.
  cache.put("large", sample(8 << 20, std::byte{4}));
  for (int i = 0; i < 50; ++i) {
    EXPECT_FALSE(cache.get("before"));
    cache.put("during", sample(100, std::byte{2}));
  }
  const std::uint64_t errors = cache.stats().errors;
  EXPECT_GE(errors, 101u);
  EXPECT_EQ(logs.warnings("unavailable"), 1u) << logs.all();

  ASSERT_TRUE(server.start()) << server.log();
  std::this_thread::sleep_for(250ms);  // past retry_max
  EXPECT_FALSE(cache.get("before"));   // the server kept nothing (no persistence)
  cache.put("after", sample(100, std::byte{3}));
  ASSERT_TRUE(cache.get("after"));
  EXPECT_EQ(cache.get("after")->code()[0], std::byte{3});
  EXPECT_FALSE(cache.get("during"));
  EXPECT_EQ(logs.count(log_level::info, "reachable again"), 1u) << logs.all();
  EXPECT_EQ(cache.stats().errors, errors);
}

// The server killed (SIGKILL) and restarted again and again while threads put and get large
// entries: commands die half-written and half-read, writes hit closed sockets (SIGPIPE must not
// kill the process), and still no call throws and no hit is a wrong entry.
TEST(RedisCache, KilledRepeatedlyUnderLoad) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  auto o = redis_test_options(server);
  o.retry_initial = 20ms;
  o.retry_max = 40ms;
  redis_program_cache cache(o);
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, hits{0}, thrown{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        const int k = (i + t) % 8;
        const std::string key = "big" + std::to_string(k);
        const object_code expected = sample(256 * 1024 + k, static_cast<std::byte>(k));
        try {
          if (i % 2 == 0) {
            cache.put(key, expected);
          } else if (auto hit = cache.get(key)) {
            ++hits;
            if (*hit != expected) ++wrong;
          }
        } catch (...) {
          ++thrown;
        }
      }
    });
  }
  constexpr int kKills = 5;
  for (int round = 0; round < kKills; ++round) {
    std::this_thread::sleep_for(150ms);
    server.kill();
    std::this_thread::sleep_for(50ms);
    ASSERT_TRUE(server.start()) << server.log();
  }
  std::this_thread::sleep_for(150ms);
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(thrown.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(hits.load(), 0);
  EXPECT_GT(cache.stats().errors, 0u);
  std::this_thread::sleep_for(60ms);  // past the backoff
  cache.put("final", sample(10, std::byte{1}));
  EXPECT_TRUE(cache.get("final"));
}

// A server that stops answering mid-command: the command times out, and the late reply of the
// old connection is never read as the answer to a later command.
TEST(RedisCache, HungServerTimesOutAndNoLateReplyIsMisread) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  auto o = redis_test_options(server);
  o.command_timeout = 300ms;
  redis_program_cache cache(o);
  cache.put("a", sample(100, std::byte{0xa}));
  server.pause();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(cache.get("a"));  // times out: its reply is still in the server
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
  cache.put("b", sample(100, std::byte{0xb}));  // within the backoff: dropped at once
  server.resume();
  std::this_thread::sleep_for(250ms);
  EXPECT_FALSE(cache.get("b"));
  auto a = cache.get("a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->code()[0], std::byte{0xa});
}

// maxmemory with allkeys-lru: the server evicts entries; an evicted entry is a miss, every hit is
// the right entry.
TEST(RedisCache, MaxmemoryEvictionIsAMiss) {
  redis_server server({"--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"});
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache cache(redis_test_options(server));
  constexpr int kEntries = 60;
  for (int i = 0; i < kEntries; ++i) {
    cache.put("k" + std::to_string(i), sample(200 * 1024, static_cast<std::byte>(i)));
  }
  int hits = 0;
  for (int i = 0; i < kEntries; ++i) {
    auto hit = cache.get("k" + std::to_string(i));
    if (!hit) continue;
    ++hits;
    EXPECT_EQ(*hit, sample(200 * 1024, static_cast<std::byte>(i)));
  }
  EXPECT_GT(hits, 0);
  EXPECT_LT(hits, kEntries);
  EXPECT_EQ(cache.stats().errors, 0u);
  EXPECT_EQ(cache.stats().puts, static_cast<std::uint64_t>(kEntries));
}

// maxmemory with noeviction: the server refuses writes (OOM); puts are dropped, said once.
TEST(RedisCache, MaxmemoryNoevictionDropsPuts) {
  redis_server server({"--maxmemory", "2mb", "--maxmemory-policy", "noeviction"});
  CUCORE_REQUIRE_REDIS(server);
  log_capture logs;
  redis_program_cache cache(redis_test_options(server));
  for (int i = 0; i < 30; ++i) cache.put("k" + std::to_string(i), sample(200 * 1024, std::byte{1}));
  EXPECT_LT(cache.stats().puts, 30u);
  EXPECT_GT(cache.stats().errors, 0u);
  EXPECT_EQ(logs.warnings("refused a put"), 1u) << logs.all();
  EXPECT_TRUE(cache.get("k0"));
}

TEST(RedisCache, TrimRemovesTheLongestIdleFirst) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache cache(redis_test_options(server));
  raw_redis raw = server.client();
  for (int i = 0; i < 4; ++i) cache.put("k" + std::to_string(i), sample(1000, std::byte{1}));
  // OBJECT IDLETIME has a resolution of seconds: age k0 and k1 through DEBUG-free means is not
  // possible, so trim to a size that keeps two and check two went.
  const std::uint64_t each = cache.size_bytes() / 4;
  EXPECT_EQ(cache.trim(2 * each), 2u);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.stats().evictions, 2u);
  EXPECT_EQ(cache.trim(0), 2u);
  EXPECT_EQ(raw.integer({"DBSIZE"}), 0);
}

TEST(RedisCache, UseAfterCloseThrows) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache cache(redis_test_options(server));
  cache.close();
  EXPECT_THROW(cache.get("k"), error);
  EXPECT_THROW(cache.put("k", sample(1, std::byte{1})), error);
  EXPECT_NO_THROW(cache.stats());
}

// Threads share one cache object (run under TSan by the tsan preset): every hit is the entry of
// its key.
TEST(RedisCache, ConcurrentThreads) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  redis_program_cache cache(redis_test_options(server));
  std::atomic<int> wrong{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        const int k = (i * 7 + t) % 16;
        const std::string key = "k" + std::to_string(k);
        if ((i + t) % 3 == 0) {
          cache.put(key, sample(100 + k, static_cast<std::byte>(k)));
        } else if (auto hit = cache.get(key)) {
          ++hits;
          if (*hit != sample(100 + k, static_cast<std::byte>(k))) ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(hits.load(), 0);
  EXPECT_EQ(cache.stats().errors, 0u);
}

// Eight processes hammer one key, each writing its own value: every get returns one of the eight
// whole values, never a mix or a damaged one.
TEST(RedisCache, ProcessesHammerOneKey) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  constexpr int kProcesses = 8;
  const auto reports = testing::run_children(kProcesses, [&](int child) -> std::string {
    redis_program_cache cache(redis_test_options(server));
    int hits = 0;
    for (int i = 0; i < 200; ++i) {
      if (i % 2 == 0) {
        cache.put("one", sample(20000 + static_cast<std::size_t>(child), std::byte{1}));
      } else if (auto hit = cache.get("one")) {
        ++hits;
        const std::size_t writer = hit->size() - 20000;
        if (writer >= kProcesses || *hit != sample(hit->size(), std::byte{1})) {
          return "a wrong entry of " + std::to_string(hit->size()) + " bytes";
        }
      }
    }
    if (hits == 0) return "no hit";
    if (cache.stats().errors != 0 || cache.stats().corrupt_dropped != 0) {
      return "errors " + std::to_string(cache.stats().errors) + ", corrupt " +
             std::to_string(cache.stats().corrupt_dropped);
    }
    return "";
  });
  for (int i = 0; i < kProcesses; ++i) EXPECT_EQ(reports[static_cast<std::size_t>(i)], "") << i;
}

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
