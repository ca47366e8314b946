// Program cache benchmarks for writes and for scale, each beside its floor or its small-cache
// counterpart measured in the same run:
//   directory put                 vs write + rename of the same bytes (with and without fsync)
//   hit, miss, put, trim, stats   at 1k and at 100k entries of 4 KiB, directory and SQLite,
//                                 through the API with random keys
//   SQLite hit                    vs the same number of random page reads from its file
//   SQLite access times           the write-back per recorded hit, and the one read that starts
//                                 a write-back with 2000 pending (bounded to a batch)
// The 100k-entry caches are built once per process (with fsync off for the directory: the layout
// is the same; the SQLite file checkpointed, its WAL empty) and take a while: filter with
// --benchmark_filter to measure one backend.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/object_code.hpp"
#include "scratch_directory.hpp"

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kEntryBytes = 4 << 10;

std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

// A key of 32 random bytes.
std::string random_key(std::mt19937_64& rng) {
  std::string k(32, '\0');
  for (auto& c : k) c = static_cast<char>(rng());
  return k;
}

const fs::path& scratch() {
  static const cucore::bench::scratch_directory dir("cucore-scale-bench-");
  return dir.path();
}

// ---- directory put against write + rename ------------------------------------------------

// Puts of new keys (each a new file, as a compile miss writes).
void BM_DirectoryPut(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const bool sync = state.range(1) != 0;
  const fs::path root =
      scratch() / ("put-" + std::to_string(size) + (sync ? "-fsync" : "-nofsync"));
  cucore::file_stream_cache_options o;
  o.fsync = sync;
  cucore::file_stream_program_cache cache(root, o);
  const cucore::object_code code(cucore::code_type::cubin, random_bytes(size, 1));
  std::mt19937_64 rng(11);
  for (auto _ : state) cache.put(random_key(rng), code);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * size));
}
BENCHMARK(BM_DirectoryPut)
    ->ArgsProduct({{4 << 10, 256 << 10}, {0, 1}})
    ->ArgNames({"bytes", "fsync"})
    ->Unit(benchmark::kMicrosecond);

