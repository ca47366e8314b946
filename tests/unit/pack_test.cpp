// Cache packs (cucore/cache/pack.hpp, docs/cache-packs.md): real compiles exported and imported
// through every backend, damaged and foreign packs refused with nothing added, streaming, and a
// pack as a read-only cache.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>

#include "cache_test_support.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/pack.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/program.hpp"
#include "redis_test_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::log_capture;
using testing::redis_server;
using testing::temp_dir;

object_code sample(std::size_t n, std::uint64_t seed, std::string name = "sample.cu") {
  std::vector<std::byte> bytes(n);
  std::mt19937_64 random(seed);
  for (auto& b : bytes) b = static_cast<std::byte>(random() & 0xff);
  return object_code(code_type::cubin, std::move(bytes), std::move(name),
                     symbol_map{{"k<int>", "_Z1kIiEvv"}});
}

std::vector<std::byte> key_bytes(std::string_view key) {
  const auto b = std::as_bytes(std::span<const char>(key.data(), key.size()));
  return {b.begin(), b.end()};
}

file_stream_program_cache directory_cache(const fs::path& root) {
  file_stream_cache_options o;
  o.fsync = false;
  return file_stream_program_cache(root, o);
}

// Flips one byte of `file` at `offset`.
void flip(const fs::path& file, std::uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  const char c = static_cast<char>(f.get());
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x40));
}

// ---------------------------------------------------------------------------------------------
// Real kernels: saxpy, CUB and CuTe, through every backend

constexpr const char* kSaxpy = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
})";

constexpr const char* kCub = R"(#include <cub/block/block_reduce.cuh>
extern "C" __global__ void block_sum(const int* in, int* out) {
  using reduce = cub::BlockReduce<int, 128>;
  __shared__ typename reduce::TempStorage temp;
  int total = reduce(temp).Sum(in[threadIdx.x]);
  if (threadIdx.x == 0) *out = total;
})";

struct kernel {
  std::string source;
  program_options options;
};

std::vector<kernel> kernels() {
  std::vector<kernel> out;
  program_options saxpy;
  saxpy.arch = testing::kArch;
  saxpy.name = "saxpy.cu";
  out.push_back({kSaxpy, saxpy});
  program_options cub = saxpy;
  cub.name = "cub_sum.cu";
  cub.std = "c++17";
  out.push_back({kCub, cub});
  // CuTe from the header corpus (scripts/fetch-corpus.sh), where it was fetched.
  const fs::path cutlass = fs::path(CUCORE_SOURCE_DIR) / ".cache/corpus/cutlass/include";
  if (fs::exists(cutlass / "cute/tensor.hpp")) {
    program_options cute = saxpy;
    cute.name = "cute_tiled_copy.cu";
    cute.std = "c++17";
    cute.include_path = {cutlass.string()};
    cute.device_as_default_execution_space = true;
    out.push_back(
        {testing::read_text(fs::path(CUCORE_SOURCE_DIR) / "tests/data/corpus/cute_tiled_copy.cu"),
         cute});
  }
  return out;
}

// Each kernel compiled through `cache` again: a hit, with `expected`'s bytes.
void expect_hits(program_cache& cache, const std::vector<kernel>& ks,
                 const std::vector<object_code>& expected) {
  for (std::size_t i = 0; i < ks.size(); ++i) {
    program p(ks[i].source, source_type::cxx, ks[i].options);
    const object_code hit = p.compile(code_type::cubin, {}, &cache);
    EXPECT_EQ(p.last_cache_outcome(), cache_outcome::hit)
        << ks[i].options.name << " through " << cache.description();
    EXPECT_EQ(hit, expected[i]) << ks[i].options.name << " through " << cache.description();
    EXPECT_TRUE(std::ranges::equal(hit.code(), expected[i].code()));
  }
}

