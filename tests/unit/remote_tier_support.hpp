// What the remote tiers' tests (redis_cache_test, http_cache_test, single_flight_test) share:
// entries to store, a Redis cache's options for the tests' server, and the oracle of a remote
// tier shared by two machines with real compiles.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cucore/cache/key.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"
#include "redis_test_support.hpp"
#include "test_support.hpp"

namespace cucore::testing {

// An entry of `n` bytes of `fill`, with one symbol.
inline object_code sample(std::size_t n, std::byte fill, std::string name = "sample") {
  return object_code(code_type::cubin, std::vector<std::byte>(n, fill), std::move(name),
                     symbol_map{{"k<int>", "_Z1kIiEvv"}});
}

// A Redis cache on `server` that backs off briefly (100 to 200 ms) after a failure.
inline redis_cache_options redis_test_options(const redis_server& server,
                                              std::string_view suffix = "") {
  using namespace std::chrono_literals;
  redis_cache_options o;
  o.url = server.url(suffix);
  o.retry_initial = 100ms;
  o.retry_max = 200ms;
  // Generous: under a sanitizer on a loaded machine a command may take long, and a timeout would
  // count as an error in tests that expect none. Tests of timeouts set their own.
  o.command_timeout = 2000ms;
  return o;
}

// Each of `inputs` refused by `parse` with an E, whose message `check` looks at (the input is in
// the failure's trace).
template <class E, class Parse, class Check>
void expect_each_refused(std::initializer_list<const char*> inputs, Parse parse, Check check) {
  for (const char* input : inputs) {
    SCOPED_TRACE(input);
    try {
      parse(input);
      ADD_FAILURE() << "accepted";
    } catch (const E& e) {
      check(std::string(e.what()));
    }
  }
}

// Each of `inputs` refused by the URL parser `parse` (invalid_argument) with a message that names
// `what` ("redis cache URL") and `hint` (what to write, or where to read about it), and never shows
// the password or token "secret" some of them hold.
template <class Parse>
void expect_bad_urls(std::initializer_list<const char*> inputs, Parse parse, std::string_view what,
                     std::string_view hint) {
  expect_each_refused<invalid_argument>(inputs, parse, [&](const std::string& message) {
    EXPECT_TRUE(message.find(what) != std::string::npos) << message;
    EXPECT_TRUE(message.find(hint) != std::string::npos) << message;
    EXPECT_FALSE(message.find("secret") != std::string::npos) << message;
  });
}

// The kernel the tiered caches' tests compile for real.
inline constexpr const char* kSource = R"(
template <class T> __global__ void scale(T* x, T a) { x[threadIdx.x] *= a; }
)";

// kSource written to `dir`/scale.cu, for the tool to compile; its path.
inline std::string write_source(const temp_dir& dir) {
  const std::string path = (dir / "scale.cu").string();
  write_text(path, kSource);
  return path;
}

inline program_options compile_options() {
  program_options o;
  o.arch = kArch;
  return o;
}

// What compile_on_two_machines compiled.
struct two_machines {
  object_code uncached;                   // the oracle
  std::optional<program_cache_key> key;   // the first machine's compile's
  std::unique_ptr<program_cache> second;  // the second machine's (tiered) cache
};

// The oracle of a remote tier two machines share: scale<float> compiled through the first
// machine's cache misses (and stores), then through the second's (its own local tier, the same
// remote tier) hits the remote tier; both give what an uncached compile gives, symbol mapping
// included. The first cache is destroyed (its write-behind puts flushed) before the second opens.
inline two_machines compile_on_two_machines(
    const std::function<std::unique_ptr<program_cache>()>& open_first,
    const std::function<std::unique_ptr<program_cache>()>& open_second) {
  const std::vector<std::string> names = {"scale<float>"};
  two_machines out{
      program(kSource, source_type::cxx, compile_options()).compile(code_type::cubin, names),
      {},
      nullptr};
  {
    std::unique_ptr<program_cache> cache = open_first();
    program first(kSource, source_type::cxx, compile_options());
    EXPECT_EQ(first.compile(code_type::cubin, names, cache.get()), out.uncached);
    EXPECT_EQ(first.last_cache_outcome(), cache_outcome::miss);
    out.key = first.last_cache_key();
  }
  out.second = open_second();
  program second(kSource, source_type::cxx, compile_options());
  const object_code hit = second.compile(code_type::cubin, names, out.second.get());
  EXPECT_EQ(second.last_cache_outcome(), cache_outcome::hit);
  EXPECT_EQ(hit, out.uncached);
  EXPECT_EQ(hit.symbol("scale<float>"), out.uncached.symbol("scale<float>"));
  EXPECT_EQ(dynamic_cast<tiered_program_cache&>(*out.second).tier_stats().remote_hits, 1u);
  return out;
}

}  // namespace cucore::testing
