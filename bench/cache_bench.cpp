// Program cache benchmarks, each beside its floor measured in the same run:
//   key derivation            vs SHA-256 of the same source bytes
//   in-memory hit             vs an unordered_map lookup under a mutex
//   directory hit             vs open/read/close of a file of the same size (into a fresh vector,
//                             and into an aligned buffer that is not zero-filled)
//   SQLite hit                vs a raw prepared SELECT of a blob of the same size
//   compile hit               vs the cold compile it replaces (small kernel; CCCL-including kernel)
// bench/run.py runs this and prints the ratios.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <thread>
#include <unordered_map>

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/program.hpp"
#include "cucore/toolkit.hpp"
#include "scratch_directory.hpp"

namespace {

namespace fs = std::filesystem;

std::string random_text(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, ' ');
  for (auto& c : s) c = static_cast<char>('a' + rng() % 26);
  return s;
}

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

// A scratch directory for the whole run, removed at exit.
const fs::path& scratch() {
  static const cucore::bench::scratch_directory dir("cucore-bench-");
  return dir.path();
}

// ---- keys -----------------------------------------------------------------------------------

std::string kernel_source(std::size_t bytes) {
  std::string src = "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n// ";
  src += random_text(bytes > src.size() ? bytes - src.size() : 0, 1);
  return src;
}

void BM_KeyDerivation(benchmark::State& state) {
  const auto src = kernel_source(static_cast<std::size_t>(state.range(0)));
  cucore::program_cache_key_inputs in;
  in.code = src;
  in.options.arch = "sm_90";
  in.options.std = "c++17";
  in.target = cucore::code_type::cubin;
  cucore::make_program_cache_key(in);  // probes run once per process, outside the loop
  for (auto _ : state) benchmark::DoNotOptimize(cucore::make_program_cache_key(in));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_KeyDerivation)->Arg(1 << 10)->Arg(4 << 10)->Arg(16 << 10)->Arg(64 << 10);

// Kernel code as it usually comes: it includes a header (<...>, allowed), so the key's scan for
// files the key cannot see runs in full (the source above, one comment, takes its fast path).
std::string including_source(std::size_t bytes) {
  std::string src = "#include <cuda_fp16.h>\n";
  std::mt19937_64 rng(7);
  while (src.size() < bytes) {
    src += "__device__ float f" + std::to_string(rng() % 100000) +
           "(float a) { return a * 2.0f + " + std::to_string(rng() % 1000) + "; }  // step\n";
  }
  src.resize(bytes);
  return src;
}

void BM_KeyDerivationIncluding(benchmark::State& state) {
  const auto src = including_source(static_cast<std::size_t>(state.range(0)));
  cucore::program_cache_key_inputs in;
  in.code = src;
  in.options.arch = "sm_90";
  in.options.std = "c++17";
  in.target = cucore::code_type::cubin;
  cucore::make_program_cache_key(in);
  for (auto _ : state) benchmark::DoNotOptimize(cucore::make_program_cache_key(in));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_KeyDerivationIncluding)->Arg(1 << 10)->Arg(64 << 10);

