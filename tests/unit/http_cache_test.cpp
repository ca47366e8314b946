// The HTTP tier against a real nginx (started per test on a free loopback port, WebDAV PUT and
// DELETE on; every test skips where nginx is not installed): URLs and specs, the layouts' object
// paths, objects planted and damaged on the server's disk, the server stopped, hung, answering
// garbage and 500, credentials, read-only consumers, large entries, and real NVRTC compiles
// through "dir:X+http://..." with a fresh local tier hitting what another one stored.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/entry_format.hpp"
#include "cache_test_support.hpp"
#include "cli_support.hpp"
#include "common/sha256.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/http.hpp"
#include "cucore/cache/open.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"
#include "nginx_test_support.hpp"
#include "remote_tier_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using namespace std::chrono_literals;
using namespace testing;  // the shared test helpers (remote_tier_support.hpp and the rest)

http_cache_options options_for(const std::string& url) {
  http_cache_options o;
  o.url = url;
  o.retry_initial = 100ms;
  o.retry_max = 200ms;
  o.operation_timeout = 5000ms;  // generous under sanitizers; timeout tests set their own
  return o;
}

// Where the object of `url_path` (what object_url gives after the host) lies in nginx's root.
std::filesystem::path on_disk(const nginx_server& server, const std::string& object_url) {
  const std::string prefix = "http://127.0.0.1:" + std::to_string(server.port()) + "/";
  return server.root() / object_url.substr(prefix.size());
}