TEST(Pack, RealKernelsImportIntoEveryBackendAndHitWithTheSameBytes) {
  temp_dir dir;
  const std::vector<kernel> ks = kernels();
  if (ks.size() < 3) std::cerr << "note: no CuTe corpus (scripts/fetch-corpus.sh): CuTe skipped\n";
  std::vector<object_code> compiled;
  std::vector<std::string> keys;
  {
    auto source = directory_cache(dir.path() / "source");
    for (const kernel& k : ks) {
      program p(k.source, source_type::cxx, k.options);
      compiled.push_back(p.compile(code_type::cubin, {}, &source));
      ASSERT_EQ(p.last_cache_outcome(), cache_outcome::miss);
      keys.push_back(std::string(p.last_cache_key()->bytes().size(), '\0'));
      std::memcpy(keys.back().data(), p.last_cache_key()->bytes().data(), keys.back().size());
    }
    const pack_export_result r = export_pack(source, dir.path() / "kernels.cupack");
    EXPECT_EQ(r.entries, ks.size());
    EXPECT_EQ(r.skipped, 0u);
    // The notes of the source cache's statistics name the compiler of each.
    EXPECT_EQ(r.with_compiler_identity, ks.size());
  }
  const fs::path pack = dir.path() / "kernels.cupack";

  {
    auto into = directory_cache(dir.path() / "dir");
    const pack_import_result r = import_pack(into, pack);
    EXPECT_EQ(r.added, ks.size());
    EXPECT_EQ(r.already_present, 0u);
    expect_hits(into, ks, compiled);
  }
  {
    sqlite_program_cache into(dir.path() / "k.db");
    EXPECT_EQ(import_pack(into, pack).added, ks.size());
    expect_hits(into, ks, compiled);
  }
  {
    in_memory_program_cache into;
    EXPECT_EQ(import_pack(into, pack).added, ks.size());
    expect_hits(into, ks, compiled);
  }
  {
    pack_program_cache tier(pack);
    expect_hits(tier, ks, compiled);
    const std::string identity = tier.compiler_identity(keys[0]).value_or("");
    EXPECT_TRUE(identity.starts_with("schema\tcucore-key-2\nnvrtc\t")) << identity;
    EXPECT_FALSE(tier.compiler_identity("absent"));
  }
  redis_server server;
  if (!server.installed()) GTEST_SKIP() << "redis-server is not installed: Redis not tried";
  ASSERT_TRUE(server.running()) << server.log();
  redis_cache_options o;
  o.url = server.url();
  o.command_timeout = std::chrono::seconds(10);
  {
    redis_program_cache into(o);
    EXPECT_EQ(import_pack(into, pack).added, ks.size());
    expect_hits(into, ks, compiled);
  }
  {
    // Tiered: a fresh directory in front of the Redis server that already holds them all.
    tiered_cache_options t;
    t.write_behind = false;
    tiered_program_cache into(std::make_unique<file_stream_program_cache>(dir.path() / "local"),
                              std::make_unique<redis_program_cache>(o), t);
    const pack_import_result r = import_pack(into, pack);
    EXPECT_EQ(r.added, 0u);
    EXPECT_EQ(r.already_present, ks.size());
    expect_hits(into, ks, compiled);
    // And out of it again: the local tier lists what the reads brought in.
    const pack_export_result again = export_pack(into, dir.path() / "again.cupack");
    EXPECT_EQ(again.entries, ks.size());
  }
}

// ---------------------------------------------------------------------------------------------
// Synthetic entries

// A pack of `n` entries "k0".."k{n-1}" from an in-memory cache.
fs::path make_pack(const fs::path& dir, std::size_t n, std::size_t bytes = 3000) {
  in_memory_program_cache source;
  for (std::size_t i = 0; i < n; ++i) {
    source.put("k" + std::to_string(i), sample(bytes, i, "prog" + std::to_string(i) + ".cu"));
  }
  const fs::path pack = dir / "p.cupack";
  EXPECT_EQ(export_pack(source, pack).entries, n);
  return pack;
}

