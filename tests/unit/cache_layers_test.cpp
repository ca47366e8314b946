// Read-only layers (docs/cache-layers.md): a directory cache opened read-only is only read —
// nothing created, touched, removed or counted — and a tiered cache never writes a read-only tier.
// Real directories, a real bind mount made read-only in a private mount namespace.
#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>

#include "cache_workload.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/open.hpp"
#include "cucore/cache/pack.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using testing::temp_dir;
using testing::workload_key;
using testing::workload_value;

file_stream_cache_options read_only_options() {
  file_stream_cache_options o;
  o.read_only = true;
  return o;
}

// Every path under `root` with its size, mode, and modification and change times: what "never
// written" means for a directory. (Not the access time: the kernel records reads itself; the cache
// recording one with futimens changes the change time.)
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> out;
  if (!fs::exists(root)) return out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    struct stat st {};
    ::lstat(e.path().c_str(), &st);
    out[e.path().string()] = std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) +
                             "." + std::to_string(st.st_mtim.tv_nsec) + " " +
                             std::to_string(st.st_ctim.tv_sec) + "." +
                             std::to_string(st.st_ctim.tv_nsec) + " " + std::to_string(st.st_mode);
  }
  return out;
}

// A directory cache filled by a writer, then its files' access times moved back a day so that a
// read by a writable cache would record itself (reads within a second of the last are not).
fs::path filled(const temp_dir& dir, int entries) {
  const fs::path root = dir.path() / "layer";
  {
    file_stream_program_cache writer(root, file_stream_cache_options{.fsync = false});
    for (int i = 0; i < entries; ++i) writer.put(workload_key(i), workload_value(i, 1));
  }
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    struct timespec times[2] = {{std::time(nullptr) - 86400, 0}, {0, UTIME_OMIT}};
    ::utimensat(AT_FDCWD, e.path().c_str(), times, AT_SYMLINK_NOFOLLOW);
  }
  return root;
}

TEST(ReadOnlyLayer, ADirectoryIsReadAndNeverWritten) {
  temp_dir dir;
  const fs::path root = filled(dir, 4);
  const auto before = snapshot(root);
  file_stream_program_cache layer(root, read_only_options());
  EXPECT_TRUE(layer.read_only());
  EXPECT_NE(layer.description().find("read-only"), std::string::npos);
  for (int i = 0; i < 4; ++i) {
    const auto hit = layer.get(workload_key(i));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->code().size(), workload_value(i, 1).code().size());
  }
  EXPECT_FALSE(layer.get(workload_key(99)));
  EXPECT_EQ(layer.statistics(), nullptr);
  EXPECT_FALSE(layer.compiler_version_memo());
  EXPECT_EQ(layer.try_claim(workload_key(5), std::chrono::seconds(1)).status,
            claim_status::unsupported);
  EXPECT_THROW(layer.put(workload_key(5), workload_value(5, 1)), error);
  EXPECT_THROW(layer.erase(workload_key(0)), error);
  EXPECT_THROW(layer.clear(), error);
  EXPECT_THROW(layer.trim(1), error);
  EXPECT_EQ(layer.list().size(), 4u);
  EXPECT_EQ(snapshot(root), before) << "a read-only layer changed its directory";
}

