// What the remote tiers' benchmarks (redis_bench, http_bench) share: the entries they store, the
// tier's own hit and put measured the same way, and a main() that runs only with the tests'
// server (tests/unit/loopback_server.hpp) up.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cucore/object_code.hpp"
#include "loopback_server.hpp"

namespace cucore::bench {

// The one server of the program, started at first use and stopped at exit.
template <class Server>
Server& shared_server() {
  static Server server;
  return server;
}

// `n` random bytes (seeded by n) as a cubin.
inline object_code random_code(std::size_t n) {
  std::mt19937_64 rng(n);
  std::vector<std::byte> b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return object_code(code_type::cubin, std::move(b), "bench");
}

// A hit of an entry of state.range(0) bytes through the remote tier.
template <class Cache, class Options>
void remote_hit(benchmark::State& state, const Options& options) {
  Cache cache(options);
  cache.put("hit", random_code(static_cast<std::size_t>(state.range(0))));
  for (auto _ : state) {
    auto hit = cache.get("hit");
    if (!hit) state.SkipWithError("miss");
    benchmark::DoNotOptimize(hit);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

// A put of an entry of state.range(0) bytes through the remote tier.
template <class Cache, class Options>
void remote_put(benchmark::State& state, const Options& options) {
  Cache cache(options);
  const auto code = random_code(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) cache.put("put", code);
  if (cache.stats().errors != 0) state.SkipWithError("errors");
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

// Runs the benchmarks where `server` is up; else says why nothing was measured and exits 0.
inline int run_benchmarks(int argc, char** argv, const char* program,
                          const testing::loopback_server& server) {
  if (!server.installed() || !server.running()) {
    std::printf("%s: %s is not installed or did not start; nothing measured\n", program,
                server.name().c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace cucore::bench