// Imports a damaged pack: refused with a pack_error whose message holds `expected`; nothing added.
void expect_refused(const fs::path& pack, std::string_view expected) {
  in_memory_program_cache into;
  try {
    import_pack(into, pack);
    ADD_FAILURE() << "imported a damaged pack; expected: " << expected;
  } catch (const pack_error& e) {
    EXPECT_TRUE(contains(e.what(), expected)) << e.what();
    EXPECT_TRUE(contains(e.what(), pack.string())) << e.what();
  }
  EXPECT_EQ(into.size(), 0u);
  EXPECT_THROW(verify_pack(pack), pack_error);
}

TEST(Pack, ADamagedRecordIsRefusedNamingItAndNothingIsAdded) {
  temp_dir dir;
  const fs::path pack = make_pack(dir.path(), 5);
  pack_program_cache reader(pack);
  const auto rows = reader.list();  // in file order: key order
  ASSERT_EQ(rows.size(), 5u);
  verify_pack(pack);  // sound before the damage
  // Records follow the header back to back: the first starts with the zstd frame magic.
  const std::size_t first = testing::read_text(pack).find("\x28\xb5\x2f\xfd");
  ASSERT_NE(first, std::string::npos);
  std::uint64_t third = first;
  for (std::size_t i = 0; i < 3; ++i) third += rows[i].stored_bytes;
  flip(pack, third + rows[3].stored_bytes / 2);
  expect_refused(pack, "record 3 at byte " + std::to_string(third) + ": damaged");
  // As a tier: that record is a miss, logged; the others still hit. verify names it.
  log_capture logs;
  pack_program_cache tier(pack);
  const std::string damaged_key(reinterpret_cast<const char*>(rows[3].key.data()),
                                rows[3].key.size());
  EXPECT_FALSE(tier.get(damaged_key));
  EXPECT_FALSE(tier.get(damaged_key));
  EXPECT_EQ(logs.warnings("record 3"), 1u);
  EXPECT_EQ(tier.stats().errors, 2u);
  EXPECT_TRUE(tier.get("k0"));
  const cache_verify_report report = tier.verify(true);
  EXPECT_EQ(report.entries, 5u);
  EXPECT_EQ(report.corrupt, 1u);
  EXPECT_EQ(report.removed, 0u);
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_TRUE(contains(report.notes[0], "record 3")) << report.notes[0];
}

TEST(Pack, TruncatedForeignAndOtherVersionPacksAreRefused) {
  temp_dir dir;
  const fs::path pack = make_pack(dir.path(), 3);
  const std::string whole = testing::read_text(pack);
  const auto write = [&](const std::string& bytes) {
    std::ofstream(pack, std::ios::binary | std::ios::trunc) << bytes;
  };
  write(whole.substr(0, whole.size() - 10));
  expect_refused(pack, "truncated");
  write(whole.substr(0, whole.size() / 2));
  expect_refused(pack, "truncated");
  write("");
  expect_refused(pack, "not a cucore cache pack");
  write("PK\x03\x04 a zip file, say" + whole.substr(20));
  expect_refused(pack, "not a cucore cache pack");
  std::string other = whole;
  other[8] = 2;  // the header's format version
  write(other);
  expect_refused(pack, "format version 2, but this cucore reads version 1");
  other = whole;
  other[whole.size() - 41] ^= 1;  // the index's last byte
  write(other);
  expect_refused(pack, "damaged index");
  other = whole;
  other[17] ^= 1;  // the creation time: covered by the header's digest
  write(other);
  expect_refused(pack, "damaged header");
  EXPECT_THROW(pack_program_cache{pack}, pack_error);
  EXPECT_THROW(pack_program_cache{dir.path() / "absent.cupack"}, pack_error);
}