TEST(ReadOnlyLayer, ADamagedEntryIsAMissLeftInPlace) {
  temp_dir dir;
  const fs::path root = filled(dir, 2);
  fs::path entry;
  for (const auto& e : fs::recursive_directory_iterator(root / "entries")) {
    if (e.is_regular_file()) entry = e.path();
  }
  ASSERT_FALSE(entry.empty());
  {
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  const auto before = snapshot(root);
  file_stream_program_cache layer(root, read_only_options());
  int hits = 0;
  for (int i = 0; i < 2; ++i) hits += layer.get(workload_key(i)) ? 1 : 0;
  EXPECT_EQ(hits, 1);
  const cache_verify_report report = layer.verify(/*remove_bad=*/true);
  EXPECT_EQ(report.removed, 0u);
  EXPECT_TRUE(fs::exists(entry));
  EXPECT_EQ(snapshot(root), before);
}

TEST(ReadOnlyLayer, AMissingDirectoryIsNotCreated) {
  temp_dir dir;
  file_stream_program_cache layer(dir.path() / "absent", read_only_options());
  EXPECT_FALSE(layer.get(workload_key(1)));
  EXPECT_FALSE(fs::exists(dir.path() / "absent"));
}

// A tiered cache reads a read-only tier, backfills what it finds into the writable one, and
// never puts into, erases from or claims in the read-only one.
TEST(ReadOnlyLayer, ATieredCacheNeverWritesItsReadOnlyTier) {
  temp_dir dir;
  const fs::path root = filled(dir, 3);
  const auto before = snapshot(root);
  auto local = std::make_unique<in_memory_program_cache>();
  in_memory_program_cache* local_view = local.get();
  tiered_program_cache cache(
      std::move(local), std::make_unique<file_stream_program_cache>(root, read_only_options()));
  EXPECT_FALSE(cache.read_only());
  ASSERT_TRUE(cache.get(workload_key(1)));
  EXPECT_TRUE(local_view->get(workload_key(1))) << "backfilled into the writable tier";
  cache.put(workload_key(7), workload_value(7, 1));
  cache.flush();
  EXPECT_TRUE(local_view->get(workload_key(7)));
  EXPECT_TRUE(cache.erase(workload_key(1)));
  EXPECT_TRUE(cache.get(workload_key(1))) << "erased from the writable tier only";
  EXPECT_EQ(cache.tier_stats().remote_errors, 0u);
  EXPECT_EQ(snapshot(root), before) << "the read-only tier changed";

  // Both tiers read-only: nothing is written anywhere, and the cache says so.
  tiered_program_cache both(std::make_unique<file_stream_program_cache>(root, read_only_options()),
                            std::make_unique<file_stream_program_cache>(root, read_only_options()));
  EXPECT_TRUE(both.read_only());
  both.put(workload_key(8), workload_value(8, 1));
  EXPECT_FALSE(both.get(workload_key(8)));
  EXPECT_EQ(snapshot(root), before);
}

// The spec's layers: LOCAL+LAYER+...+REMOTE, in the order written, the remote last.
TEST(ReadOnlyLayer, SpecsNameLayersInOrder) {
  const cache_spec s = parse_cache_spec(
      "dir:/l+ro:/a+RO:dir:/b+pack:/c.cupack+ro:redis://h/1+ro:HTTP://h/x+"
      "redis://h/2");
  EXPECT_EQ(s.local, cache_spec::local_kind::directory);
  EXPECT_FALSE(s.local_read_only);
  ASSERT_EQ(s.layers.size(), 5u);
  using kind = cache_spec::layer::kind;
  EXPECT_EQ(s.layers[0].what, kind::directory);
  EXPECT_EQ(s.layers[0].path, "/a");
  EXPECT_EQ(s.layers[1].what, kind::directory);
  EXPECT_EQ(s.layers[1].path, "/b");
  EXPECT_EQ(s.layers[2].what, kind::pack);
  EXPECT_EQ(s.layers[2].path, "/c.cupack");
  EXPECT_EQ(s.layers[3].what, kind::remote);
  EXPECT_EQ(s.layers[3].url, "redis://h/1");
  EXPECT_EQ(s.layers[4].backend, "http");
  EXPECT_EQ(s.layers[4].url, "http://h/x");
  ASSERT_TRUE(s.remote);
  EXPECT_EQ(*s.remote, "redis://h/2");

  const cache_spec alone = parse_cache_spec("ro:/opt/kernels");
  EXPECT_EQ(alone.local, cache_spec::local_kind::directory);
  EXPECT_TRUE(alone.local_read_only);
  EXPECT_EQ(parse_cache_spec("pack:k.cupack").local, cache_spec::local_kind::pack);
  const cache_spec remote_layer = parse_cache_spec("ro:http://h/c");
  EXPECT_EQ(remote_layer.local, cache_spec::local_kind::none);
  ASSERT_EQ(remote_layer.layers.size(), 1u);
  EXPECT_EQ(parse_cache_spec("+pack:/p").local, cache_spec::local_kind::default_directory);

  for (const char* refused :
       {"dir:/l+ro:sqlite:/k.db", "dir:/l+ro:memory", "dir:/l+ro:", "dir:/l+redis://h+ro:/a",
        "redis://h+ro:/a", "none+ro:/a", "ro:sqlite:/k.db", "pack:"}) {
    SCOPED_TRACE(refused);
    EXPECT_THROW((void)parse_cache_spec(refused), cache_spec_error);
  }
  try {
    (void)parse_cache_spec("dir:/l+ro:redis://:secret@h/1+ro:sqlite:/k.db");
    ADD_FAILURE() << "accepted";
  } catch (const cache_spec_error& e) {
    EXPECT_EQ(std::string(e.what()).find("secret"), std::string::npos) << e.what();
  }
}

// Opened: a directory in front of a read-only directory and a pack; hits come from each layer,
// are backfilled into the local tier, and no layer is written.
TEST(ReadOnlyLayer, AnOpenedSpecReadsEveryLayerAndWritesNone) {
  temp_dir dir;
  const fs::path layer = filled(dir, 2);
  const fs::path pack = dir.path() / "more.cupack";
  {
    in_memory_program_cache source;
    source.put(workload_key(10), workload_value(10, 1));
    (void)export_pack(source, pack);
  }
  const auto layer_before = snapshot(layer);
  const fs::path local = dir.path() / "local";
  const auto cache = open_program_cache("dir:" + local.string() + "+ro:" + layer.string() +
                                        "+pack:" + pack.string());
  EXPECT_FALSE(cache->read_only());
  EXPECT_NE(cache->description().find("read-only"), std::string::npos) << cache->description();
  ASSERT_TRUE(cache->get(workload_key(1)));
  ASSERT_TRUE(cache->get(workload_key(10)));
  EXPECT_FALSE(cache->get(workload_key(11)));
  cache->put(workload_key(11), workload_value(11, 1));
  file_stream_program_cache local_view(local, file_stream_cache_options{.statistics = false});
  for (int k : {1, 10, 11}) EXPECT_TRUE(local_view.get(workload_key(k))) << k;
  EXPECT_EQ(snapshot(layer), layer_before);
  EXPECT_EQ(pack_program_cache(pack).size(), 1u);

  const auto only = open_program_cache("ro:" + layer.string());
  EXPECT_TRUE(only->read_only());
  EXPECT_TRUE(only->get(workload_key(0)));
  EXPECT_THROW(only->put(workload_key(12), workload_value(12, 1)), error);
  EXPECT_EQ(snapshot(layer), layer_before);
}

const char* const kKernel = "extern \"C\" __global__ void k(int* p) { *p = 42; }\n";

program_options kernel_options() {
  program_options o;
  o.arch = "sm_90";
  o.name = "layered.cu";
  return o;
}

std::string text_of(const object_code& c) {
  return {reinterpret_cast<const char*>(c.code().data()), c.code().size()};
}

// The child half of WorksOnAReadOnlyMount: run with CUCORE_LAYER_PROBE_DIR (the read-only layer)
// and CUCORE_LAYER_PROBE_LOCAL set (else skipped). A real compile through LOCAL+ro:LAYER hits the
// layer with the bytes the parent stored there, and is backfilled into LOCAL.
TEST(ReadOnlyLayer, ProbeChild) {
  const char* where = std::getenv("CUCORE_LAYER_PROBE_DIR");
  const char* local = std::getenv("CUCORE_LAYER_PROBE_LOCAL");
  if (where == nullptr || local == nullptr) {
    GTEST_SKIP() << "run by ReadOnlyLayer.WorksOnAReadOnlyMount";
  }
  file_stream_program_cache layer(where, read_only_options());
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(layer.get(workload_key(i))) << i;
  EXPECT_EQ(layer.verify(true).removed, 0u);

  const auto cache = open_program_cache("dir:" + std::string(local) + "+ro:" + where);
  program p(kKernel, source_type::cxx, kernel_options());
  const std::string got = text_of(p.compile(code_type::ptx, {}, cache.get()));
  EXPECT_EQ(p.last_cache_outcome(), cache_outcome::hit);
  std::ifstream expected(std::string(where) + "/../expected.ptx");
  EXPECT_EQ(got, std::string(std::istreambuf_iterator<char>(expected), {}));
  file_stream_program_cache backfilled(local, file_stream_cache_options{.statistics = false});
  EXPECT_TRUE(backfilled.get(*p.last_cache_key())) << "backfilled into the local tier";
}

// On a read-only mount (a bind mount remounted read-only in a private user and mount namespace:
// `unshare -rm`), the layer answers hits, a real compile's included, as on a writable one.
TEST(ReadOnlyLayer, WorksOnAReadOnlyMount) {
  if (std::system("unshare -rm true >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no unshare -rm here (user namespaces off)";
  }
  temp_dir dir;
  const fs::path root = filled(dir, 2);
  {
    const auto writer = open_program_cache("dir:" + root.string());
    program p(kKernel, source_type::cxx, kernel_options());
    std::ofstream(dir.path() / "expected.ptx")
        << text_of(p.compile(code_type::ptx, {}, writer.get()));
    ASSERT_TRUE(p.last_stored());
  }
  const auto before = snapshot(root);
  const fs::path mount = dir.path() / "mnt";
  fs::create_directories(mount);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string command = "unshare -rm sh -c 'mount --bind " + root.string() + " " +
                              mount.string() + " && mount -o remount,bind,ro " + mount.string() +
                              " && ! touch " + mount.string() +
                              "/x 2>/dev/null && CUCORE_LAYER_PROBE_DIR=" + mount.string() +
                              " CUCORE_LAYER_PROBE_LOCAL=" + (dir.path() / "local").string() + " " +
                              self + " --gtest_filter=ReadOnlyLayer.ProbeChild >/dev/null'";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  EXPECT_EQ(snapshot(root), before);
  EXPECT_TRUE(fs::exists(dir.path() / "local" / "entries"));
}

}  // namespace
}  // namespace cucore