void write_bytes(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::filesystem::create_directories(path.parent_path());
  testing::write_text(path, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

// ---------------------------------------------------------------------------------------------
// URLs

TEST(HttpUrl, ParsesEveryPart) {
  const http_url u = parse_http_url(
      "HTTPS://alice:p%40ss:w@cache.example:8443/a/b|layout=bazel|read-only|connect-timeout=20"
      "|operation-timeout=30|header=X-Team=gpu%7Cjit|keep-alive=false");
  EXPECT_EQ(u.scheme, "https");
  EXPECT_EQ(u.user, "alice");
  EXPECT_EQ(u.password, "p@ss:w");
  EXPECT_EQ(u.host, "cache.example");
  EXPECT_EQ(u.port, 8443);
  EXPECT_EQ(u.path, "/a/b/");
  EXPECT_EQ(u.layout, http_layout::bazel);
  EXPECT_EQ(u.read_only, true);
  EXPECT_EQ(u.connect_timeout, 20ms);
  EXPECT_EQ(u.operation_timeout, 30ms);
  ASSERT_EQ(u.headers.size(), 1u);
  EXPECT_EQ(u.headers[0].first, "X-Team");
  EXPECT_EQ(u.headers[0].second, "gpu|jit");
  EXPECT_EQ(u.keep_alive, false);
  EXPECT_EQ(u.base(), "https://cache.example:8443/a/b/");

  const http_url plain = parse_http_url("http://[::1]");
  EXPECT_EQ(plain.host, "[::1]");
  EXPECT_EQ(plain.port, 0);
  EXPECT_EQ(plain.path, "/");
  EXPECT_EQ(parse_http_url("http://h/c|bearer-token=abc").bearer_token, "abc");
}

TEST(HttpUrl, MalformedUrlsAreRefusedWithoutShowingSecrets) {
  testing::expect_bad_urls(
      {
          "ftp://host/x",
          "http://",
          "http:///path",
          "http://host:0/",
          "http://host:99999/",
          "http://host:/x",
          "http://secret@host/",
          "http://[::1/x",
          "http://host/a b",
          "http://host/x?y=1",
          "http://host/x|layout=tree",
          "http://host/x|colour=blue",
          "http://host/x|connect-timeout=0",
          "http://host/x|read-only=maybe",
          "http://host/x|header=NoEquals",
          "http://u:secret@host/x|bearer-token=secret",
          "http://u:bad%zzsecret@host/",
      },
      [](const char* url) { parse_http_url(url); }, "http cache URL", "docs/cache-http.md");
}

TEST(HttpUrl, RedactionHidesPasswordsTokensAndHeaderValues) {
  EXPECT_EQ(
      redact_http_url("http://bob:hunter2@h:1/c|layout=flat|bearer-token=T0K|header=X-Key=K3Y"),
      "http://bob:***@h:1/c|layout=flat|bearer-token=***|header=X-Key=***");
  EXPECT_EQ(redact_http_url("http://hunter2@h/c"), "http://***@h/c");
  EXPECT_EQ(redact_http_url("http://h/c@v1"), "http://h/c@v1");
}

// ---------------------------------------------------------------------------------------------
// Specs

TEST(HttpSpec, HttpUrlsAreRemoteTiersAloneAndBehindALocalOne) {
  const cache_spec alone = parse_cache_spec("HTTP://h:8080/c|layout=flat");
  EXPECT_EQ(alone.local, cache_spec::local_kind::none);
  EXPECT_EQ(alone.remote, "http://h:8080/c|layout=flat");
  EXPECT_EQ(alone.remote_backend, "http");

  const cache_spec tiered = parse_cache_spec("dir:/tmp/x+https://h/c");
  EXPECT_EQ(tiered.local, cache_spec::local_kind::directory);
  EXPECT_EQ(tiered.path, "/tmp/x");
  EXPECT_EQ(tiered.remote, "https://h/c");
  EXPECT_EQ(tiered.remote_backend, "http");

  const cache_spec default_local = parse_cache_spec("+http://h/c");
  EXPECT_EQ(default_local.local, cache_spec::local_kind::default_directory);
  EXPECT_EQ(parse_cache_spec("memory+redis://h").remote_backend, "redis");

  auto http = open_program_cache("http://127.0.0.1:1/c");
  EXPECT_NE(dynamic_cast<http_program_cache*>(http.get()), nullptr);
  auto both = open_program_cache("memory+http://127.0.0.1:1/c|read-only");
  auto* t = dynamic_cast<tiered_program_cache*>(both.get());
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->remote().read_only());
}

TEST(HttpSpec, RemoteCacheVariableMayNameAnHttpServer) {
  scoped_env remote("CUCORE_REMOTE_CACHE", "http://u:pw@h/c");
  const cache_spec s = parse_cache_spec("");
  EXPECT_EQ(s.local, cache_spec::local_kind::default_directory);
  EXPECT_EQ(s.remote, "http://u:pw@h/c");
  EXPECT_TRUE(s.remote_from_environment);
}

TEST(HttpSpec, MisspelledHttpSpecsAreRefusedWithoutShowingSecrets) {
  testing::expect_each_refused<cache_spec_error>(
      {"http:/host", "https:host", "d+http:/host", "none+http://h/c", "d+http://u:secret@h:0/c",
       "http://h/c|bearer-token=secret|bogus"},
      [](const char* spec) { parse_cache_spec(spec); },
      [](const std::string& what) {
        EXPECT_FALSE(contains(what, "secret")) << what;
        EXPECT_TRUE(contains(what, "http")) << what;
      });
}

// ---------------------------------------------------------------------------------------------
// The tier alone

TEST(HttpCache, AMissStoresAtTheLayoutsPath) {
  nginx_server server;
  CUCORE_REQUIRE_NGINX(server);
  for (const char* layout : {"", "|layout=subdirs", "|layout=flat", "|layout=bazel"}) {
    SCOPED_TRACE(layout);
    http_program_cache cache(options_for(server.url("cache", layout)));
    const std::string key = std::string("key") + layout;
    EXPECT_FALSE(cache.get(key));
    cache.put(key, sample(1000, std::byte{7}));
    const std::string url = cache.object_url(key);
    const std::string hex(detail::sha256_hex(cache_key_ref(key).bytes()).data(), 64);
    const std::string base = server.url("cache", "/");
    if (std::string_view(layout).ends_with("flat")) {
      EXPECT_EQ(url, base + hex);
    } else if (std::string_view(layout).ends_with("bazel")) {
      EXPECT_EQ(url, base + "ac/" + hex);
    } else {
      EXPECT_EQ(url, base + hex.substr(0, 2) + "/" + hex.substr(2));
    }
    const auto path = on_disk(server, url);
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    const auto encoded =
        detail::encode_entry(cache_key_ref(key).bytes(), sample(1000, std::byte{7}));
    EXPECT_EQ(testing::read_text(path),
              std::string(reinterpret_cast<const char*>(encoded.data()), encoded.size()));
    auto hit = cache.get(key);
    ASSERT_TRUE(hit);
    EXPECT_EQ(*hit, sample(1000, std::byte{7}));
    EXPECT_EQ(hit->symbol("k<int>"), "_Z1kIiEvv");
    const cache_stats s = cache.stats();
    EXPECT_EQ(s.hits, 1u);
    EXPECT_EQ(s.misses, 1u);
    EXPECT_EQ(s.puts, 1u);
    EXPECT_EQ(s.errors, 0u);
  }
}

TEST(HttpCache, LargeEntriesRoundTrip) {
  nginx_server server;
  CUCORE_REQUIRE_NGINX(server);
  http_program_cache cache(options_for(server.url()));
  std::vector<std::byte> bytes(24u << 20);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 131 >> 3);
  const object_code big(code_type::cubin, bytes, "big");
  cache.put("big", big);
  auto hit = cache.get("big");
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, big);
  EXPECT_EQ(cache.stats().errors, 0u);

  http_cache_options small = options_for(server.url());
  small.max_entry_bytes = 1u << 20;
  http_program_cache bounded(small);
  EXPECT_FALSE(bounded.get("big"));  // larger than this reader takes: a miss
  bounded.put("big2", big);          // larger than it stores: skipped
  EXPECT_EQ(bounded.writes_skipped(), 1u);
  EXPECT_FALSE(std::filesystem::exists(on_disk(server, bounded.object_url("big2"))));
}