TEST(Pack, ImportNeverReplacesAnEntryThatIsThere) {
  temp_dir dir;
  const fs::path pack = make_pack(dir.path(), 4);
  in_memory_program_cache into;
  const object_code mine = sample(10, 99, "mine.cu");
  into.put("k2", mine);
  const pack_import_result r = import_pack(into, pack);
  EXPECT_EQ(r.entries, 4u);
  EXPECT_EQ(r.added, 3u);
  EXPECT_EQ(r.already_present, 1u);
  EXPECT_EQ(r.bytes_added, 3u * 3000);
  EXPECT_EQ(*into.get("k2"), mine);
  EXPECT_EQ(*into.get("k1"), sample(3000, 1, "prog1.cu"));
  const pack_import_result again = import_pack(into, pack);
  EXPECT_EQ(again.added, 0u);
  EXPECT_EQ(again.already_present, 4u);
}

TEST(Pack, SelectionsPickKeysRecentEntriesAndProgramNames) {
  temp_dir dir;
  auto source = directory_cache(dir.path() / "c");
  for (int i = 0; i < 4; ++i) {
    source.put("k" + std::to_string(i), sample(100, i, i < 2 ? "kernels/a.cu" : "other.cu"));
  }
  const fs::path pack = dir.path() / "s.cupack";
  pack_selection by_name;
  by_name.match = "kernels/*";
  EXPECT_EQ(export_pack(source, pack, by_name).entries, 2u);
  EXPECT_EQ(pack_program_cache(pack).size(), 2u);
  EXPECT_TRUE(pack_program_cache(pack).get("k1"));

  pack_selection keys;
  keys.keys = {key_bytes("k3"), key_bytes("k0"), key_bytes("k3")};
  EXPECT_EQ(export_pack(source, pack, keys).entries, 2u);

  pack_selection future;
  future.since = std::chrono::system_clock::now() + std::chrono::hours(1);
  EXPECT_EQ(export_pack(source, pack, future).entries, 0u);
  EXPECT_EQ(pack_program_cache(pack).size(), 0u);
  pack_selection past;
  past.since = std::chrono::system_clock::now() - std::chrono::hours(1);
  EXPECT_EQ(export_pack(source, pack, past).entries, 4u);

  // A key the cache lacks: an error naming it, and the pack already there is left whole.
  pack_selection missing;
  missing.keys = {key_bytes("k0"), key_bytes("nope")};
  try {
    export_pack(source, pack, missing);
    ADD_FAILURE() << "exported a missing key";
  } catch (const invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "no entry 6e6f7065")) << e.what();
  }
  EXPECT_EQ(pack_program_cache(pack).size(), 4u);
  for (const auto& f : fs::directory_iterator(dir.path())) {
    EXPECT_FALSE(contains(f.path().filename().string(), ".tmp-")) << f.path();
  }
}

// A cache that fails after `ok` reads: an export that dies half way.
class failing_cache : public testing::forwarding_cache {
 public:
  failing_cache(program_cache& inner, int ok) : forwarding_cache(inner), ok_(ok) {}
  std::optional<object_code> get(cache_key_ref key) override {
    if (ok_-- <= 0) throw error("disk gone");
    return forwarding_cache::get(key);
  }

 private:
  int ok_;
};