// The floor: the same bytes written to a new temp file (O_EXCL), fdatasync'ed (with fsync), renamed
// into one of 256 shard directories, and that directory fsync'ed (with fsync): what an atomic,
// durable file write costs on this file system, without the entry format or its checksum.
void BM_WriteRenameFloor(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const bool sync = state.range(1) != 0;
  const fs::path root =
      scratch() / ("raw-put-" + std::to_string(size) + (sync ? "-fsync" : "-nofsync"));
  fs::create_directories(root / "tmp");
  std::vector<int> shard_fds;
  for (int i = 0; i < 256; ++i) {
    const fs::path shard = root / "entries" / std::to_string(i);
    fs::create_directories(shard);
    shard_fds.push_back(::open(shard.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  const auto bytes = random_bytes(size, 1);
  const std::string tmp = (root / "tmp" / "staging").string();
  std::uint64_t n = 0;
  for (auto _ : state) {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    std::size_t done = 0;
    while (done < size) {
      const auto w = ::write(fd, bytes.data() + done, size - done);
      if (w <= 0) state.SkipWithError("write failed");
      if (w <= 0) break;
      done += static_cast<std::size_t>(w);
    }
    if (sync) ::fdatasync(fd);
    ::close(fd);
    const int shard = static_cast<int>(n % 256);
    const std::string name = std::to_string(n++);
    ::renameat(AT_FDCWD, tmp.c_str(), shard_fds[static_cast<std::size_t>(shard)], name.c_str());
    if (sync) ::fsync(shard_fds[static_cast<std::size_t>(shard)]);
  }
  for (int fd : shard_fds) ::close(fd);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * size));
}
BENCHMARK(BM_WriteRenameFloor)
    ->ArgsProduct({{4 << 10, 256 << 10}, {0, 1}})
    ->ArgNames({"bytes", "fsync"})
    ->Unit(benchmark::kMicrosecond);

// ---- scale: 1k and 100k entries ---------------------------------------------------------------

// sqlite_mmap: the SQLite file of `sqlite`, opened a second time with mmap_size_bytes = 1 GiB.
enum backend : int { directory = 0, sqlite = 1, sqlite_mmap = 2 };

struct populated_cache {
  std::unique_ptr<cucore::program_cache> cache;
  std::vector<std::string> keys;  // stored
  fs::path where;
};

std::unique_ptr<cucore::program_cache> open_cache(backend b, const fs::path& where, bool fsync) {
  if (b == directory) {
    cucore::file_stream_cache_options o;
    o.fsync = fsync;
    return std::make_unique<cucore::file_stream_program_cache>(where, o);
  }
  // Hits record access times in memory; writing them back (every touch_flush_interval, 1 s by
  // default, and with every write) is measured on its own (BM_ScaleAccessTimeWriteBack), so the
  // hit rows measure reads however long a run lasts.
  cucore::sqlite_cache_options o;
  o.touch_flush_interval = std::chrono::hours(1);
  if (b == sqlite_mmap) o.mmap_size_bytes = 1 << 30;
  return std::make_unique<cucore::sqlite_program_cache>(where, o);
}

// Copies everything in the WAL into the database file and empties the WAL, so that no measured
// operation pays for the build's checkpoint. (Closing the last connection does this too; this
// makes sure of it, and fails loudly when it cannot.)
void checkpoint(const fs::path& db) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(db.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr);
  const bool ok = rc == SQLITE_OK && sqlite3_exec(raw, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr,
                                                  nullptr, nullptr) == SQLITE_OK;
  sqlite3_close_v2(raw);
  std::error_code ec;
  const auto wal = fs::file_size(db.string() + "-wal", ec);  // gone, or truncated to 0
  if (!ok || (!ec && wal > 0)) std::abort();
}

// The cache of `entries` entries of 4 KiB for backend `b`, built on first use.
populated_cache& cache_with(backend b, std::size_t entries) {
  static std::map<std::pair<int, std::size_t>, populated_cache> built;
  auto [it, fresh] = built.try_emplace({b, entries});
  populated_cache& p = it->second;
  if (!fresh) return p;
  if (b == sqlite_mmap) {
    const populated_cache& file = cache_with(sqlite, entries);
    p.keys = file.keys;
    p.where = file.where;
    p.cache = open_cache(b, p.where, true);
    return p;
  }
  p.where = scratch() / ((b == directory ? "dir-" : "db-") + std::to_string(entries) +
                         (b == directory ? "" : ".db"));
  {
    // Built without fsync (the same files result), then reopened with the defaults.
    auto builder = open_cache(b, p.where, false);
    std::mt19937_64 rng(entries);
    for (std::size_t i = 0; i < entries; ++i) {
      p.keys.push_back(random_key(rng));
      builder->put(p.keys.back(),
                   cucore::object_code(cucore::code_type::cubin, random_bytes(kEntryBytes, i)));
    }
  }
  if (b == sqlite) checkpoint(p.where);
  p.cache = open_cache(b, p.where, true);
  return p;
}

backend backend_of(const benchmark::State& state) {
  return static_cast<backend>(state.range(0));
}
std::size_t entries_of(const benchmark::State& state) {
  return static_cast<std::size_t>(state.range(1));
}

void BM_ScaleHit(benchmark::State& state) {
  auto& p = cache_with(backend_of(state), entries_of(state));
  std::mt19937_64 rng(3);
  for (auto _ : state) {
    auto got = p.cache->get(p.keys[rng() % p.keys.size()]);
    if (!got) state.SkipWithError("a stored entry missed");
    benchmark::DoNotOptimize(got);
  }
}