TEST(HttpCache, PlantedAndDamagedObjectsAreMisses) {
  nginx_server server;
  CUCORE_REQUIRE_NGINX(server);
  http_program_cache cache(options_for(server.url()));
  const auto path = on_disk(server, cache.object_url("victim"));
  // A valid entry, but another key's, where "victim" is looked up.
  write_bytes(path, detail::encode_entry(cache_key_ref("other").bytes(), sample(64, std::byte{1})));
  EXPECT_FALSE(cache.get("victim"));
  // One flipped bit in the payload; then truncated; then not an entry at all.
  auto damaged = detail::encode_entry(cache_key_ref("victim").bytes(), sample(64, std::byte{1}));
  damaged[damaged.size() - 3] ^= std::byte{0x10};
  write_bytes(path, damaged);
  EXPECT_FALSE(cache.get("victim"));
  damaged.resize(damaged.size() / 2);
  write_bytes(path, damaged);
  EXPECT_FALSE(cache.get("victim"));
  testing::write_text(path, "<html>not an entry</html>");
  EXPECT_FALSE(cache.get("victim"));
  EXPECT_EQ(cache.stats().corrupt_dropped, 4u);
  EXPECT_EQ(cache.stats().hits, 0u);
  // The put after the compile replaces it.
  cache.put("victim", sample(64, std::byte{2}));
  auto hit = cache.get("victim");
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, sample(64, std::byte{2}));
}

TEST(HttpCache, GarbageAnd500AreMissesCountedAndLoggedOnce) {
  nginx_server server;
  CUCORE_REQUIRE_NGINX(server);
  log_capture logs;
  http_program_cache garbage(options_for(server.url("garbage")));
  EXPECT_FALSE(garbage.get("k"));
  EXPECT_EQ(garbage.stats().corrupt_dropped, 1u);

  http_program_cache failing(options_for(server.url("fail")));
  EXPECT_FALSE(failing.get("k"));
  failing.put("k", sample(10, std::byte{1}));  // within the backoff: not even sent
  std::this_thread::sleep_for(150ms);
  EXPECT_FALSE(failing.get("k"));
  EXPECT_EQ(failing.stats().misses, 2u);
  EXPECT_EQ(failing.stats().errors, 3u);
  EXPECT_EQ(failing.stats().puts, 0u);
  EXPECT_EQ(logs.warnings("HTTP 500"), 1u) << logs.all();
}

TEST(HttpCache, StoppedServerIsAMissThenBackoffThenRecovery) {
  nginx_server server;
  CUCORE_REQUIRE_NGINX(server);
  log_capture logs;
  http_program_cache cache(options_for(server.url()));
  cache.put("k", sample(100, std::byte{3}));
  server.stop();
  EXPECT_FALSE(cache.get("k"));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(cache.get("k"));  // the backoff: at once
  EXPECT_LT(std::chrono::steady_clock::now() - start, 100ms);
  EXPECT_GE(cache.stats().errors, 101u);
  EXPECT_EQ(logs.warnings("unavailable"), 1u) << logs.all();
  ASSERT_TRUE(server.start()) << server.log();
  std::this_thread::sleep_for(250ms);
  auto hit = cache.get("k");  // nginx's files outlive it
  ASSERT_TRUE(hit);
  EXPECT_EQ(logs.count(log_level::info, "reachable again"), 1u) << logs.all();
}