TEST(Pack, AFailedExportLeavesNoPartialPack) {
  temp_dir dir;
  in_memory_program_cache inner;
  for (int i = 0; i < 5; ++i) inner.put("k" + std::to_string(i), sample(100, i));
  failing_cache source(inner, 2);
  EXPECT_THROW(export_pack(source, dir.path() / "p.cupack"), error);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// Counts the entries an export has read but not yet written: at most one at a time.
class counting_cache : public testing::forwarding_cache {
 public:
  using forwarding_cache::forwarding_cache;
  std::optional<object_code> get(cache_key_ref key) override {
    ++reads;
    max_ahead = std::max(max_ahead, reads - written);
    return forwarding_cache::get(key);
  }
  std::size_t reads = 0, written = 0, max_ahead = 0;
};

long peak_rss_kib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST(Pack, ExportAndImportStreamOneEntryAtATime) {
  temp_dir dir;
  // 40 incompressible entries of 4 MiB: 160 MiB, against a budget of 48 MiB of peak growth.
  constexpr std::size_t n = 40, bytes = std::size_t{4} << 20;
  {
    auto source = directory_cache(dir.path() / "source");
    for (std::size_t i = 0; i < n; ++i) source.put("k" + std::to_string(i), sample(bytes, i));
  }
  const long before = peak_rss_kib();
  {
    auto inner = directory_cache(dir.path() / "source");
    counting_cache source(inner);
    const auto r = export_pack(source, dir.path() / "big.cupack", {},
                               [&](const pack_progress& p) { source.written = p.done; });
    EXPECT_EQ(r.entries, n);
    EXPECT_EQ(source.max_ahead, 1u);
  }
  {
    auto into = directory_cache(dir.path() / "into");
    std::vector<pack_progress::stage> stages;
    const auto r = import_pack(into, dir.path() / "big.cupack", [&](const pack_progress& p) {
      if (stages.empty() || stages.back() != p.what) stages.push_back(p.what);
    });
    EXPECT_EQ(r.added, n);
    EXPECT_EQ(stages,
              (std::vector{pack_progress::stage::verifying, pack_progress::stage::importing}));
  }
  const long growth_mib = (peak_rss_kib() - before) / 1024;
  // 160 MiB went through; a sanitizer's own allocator and shadow add their share to the peak.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr long bound_mib = 96;
#else
  constexpr long bound_mib = 48;
#endif
  EXPECT_LT(growth_mib, bound_mib) << "the export or import held more than a few entries at once";
}

TEST(Pack, APackTierReadsListsAndVerifiesButIsReadOnly) {
  temp_dir dir;
  const fs::path pack = make_pack(dir.path(), 3);
  pack_program_cache tier(pack);
  EXPECT_EQ(tier.description(), "pack " + pack.string());
  EXPECT_EQ(tier.size(), 3u);
  EXPECT_EQ(tier.info().entries, 3u);
  EXPECT_EQ(tier.info().format_version, pack_format_version);
  EXPECT_EQ(tier.info().code_bytes, 9000u);
  EXPECT_FALSE(tier.info().cucore_version.empty());
  EXPECT_EQ(*tier.get("k1"), sample(3000, 1, "prog1.cu"));
  EXPECT_EQ(tier.get("k1")->symbol("k<int>"), "_Z1kIiEvv");
  EXPECT_FALSE(tier.get("absent"));
  EXPECT_EQ(tier.stats().hits, 2u);
  EXPECT_EQ(tier.stats().misses, 1u);
  const auto listed = tier.list();
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[2].name, "prog2.cu");
  EXPECT_EQ(listed[2].payload_bytes, 3000u);
  EXPECT_EQ(listed[2].symbol_count, 1u);
  const cache_verify_report report = tier.verify(true);
  EXPECT_EQ(report.ok, 3u);
  EXPECT_EQ(report.corrupt, 0u);
  for (const auto& attempt : std::vector<std::function<void()>>{
           [&] { tier.put("k9", sample(1, 1)); }, [&] { tier.erase("k1"); }, [&] { tier.clear(); },
           [&] { tier.trim(0); }}) {
    try {
      attempt();
      ADD_FAILURE() << "a pack tier was written";
    } catch (const invalid_argument& e) {
      EXPECT_TRUE(contains(e.what(), "read-only")) << e.what();
      EXPECT_TRUE(contains(e.what(), pack.string())) << e.what();
    }
  }
  EXPECT_EQ(tier.size(), 3u);
  // An empty pack is a pack.
  in_memory_program_cache empty;
  export_pack(empty, dir.path() / "empty.cupack");
  EXPECT_EQ(pack_program_cache(dir.path() / "empty.cupack").size(), 0u);
  EXPECT_EQ(import_pack(empty, dir.path() / "empty.cupack").entries, 0u);
}

}  // namespace
}  // namespace cucore
