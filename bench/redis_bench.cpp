// The Redis tier beside its floor, measured in the same run against one redis-server this program
// starts on a free loopback port (it exits 0 with a note where redis-server is not installed):
//   remote hit (redis_program_cache::get)   vs a raw hiredis GET of the same bytes
//   remote put (redis_program_cache::put)   vs a raw hiredis SET of the same bytes
//   tiered hit after backfill               vs a hit of the local directory cache alone
// Goal (issue 9): remote hit within 1.3x of the raw GET.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/tiered.hpp"
#include "redis_test_support.hpp"
#include "remote_tier_bench.hpp"

namespace {

using namespace cucore::bench;    // remote_tier_bench.hpp
using namespace cucore::testing;  // redis_test_support.hpp

redis_server& server() {
  return shared_server<redis_server>();
}

cucore::redis_cache_options options() {
  cucore::redis_cache_options o;
  o.url = server().url("/0");
  return o;
}

void BM_RedisHit(benchmark::State& state) {
  remote_hit<cucore::redis_program_cache>(state, options());
}
BENCHMARK(BM_RedisHit)->Arg(4 << 10)->Arg(256 << 10);

// The floor: GET of the same stored bytes on a plain connection, reply freed.
void BM_RawGetFloor(benchmark::State& state) {
  cucore::redis_program_cache cache(options());
  cache.put("hit", random_code(static_cast<std::size_t>(state.range(0))));
  raw_redis raw(server().port());
  const std::string key = cache.redis_key("hit");
  for (auto _ : state) {
    auto reply = raw.command({"GET", key});
    if (!reply || reply->type != REDIS_REPLY_STRING) state.SkipWithError("no value");
    benchmark::DoNotOptimize(reply->str);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_RawGetFloor)->Arg(4 << 10)->Arg(256 << 10);

void BM_RedisPut(benchmark::State& state) {
  remote_put<cucore::redis_program_cache>(state, options());
}
BENCHMARK(BM_RedisPut)->Arg(4 << 10)->Arg(256 << 10);

void BM_RawSetFloor(benchmark::State& state) {
  raw_redis raw(server().port());
  const auto code = random_code(static_cast<std::size_t>(state.range(0)));
  const std::string value(reinterpret_cast<const char*>(code.code().data()), code.size());
  for (auto _ : state) benchmark::DoNotOptimize(raw.command({"SET", "cucore-bench:raw", value}));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_RawSetFloor)->Arg(4 << 10)->Arg(256 << 10);

// A key another machine stored, hit once through the remote tier (backfilled), then measured:
// it must cost what a local directory hit costs.
void BM_TieredHitAfterBackfill(benchmark::State& state) {
  cucore::testing::temp_dir dir;
  cucore::redis_program_cache(options()).put("tiered", random_code(4 << 10));
  cucore::tiered_program_cache cache(
      std::make_unique<cucore::file_stream_program_cache>(dir.path()),
      std::make_unique<cucore::redis_program_cache>(options()));
  if (!cache.get("tiered") || cache.tier_stats().remote_hits != 1)
    state.SkipWithError("no backfill");
  for (auto _ : state) benchmark::DoNotOptimize(cache.get("tiered"));
}
BENCHMARK(BM_TieredHitAfterBackfill);

void BM_LocalDirectoryHit(benchmark::State& state) {
  cucore::testing::temp_dir dir;
  cucore::file_stream_program_cache cache(dir.path());
  cache.put("local", random_code(4 << 10));
  for (auto _ : state) benchmark::DoNotOptimize(cache.get("local"));
}
BENCHMARK(BM_LocalDirectoryHit);

}  // namespace

int main(int argc, char** argv) {
  return cucore::bench::run_benchmarks(argc, argv, "redis_bench", server());
}