TEST(HttpCache, HungServerCostsOneTimeout) {
  nginx_server server;
  CUCORE_REQUIRE_NGINX(server);
  http_program_cache cache(options_for(server.url("slow", "|operation-timeout=300")));
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(cache.get("k"));
  const auto first = std::chrono::steady_clock::now() - start;
  EXPECT_GE(first, 250ms);
  EXPECT_LT(first, 2000ms);
  start = std::chrono::steady_clock::now();
  cache.put("k", sample(10, std::byte{1}));
  EXPECT_FALSE(cache.get("k"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 50ms);  // the backoff
  EXPECT_EQ(cache.stats().errors, 3u);
}

TEST(HttpCache, ReadOnlyNeverWrites) {
  nginx_server server;
  CUCORE_REQUIRE_NGINX(server);
  http_program_cache writer(options_for(server.url()));
  writer.put("shared", sample(10, std::byte{4}));
  http_program_cache reader(options_for(server.url("cache", "|read-only")));
  EXPECT_TRUE(reader.read_only());
  EXPECT_TRUE(contains(reader.description(), "(read-only)"));
  reader.put("mine", sample(10, std::byte{5}));
  EXPECT_FALSE(reader.erase("shared"));
  EXPECT_EQ(reader.writes_skipped(), 2u);
  EXPECT_TRUE(reader.get("shared"));
  EXPECT_FALSE(std::filesystem::exists(on_disk(server, reader.object_url("mine"))));
  EXPECT_TRUE(std::filesystem::exists(on_disk(server, reader.object_url("shared"))));
  const std::string access = server.access_log_with(2);
  EXPECT_EQ(std::count(access.begin(), access.end(), '\n'), 2) << access;  // the PUT, the GET
  EXPECT_FALSE(contains(access, "DELETE")) << access;
}

TEST(HttpCache, EraseDeletesWhereTheServerAllows) {
  nginx_server server;
  CUCORE_REQUIRE_NGINX(server);
  http_program_cache cache(options_for(server.url()));
  cache.put("k", sample(10, std::byte{1}));
  EXPECT_TRUE(cache.erase("k"));
  EXPECT_FALSE(cache.erase("k"));
  EXPECT_FALSE(cache.get("k"));
  http_program_cache no_delete(options_for(server.url("nodelete")));
  no_delete.put("k", sample(10, std::byte{1}));
  EXPECT_FALSE(no_delete.erase("k"));  // 405
  EXPECT_TRUE(no_delete.get("k"));
  EXPECT_EQ(no_delete.stats().errors, 0u);
}

TEST(HttpCache, MaintenanceSaysHttpCannotList) {
  http_program_cache cache(options_for("http://127.0.0.1:1/c"));
  EXPECT_THROW(cache.size(), error);
  EXPECT_THROW(cache.list(), error);
  EXPECT_THROW(cache.clear(), error);
  EXPECT_THROW(cache.trim(0), error);
  cache.close();
  EXPECT_THROW(cache.get("k"), error);
}

TEST(HttpCache, CredentialsAuthenticateAndAreNeverShown) {
  nginx_server bearer_server;
  CUCORE_REQUIRE_NGINX(bearer_server);
  log_capture logs;
  {
    http_program_cache cache(options_for(bearer_server.url("auth", "|bearer-token=s3cret-token")));
    cache.put("k", sample(10, std::byte{1}));
    EXPECT_TRUE(cache.get("k"));
    EXPECT_EQ(cache.stats().errors, 0u);
    EXPECT_FALSE(contains(cache.description(), "s3cret"));
    EXPECT_FALSE(contains(cache.url(), "s3cret"));
  }
  {
    scoped_env token("CUCORE_HTTP_BEARER_TOKEN", "s3cret-token");
    http_program_cache cache(options_for(bearer_server.url("auth")));
    EXPECT_TRUE(cache.get("k"));
  }
  {
    http_program_cache wrong(options_for(bearer_server.url("auth", "|bearer-token=s3cret-wrong")));
    EXPECT_FALSE(wrong.get("k"));  // 401: an error, logged (without the token)
    EXPECT_EQ(wrong.stats().errors, 1u);
  }
  // Basic: "Basic " + base64("alice:s3cret pw").
  nginx_server basic_server("Basic YWxpY2U6czNjcmV0IHB3");
  CUCORE_REQUIRE_NGINX(basic_server);
  {
    http_program_cache cache(options_for(basic_server.url("auth").insert(7, "alice:s3cret%20pw@")));
    cache.put("k", sample(10, std::byte{1}));
    EXPECT_TRUE(cache.get("k"));
    EXPECT_EQ(cache.stats().errors, 0u);
    EXPECT_FALSE(contains(cache.description(), "s3cret"));
    EXPECT_TRUE(contains(cache.url(), "alice:***@"));
  }
  EXPECT_GE(logs.all().size(), 1u);
  EXPECT_FALSE(contains(logs.all(), "s3cret")) << logs.all();
}

// ---------------------------------------------------------------------------------------------
// Real compiles through "dir:X+http://..."

TEST(HttpTiered, AFreshLocalTierHitsWhatAnotherStored) {
  nginx_server server;
  CUCORE_REQUIRE_NGINX(server);
  temp_dir a, b;
  auto machine = [&](const temp_dir& local) {
    return open_program_cache("dir:" + local.path().string() + "+" + server.url());
  };
  (void)testing::compile_on_two_machines([&] { return machine(a); }, [&] { return machine(b); });
  std::size_t objects = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(server.root() / "cache")) {
    objects += e.is_regular_file();
  }
  EXPECT_EQ(objects, 1u);
  EXPECT_EQ(file_stream_program_cache(b.path()).size(), 1u);  // backfilled
}

