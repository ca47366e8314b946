// Cache packs (docs/cache-packs.md), each beside its floor measured in the same run:
//   import of a pack of 1,000 entries into an empty directory cache
//                             vs the same 1,000 puts straight into an empty directory cache
//   (fsync off and on: the directory cache's default is on)
//   export of those 1,000 entries from a directory cache, for scale
// Entries are 8 KiB of code that compresses about 3x, as cubins do.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/pack.hpp"
#include "scratch_directory.hpp"

namespace {

namespace fs = std::filesystem;
constexpr std::size_t kEntries = 1000;
constexpr std::size_t kBytes = 8 << 10;

const fs::path& scratch() {
  static const cucore::bench::scratch_directory dir("cucore-pack-bench-");
  return dir.path();
}

// A sixth random bytes, the rest runs of a few values: zstd level 3 makes about a third of it.
cucore::object_code entry(std::size_t i) {
  std::mt19937_64 rng(i);
  std::vector<std::byte> code(kBytes);
  for (std::size_t at = 0; at < code.size(); ++at) {
    code[at] = at % 6 == 0 ? static_cast<std::byte>(rng()) : static_cast<std::byte>(at / 64 % 7);
  }
  return cucore::object_code(cucore::code_type::cubin, std::move(code),
                             "kernel" + std::to_string(i % 50) + ".cu",
                             cucore::symbol_map{{"k<float>", "_Z1kIfEvPT_"}});
}

std::string key(std::size_t i) {
  std::string k(32, '\0');
  std::mt19937_64 rng(i + 1'000'000);
  for (auto& c : k) c = static_cast<char>(rng());
  return k;
}

const std::vector<cucore::object_code>& entries() {
  static const std::vector<cucore::object_code> all = [] {
    std::vector<cucore::object_code> out;
    for (std::size_t i = 0; i < kEntries; ++i) out.push_back(entry(i));
    return out;
  }();
  return all;
}

cucore::file_stream_cache_options options(bool fsync) {
  cucore::file_stream_cache_options o;
  o.fsync = fsync;
  o.statistics = false;
  return o;
}

// The pack of the 1,000 entries, exported once from a directory cache.
const fs::path& pack() {
  static const fs::path path = [] {
    cucore::file_stream_program_cache source(scratch() / "source", options(false));
    for (std::size_t i = 0; i < kEntries; ++i) source.put(key(i), entries()[i]);
    const fs::path p = scratch() / "1000.cupack";
    cucore::export_pack(source, p);
    return p;
  }();
  return path;
}

// An empty directory cache in a fresh directory for each iteration (the last one removed outside
// the timing; the cache opened inside it).
cucore::file_stream_program_cache fresh_cache(benchmark::State& state, bool fsync) {
  static int n = 0;  // across benchmarks: every directory is new
  state.PauseTiming();
  const fs::path dir = scratch() / ("into-" + std::to_string(n++));
  std::error_code ec;
  fs::remove_all(scratch() / ("into-" + std::to_string(n - 2)), ec);
  state.ResumeTiming();
  return cucore::file_stream_program_cache(dir, options(fsync));
}

void BM_ImportPack(benchmark::State& state) {
  const bool fsync = state.range(0) != 0;
  (void)pack();
  for (auto _ : state) {
    cucore::file_stream_program_cache into = fresh_cache(state, fsync);
    const auto r = cucore::import_pack(into, pack());
    if (r.added != kEntries) state.SkipWithError("not every entry was added");
  }
  state.counters["entries"] = kEntries;
  state.counters["pack_bytes"] = static_cast<double>(fs::file_size(pack()));
}

// The floor: the same entries, already in memory, put straight into an empty directory cache.
void BM_PutFloor(benchmark::State& state) {
  const bool fsync = state.range(0) != 0;
  (void)entries();
  for (auto _ : state) {
    cucore::file_stream_program_cache into = fresh_cache(state, fsync);
    for (std::size_t i = 0; i < kEntries; ++i) into.put(key(i), entries()[i]);
  }
  state.counters["entries"] = kEntries;
}

void BM_ExportPack(benchmark::State& state) {
  (void)pack();
  cucore::file_stream_program_cache source(scratch() / "source", options(false));
  for (auto _ : state) cucore::export_pack(source, scratch() / "again.cupack");
  state.counters["entries"] = kEntries;
}

// Without and with fsync, five runs each in milliseconds of real time (a run is mostly I/O).
void without_and_with_fsync(benchmark::internal::Benchmark* b) {
  b->ArgName("fsync")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);
}

BENCHMARK(BM_ImportPack)->Apply(without_and_with_fsync);
BENCHMARK(BM_PutFloor)->Apply(without_and_with_fsync);
BENCHMARK(BM_ExportPack)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