// The floor under a SQLite hit at each size: `pages` random 4 KiB pread()s from the same SQLite
// file (which the system holds in memory), as a hit reads at 100k entries the `entries` leaf, the
// `blobs` leaf and the value's overflow page; no SQLite, no decoding. What a page read costs grows
// with the file (5 MB fits this CPU's last-level cache, 470 MB does not), whatever reads it.
void BM_ScalePreadFloor(benchmark::State& state) {
  auto& p = cache_with(sqlite, entries_of(state));
  const auto pages = static_cast<std::size_t>(state.range(2));
  const int fd = ::open(p.where.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size < 4096) {
    state.SkipWithError("cannot open the SQLite file");
    if (fd >= 0) ::close(fd);
    return;
  }
  const auto count = static_cast<std::uint64_t>(st.st_size / 4096);
  std::vector<std::byte> buffer(4096 * pages);
  std::mt19937_64 rng(3);
  for (auto _ : state) {
    for (std::size_t i = 0; i < pages; ++i) {
      const auto offset = static_cast<off_t>((rng() % count) * 4096);
      if (::pread(fd, buffer.data() + 4096 * i, 4096, offset) != 4096)
        state.SkipWithError("short read");
    }
    benchmark::DoNotOptimize(buffer.data());
  }
  ::close(fd);
}

void BM_ScaleMiss(benchmark::State& state) {
  auto& p = cache_with(backend_of(state), entries_of(state));
  std::mt19937_64 rng(5);
  std::vector<std::string> absent;
  for (int i = 0; i < 1024; ++i) absent.push_back(random_key(rng) + "-absent");
  std::size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(p.cache->get(absent[i++ & 1023]));
}

// New keys with the defaults (fsync on for the directory); the cache grows by the iterations.
// SQLite writes the access times that earlier hits recorded with the next write: one untimed put
// first, so that the timed ones are steady puts (see BM_ScaleAccessTimeWriteBack).
void BM_ScalePut(benchmark::State& state) {
  auto& p = cache_with(backend_of(state), entries_of(state));
  const cucore::object_code code(cucore::code_type::cubin, random_bytes(kEntryBytes, 7));
  std::mt19937_64 rng(7 + entries_of(state));
  p.cache->put(random_key(rng) + "-put", code);
  for (auto _ : state) p.cache->put(random_key(rng) + "-put", code);
}

// trim() with nothing to evict: the cost of finding out (the directory scans every file).
void BM_ScaleTrimNothing(benchmark::State& state) {
  auto& p = cache_with(backend_of(state), entries_of(state));
  for (auto _ : state) benchmark::DoNotOptimize(p.cache->trim(std::uint64_t(1) << 62));
}

// trim() evicting 16 entries (put back, untimed, after each).
void BM_ScaleTrim16(benchmark::State& state) {
  auto& p = cache_with(backend_of(state), entries_of(state));
  const cucore::object_code code(cucore::code_type::cubin, random_bytes(kEntryBytes, 9));
  std::mt19937_64 rng(9 + entries_of(state));
  const std::uint64_t total = p.cache->size_bytes();
  const std::uint64_t entry = total / p.cache->size();
  for (auto _ : state) {
    const std::uint64_t now = p.cache->size_bytes();
    benchmark::DoNotOptimize(p.cache->trim(now - 16 * entry + entry / 2));
    state.PauseTiming();
    for (int i = 0; i < 16; ++i) p.cache->put(random_key(rng) + "-refill", code);
    state.ResumeTiming();
  }
}

// What `cucore cache stats` needs besides the counters: the entry count and the bytes.
void BM_ScaleStats(benchmark::State& state) {
  auto& p = cache_with(backend_of(state), entries_of(state));
  for (auto _ : state) {
    benchmark::DoNotOptimize(p.cache->size());
    benchmark::DoNotOptimize(p.cache->size_bytes());
  }
}