// Whatever the server does, compiles succeed with the right code; the remote tier counts errors.
TEST(HttpTiered, AFailingServerCostsHitsNeverCorrectness) {
  nginx_server server;
  CUCORE_REQUIRE_NGINX(server);
  const object_code uncached =
      program(kSource, source_type::cxx, compile_options()).compile(code_type::ptx);
  struct failure {
    std::string name, url;
    bool errors;
  };
  const std::vector<failure> failures = {
      {"500", server.url("fail"), true},
      {"garbage", server.url("garbage"), false},
      {"slow", server.url("slow", "|operation-timeout=300"), true},
      {"stopped", "http://127.0.0.1:" + std::to_string(testing::free_loopback_port()) + "/c", true},
  };
  for (const failure& f : failures) {
    SCOPED_TRACE(f.name);
    temp_dir local;
    auto cache = open_program_cache("dir:" + local.path().string() + "+" + f.url);
    auto& tiered = dynamic_cast<tiered_program_cache&>(*cache);
    const auto start = std::chrono::steady_clock::now();
    const auto remote_get = tiered.remote().get("absent");
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2000ms);
    EXPECT_FALSE(remote_get);
    program p(kSource, source_type::cxx, compile_options());
    EXPECT_EQ(p.compile(code_type::ptx, {}, cache.get()), uncached);
    tiered.flush();
    program again(kSource, source_type::cxx, compile_options());
    EXPECT_EQ(again.compile(code_type::ptx, {}, cache.get()), uncached);
    EXPECT_EQ(again.last_cache_outcome(), cache_outcome::hit);  // the local tier
    const cache_stats remote = tiered.remote().stats();
    EXPECT_EQ(remote.hits, 0u);
    EXPECT_GE(f.errors ? remote.errors : remote.corrupt_dropped, 1u);
  }
}

#ifdef CUCORE_CLI_PATH
// The tool: compile through dir:A+http://..., then a fresh dir:B hits, and cache stats shows both
// tiers.
TEST(HttpTiered, CliCompileAndStats) {
  nginx_server server;
  CUCORE_REQUIRE_NGINX(server);
  temp_dir work;
  const std::string source = testing::write_source(work);
  auto run = [&](const std::vector<std::string>& args) {
    testing::spawn_options o;
    o.out = o.err = (work / "out.txt").string();  // one file for both
    const testing::run_result r = testing::run_captured(CUCORE_CLI_PATH, args, o);
    return std::make_pair(r.status, r.out);
  };
  auto compile = [&](const std::string& local) {
    return run({"compile", source, "--arch", testing::kArch, "--target", "cubin", "-o",
                (work / (local + ".cubin")).string(), "--cache",
                "dir:" + (work / local).string() + "+" + server.url()});
  };
  const auto first = compile("a");
  ASSERT_EQ(first.first, 0) << first.second;
  EXPECT_TRUE(contains(first.second, "cache miss")) << first.second;
  const auto second = compile("b");
  ASSERT_EQ(second.first, 0) << second.second;
  EXPECT_TRUE(contains(second.second, "cache hit")) << second.second;
  EXPECT_EQ(testing::read_text(work / "a.cubin"), testing::read_text(work / "b.cubin"));
  const auto stats =
      run({"cache", "stats", "--cache", "dir:" + (work / "b").string() + "+" + server.url()});
  EXPECT_EQ(stats.first, 0) << stats.second;
  EXPECT_TRUE(contains(stats.second, "remote   http http://127.0.0.1:")) << stats.second;
  EXPECT_TRUE(contains(stats.second, " remote  1 hit, 0 misses")) << stats.second;
}
#endif

}  // namespace
}  // namespace cucore