void BM_Sha256Floor(benchmark::State& state) {
  const auto src = kernel_source(static_cast<std::size_t>(state.range(0)));
  unsigned char digest[32];
  unsigned int len = 0;
  for (auto _ : state) {
    EVP_Digest(src.data(), src.size(), digest, &len, EVP_sha256(), nullptr);
    benchmark::DoNotOptimize(digest);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Sha256Floor)->Arg(1 << 10)->Arg(4 << 10)->Arg(16 << 10)->Arg(64 << 10);

// ---- in-memory ------------------------------------------------------------------------------

std::vector<std::string> keys(std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(random_text(32, static_cast<unsigned>(i + 7)));
  return out;
}

void BM_InMemoryHit(benchmark::State& state) {
  cucore::in_memory_program_cache cache;
  const auto ks = keys(1024);
  for (const auto& k : ks)
    cache.put(k, cucore::object_code(cucore::code_type::cubin, random_bytes(4096, 3)));
  std::size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(cache.get(ks[i++ & 1023]));
}
BENCHMARK(BM_InMemoryHit);

void BM_UnorderedMapFloor(benchmark::State& state) {
  std::mutex mutex;
  std::unordered_map<std::string, cucore::object_code> map;
  const auto ks = keys(1024);
  for (const auto& k : ks)
    map.emplace(k, cucore::object_code(cucore::code_type::cubin, random_bytes(4096, 3)));
  std::size_t i = 0;
  for (auto _ : state) {
    std::lock_guard lock(mutex);
    auto it = map.find(ks[i++ & 1023]);
    benchmark::DoNotOptimize(std::optional<cucore::object_code>(it->second));
  }
}
BENCHMARK(BM_UnorderedMapFloor);

// Fills `cache` with 64 entries of `size` random bytes, then times hits cycling through them.
template <class Cache>
void time_hits(benchmark::State& state, Cache& cache, std::size_t size) {
  const auto ks = keys(64);
  for (const auto& k : ks)
    cache.put(k, cucore::object_code(cucore::code_type::cubin, random_bytes(size, 5)));
  std::size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(cache.get(ks[i++ & 63]));
}

// ---- directory ------------------------------------------------------------------------------

void BM_DirectoryHit(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const fs::path root = scratch() / ("dir-" + std::to_string(size));
  cucore::file_stream_program_cache cache(root);
  time_hits(state, cache, size);
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_DirectoryHit)->Arg(4 << 10)->Arg(256 << 10);

// The floors' 64 files of `size` random bytes, named `prefix` + size + index.
std::vector<fs::path> floor_files(const std::string& prefix, std::size_t size) {
  std::vector<fs::path> files;
  const auto bytes = random_bytes(size, 5);
  for (int i = 0; i < 64; ++i) {
    files.push_back(scratch() / (prefix + std::to_string(size) + "-" + std::to_string(i)));
    std::ofstream(files.back(), std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(size));
  }
  return files;
}

// The floor: open, fstat, read the whole file into a fresh buffer, close (no parsing, no
// checksum, no recency update).
void BM_OpenReadCloseFloor(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const std::vector<fs::path> files = floor_files("raw-", size);
  std::size_t i = 0;
  for (auto _ : state) {
    int fd = ::open(files[i++ & 63].c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    ::fstat(fd, &st);
    std::vector<std::byte> buffer(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    while (done < buffer.size()) {
      auto n = ::read(fd, buffer.data() + done, buffer.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ::close(fd);
    benchmark::DoNotOptimize(buffer);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_OpenReadCloseFloor)->Arg(4 << 10)->Arg(256 << 10);

// The strictest floor: the same, into a buffer that is neither zero-filled nor left at malloc's
// 16-byte alignment (the kernel copies into a cache-line-aligned buffer much faster on some CPUs),
// as the directory hit reads. What a hit costs beyond this is parsing and the checksum.
void BM_OpenReadCloseAlignedFloor(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const std::vector<fs::path> files = floor_files("raw-aligned-", size);
  std::size_t i = 0;
  for (auto _ : state) {
    int fd = ::open(files[i++ & 63].c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    ::fstat(fd, &st);
    const auto n = static_cast<std::size_t>(st.st_size);
    // Over-allocated and aligned by hand: aligned new's blocks are not reused by glibc for the
    // next request of the same size, which would read into cold memory every time.
    std::unique_ptr<std::byte[]> storage(new std::byte[n + 63]);
    std::byte* buffer =
        storage.get() + (64 - reinterpret_cast<std::uintptr_t>(storage.get()) % 64) % 64;
    std::size_t done = 0;
    while (done < n) {
      auto got = ::read(fd, buffer + done, n - done);
      if (got <= 0) break;
      done += static_cast<std::size_t>(got);
    }
    ::close(fd);
    benchmark::DoNotOptimize(buffer);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_OpenReadCloseAlignedFloor)->Arg(4 << 10)->Arg(256 << 10);

// The cost of persistent statistics on a hit: the same 4 KiB hit with statistics on (1, the
// default: one atomic add into a mapped shard file per hit) and off (0).
void BM_DirectoryHitStatistics(benchmark::State& state) {
  const bool on = state.range(0) != 0;
  const fs::path root = scratch() / (on ? "dir-stats-on" : "dir-stats-off");
  cucore::file_stream_cache_options o;
  o.statistics = on;
  cucore::file_stream_program_cache cache(root, o);
  time_hits(state, cache, 4096);
  state.SetLabel(on ? "statistics on" : "statistics off");
}
BENCHMARK(BM_DirectoryHitStatistics)->Arg(0)->Arg(1)->Arg(0)->Arg(1);

// ---- SQLite ---------------------------------------------------------------------------------

void BM_SqliteHit(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const fs::path file = scratch() / ("cache-" + std::to_string(size) + ".db");
  cucore::sqlite_program_cache cache(file);
  time_hits(state, cache, size);
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_SqliteHit)->Arg(4 << 10)->Arg(256 << 10);

// What statistics add per event: one atomic add into this process's mapped shard.
void BM_StatisticsAdd(benchmark::State& state) {
  cucore::cache_statistics stats(scratch() / "stats-add");
  for (auto _ : state) stats.add(cucore::cache_tier::local, cucore::cache_event::hit);
}
BENCHMARK(BM_StatisticsAdd);

// The first event of a process: find the statistics directory, open and map its shard (which
// exists), add; then unmap. Once per process and cache, not per hit.
void BM_StatisticsFirstEvent(benchmark::State& state) {
  const fs::path dir = scratch() / "stats-first";
  cucore::cache_statistics(dir).add(cucore::cache_tier::local, cucore::cache_event::hit);
  for (auto _ : state) {
    cucore::cache_statistics stats(dir);
    stats.add(cucore::cache_tier::local, cucore::cache_event::hit);
  }
}
BENCHMARK(BM_StatisticsFirstEvent);

void BM_SqliteHitStatistics(benchmark::State& state) {
  const bool on = state.range(0) != 0;
  const fs::path file = scratch() / (on ? "stats-on.db" : "stats-off.db");
  cucore::sqlite_cache_options o;
  o.statistics = on;
  cucore::sqlite_program_cache cache(file, o);
  time_hits(state, cache, 4096);
  state.SetLabel(on ? "statistics on" : "statistics off");
}
BENCHMARK(BM_SqliteHitStatistics)->Arg(0)->Arg(1)->Arg(0)->Arg(1);

// The floor: one prepared SELECT of a blob by key in a WAL database, copied out.
void BM_SqliteSelectFloor(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const std::string file = (scratch() / ("raw-" + std::to_string(size) + ".db")).string();
  sqlite3* db = nullptr;
  sqlite3_open(file.c_str(), &db);
  sqlite3_exec(db,
               "PRAGMA journal_mode=WAL; CREATE TABLE t(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID;",
               nullptr, nullptr, nullptr);
  const auto ks = keys(64);
  sqlite3_stmt* insert = nullptr;
  sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?, ?)", -1, &insert, nullptr);
  const auto value = random_bytes(size, 5);
  for (const auto& k : ks) {
    sqlite3_bind_blob(insert, 1, k.data(), static_cast<int>(k.size()), SQLITE_STATIC);
    sqlite3_bind_blob(insert, 2, value.data(), static_cast<int>(value.size()), SQLITE_STATIC);
    sqlite3_step(insert);
    sqlite3_reset(insert);
  }
  sqlite3_finalize(insert);
  sqlite3_stmt* select = nullptr;
  sqlite3_prepare_v2(db, "SELECT v FROM t WHERE k = ?", -1, &select, nullptr);
  std::size_t i = 0;
  for (auto _ : state) {
    const auto& k = ks[i++ & 63];
    sqlite3_bind_blob(select, 1, k.data(), static_cast<int>(k.size()), SQLITE_STATIC);
    if (sqlite3_step(select) == SQLITE_ROW) {
      const auto* p = static_cast<const std::byte*>(sqlite3_column_blob(select, 0));
      std::vector<std::byte> out(p, p + sqlite3_column_bytes(select, 0));
      benchmark::DoNotOptimize(out);
    }
    sqlite3_reset(select);
  }
  sqlite3_finalize(select);
  sqlite3_close(db);
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_SqliteSelectFloor)->Arg(4 << 10)->Arg(256 << 10);

// ---- compile miss vs hit --------------------------------------------------------------------

constexpr const char* kSmallKernel = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

// Includes CCCL headers from the toolkit: the compile is large. Before include tracking the key
// needed an extra_digest; kept for comparison (BM_CompileCcclHit), beside the tracked path below.
constexpr const char* kCcclKernel = R"(
#include <cuda/std/array>
#include <cuda/std/functional>
#include <cub/block/block_reduce.cuh>
extern "C" __global__ void block_sum(const int* in, int* out) {
  using reduce = cub::BlockReduce<int, 128>;
  __shared__ typename reduce::TempStorage storage;
  int v = reduce(storage).Sum(in[threadIdx.x]);
  if (threadIdx.x == 0) *out = v;
}
)";

cucore::program_options small_options() {
  cucore::program_options o;
  o.arch = "sm_90";
  return o;
}

cucore::program_options cccl_options() {
  cucore::program_options o = small_options();
  o.std = "c++17";
  // The toolkit's own (/usr/local/cuda/include/cccl and include/ on a default machine), so that a
  // run against another root (CUCORE_CUDA_HOME: the NVRTC version matrix) takes its headers.
  o.include_path = cucore::toolkit::include_directories();
  return o;
}

void BM_CompileSmallCold(benchmark::State& state) {
  cucore::program p(kSmallKernel, cucore::source_type::cxx, small_options());
  p.compile(cucore::code_type::cubin);  // load NVRTC outside the timing
  for (auto _ : state) benchmark::DoNotOptimize(p.compile(cucore::code_type::cubin));
}
BENCHMARK(BM_CompileSmallCold)->Unit(benchmark::kMillisecond);

void BM_CompileSmallHit(benchmark::State& state) {
  cucore::file_stream_program_cache cache(scratch() / "compile-small");
  cucore::program p(kSmallKernel, cucore::source_type::cxx, small_options());
  p.compile(cucore::code_type::cubin, {}, &cache);
  for (auto _ : state) benchmark::DoNotOptimize(p.compile(cucore::code_type::cubin, {}, &cache));
}
BENCHMARK(BM_CompileSmallHit)->Unit(benchmark::kMicrosecond);

void BM_CompileCcclCold(benchmark::State& state) {
  cucore::program p(kCcclKernel, cucore::source_type::cxx, cccl_options());
  for (auto _ : state) benchmark::DoNotOptimize(p.compile(cucore::code_type::cubin));
}
BENCHMARK(BM_CompileCcclCold)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_CompileCcclHit(benchmark::State& state) {
  cucore::file_stream_program_cache cache(scratch() / "compile-cccl");
  cucore::program_cache_key_inputs in;
  in.code = kCcclKernel;
  in.options = cccl_options();
  in.target = cucore::code_type::cubin;
  in.extra_digest = "fingerprint of the CCCL headers of this toolkit";
  const auto key = cucore::make_program_cache_key(in);
  cache.put(key, cucore::program(kCcclKernel, cucore::source_type::cxx, cccl_options())
                     .compile(cucore::code_type::cubin));
  for (auto _ : state) {
    // What a caller with an extra_digest does per lookup: derive the key, then get.
    benchmark::DoNotOptimize(cache.get(cucore::make_program_cache_key(in)));
  }
}
BENCHMARK(BM_CompileCcclHit)->Unit(benchmark::kMicrosecond);

// ---- a CUB kernel with a header of its own: include tracking -----------------------------------

// The issue's kernel: a CUB block reduction that includes "tuning.cuh" beside it, with no flags
// (the toolkit's include directories are searched by default).
constexpr const char* kCubKernel = R"(
#include "tuning.cuh"
#include <cub/block/block_reduce.cuh>
extern "C" __global__ void block_sum(const int* in, int* out) {
  using reduce = cub::BlockReduce<int, BLOCK>;
  __shared__ typename reduce::TempStorage storage;
  int v = reduce(storage).Sum(in[threadIdx.x]);
  if (threadIdx.x == 0) *out = v;
}
)";

// The kernel's directory, its header written once and left to settle: headers changed within the
// last 2 s are re-hashed on every key (include_tracking.hpp), which is not the steady state.
const fs::path& cub_dir() {
  static const fs::path dir = [] {
    fs::path d = scratch() / "cub-kernel";
    fs::create_directories(d);
    std::ofstream(d / "tuning.cuh") << "#pragma once\n#define BLOCK 128\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));
    return d;
  }();
  return dir;
}

cucore::program cub_program() {
  cucore::program_options o = small_options();
  o.name = (cub_dir() / "block_sum.cu").string();
  return cucore::program(kCubKernel, cucore::source_type::cxx, o);
}

void BM_CubCold(benchmark::State& state) {
  auto p = cub_program();
  for (auto _ : state) benchmark::DoNotOptimize(p.compile(cucore::code_type::cubin));
}
BENCHMARK(BM_CubCold)->Unit(benchmark::kMillisecond)->Iterations(3);

// program::compile through an in-memory cache: key (include closure by stats) + lookup.
void BM_CubHitInMemory(benchmark::State& state) {
  cucore::in_memory_program_cache cache;
  auto p = cub_program();
  p.compile(cucore::code_type::cubin, {}, &cache);
  for (auto _ : state) benchmark::DoNotOptimize(p.compile(cucore::code_type::cubin, {}, &cache));
  if (p.last_cache_outcome() != cucore::cache_outcome::hit) state.SkipWithError("not a hit");
}
BENCHMARK(BM_CubHitInMemory)->Unit(benchmark::kMicrosecond);

void BM_CubHitDirectory(benchmark::State& state) {
  cucore::file_stream_program_cache cache(scratch() / "cub-cache");
  auto p = cub_program();
  p.compile(cucore::code_type::cubin, {}, &cache);
  for (auto _ : state) benchmark::DoNotOptimize(p.compile(cucore::code_type::cubin, {}, &cache));
  if (p.last_cache_outcome() != cucore::cache_outcome::hit) state.SkipWithError("not a hit");
}
BENCHMARK(BM_CubHitDirectory)->Unit(benchmark::kMicrosecond);

cucore::program_cache_key_inputs cub_inputs(const std::string& code, cucore::program_options o) {
  cucore::program_cache_key_inputs in;
  in.code = code;
  in.options = std::move(o);
  in.target = cucore::code_type::cubin;
  return in;
}

// The key alone (warm digest memo: one lstat per header and per absent candidate) ...
void BM_CubKey(benchmark::State& state) {
  const auto p = cub_program();
  const auto in = cub_inputs(p.code(), p.options());
  const auto first = cucore::make_program_cache_key(in);
  for (auto _ : state) benchmark::DoNotOptimize(cucore::make_program_cache_key(in));
  state.counters["headers"] = static_cast<double>(first.includes().files);
  state.counters["absent"] = static_cast<double>(first.includes().absent);
}
BENCHMARK(BM_CubKey)->Unit(benchmark::kMicrosecond);

// ... against the SHA-256 of every byte it covers (the source and each header file), read from
// memory: what hashing the inputs would cost without the memo, with no I/O at all.
void BM_CubSha256OfBytesRead(benchmark::State& state) {
  const auto p = cub_program();
  const auto key = cucore::make_program_cache_key(cub_inputs(p.code(), p.options()));
  std::string all = p.code();
  for (const auto& f : key.explain()) {
    if (f.label != "header") continue;
    std::ifstream in(f.payload.substr(0, f.payload.rfind(" (")), std::ios::binary);
    all.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  unsigned char digest[32];
  unsigned int len = 0;
  for (auto _ : state) {
    EVP_Digest(all.data(), all.size(), digest, &len, EVP_sha256(), nullptr);
    benchmark::DoNotOptimize(digest);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(all.size()));
}
BENCHMARK(BM_CubSha256OfBytesRead)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