void scale_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"sqlite", "entries"});
  for (int backend : {directory, sqlite}) {
    for (int entries : {1000, 100000}) b->Args({backend, entries});
  }
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_ScaleHit)->Apply(scale_args);
BENCHMARK(BM_ScaleHit)
    ->Name("BM_ScaleHitMmap")
    ->ArgNames({"sqlite", "entries"})
    ->Args({sqlite_mmap, 1000})
    ->Args({sqlite_mmap, 100000})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ScalePreadFloor)
    ->ArgNames({"sqlite", "entries", "pages"})
    ->ArgsProduct({{sqlite}, {1000, 100000}, {2, 3}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ScaleMiss)->Apply(scale_args);
BENCHMARK(BM_ScalePut)->Apply(scale_args);
BENCHMARK(BM_ScaleTrimNothing)->Apply(scale_args);
BENCHMARK(BM_ScaleTrim16)->Apply(scale_args);
BENCHMARK(BM_ScaleStats)->Apply(scale_args);

// SQLite: what a hit's access time costs when it is written back. A hit on an entry not read in
// the last minute records its access time in memory; the next write (or a read a second after the
// last write-back) writes them all in one transaction. Per iteration: 256 hits on entries not
// read before (untimed), then one erase of an absent key (timed), which writes their 256 access
// times. The time per hit is the per-iteration time / 256. Registered last (it leaves the entries
// it read recently read, which then record nothing), only at 100k entries, 100 iterations a run:
// three repetitions use 77k entries, each read here for the first time.
void BM_ScaleAccessTimeWriteBack(benchmark::State& state) {
  auto& p = cache_with(sqlite, entries_of(state));
  std::vector<std::size_t> order(p.keys.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(13));
  constexpr std::size_t kBatch = 256;
  p.cache->erase("absent");     // writes back what earlier benchmarks recorded
  static std::size_t next = 0;  // across repetitions
  for (auto _ : state) {
    state.PauseTiming();
    if (next + kBatch > order.size()) {
      state.SkipWithError("ran out of entries not read before");
      break;
    }
    for (std::size_t i = 0; i < kBatch; ++i)
      benchmark::DoNotOptimize(p.cache->get(p.keys[order[next++]]));
    state.ResumeTiming();
    p.cache->erase("absent");
  }
}
BENCHMARK(BM_ScaleAccessTimeWriteBack)
    ->ArgNames({"sqlite", "entries"})
    ->Args({sqlite, 100000})
    ->Iterations(100)
    ->Unit(benchmark::kMicrosecond);

// SQLite: the one read that starts a write-back of access times (touch_flush_interval passed)
// while many are pending, as under random reads over many entries. Per iteration (untimed):
// 2000 hits on entries not read before, each recording its access time, then a wait past the
// interval (100 ms); timed: the next hit, on another such entry, which writes the pending times
// back before it returns: all of them, or (bounded) at most a batch. 100k entries, 20 iterations,
// one repetition; run it on its own (a fresh cache: entries that other benchmarks read within the
// minute record nothing).
void BM_ScaleReadStartingWriteBack(benchmark::State& state) {
  auto& p = cache_with(sqlite, entries_of(state));
  cucore::sqlite_cache_options o;
  o.touch_flush_interval = std::chrono::milliseconds(100);
  cucore::sqlite_program_cache reader(p.where, o);
  std::vector<std::size_t> order(p.keys.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(17));
  constexpr std::size_t kPending = 2000;
  std::size_t next = 0;
  for (auto _ : state) {
    state.PauseTiming();
    if (next + kPending + 1 > order.size()) {
      state.SkipWithError("ran out of entries not read before");
      break;
    }
    for (std::size_t i = 0; i < kPending; ++i)
      benchmark::DoNotOptimize(reader.get(p.keys[order[next++]]));
    std::this_thread::sleep_for(std::chrono::milliseconds(110));
    state.ResumeTiming();
    benchmark::DoNotOptimize(reader.get(p.keys[order[next++]]));
  }
}
BENCHMARK(BM_ScaleReadStartingWriteBack)
    ->ArgNames({"sqlite", "entries"})
    ->Args({sqlite, 100000})
    ->Iterations(20)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
