// Read-only layers (docs/cache-layers.md): a directory cache opened read-only is only read —
// nothing created, touched, removed or counted — and a tiered cache never writes a read-only tier.
// Real directories, a real bind mount made read-only in a private mount namespace.
#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "cache_workload.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/error.hpp"
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

// The child half of WorksOnAReadOnlyMount: run with CUCORE_LAYER_PROBE_DIR set (else skipped).
TEST(ReadOnlyLayer, ProbeChild) {
  const char* where = std::getenv("CUCORE_LAYER_PROBE_DIR");
  if (where == nullptr) GTEST_SKIP() << "run by ReadOnlyLayer.WorksOnAReadOnlyMount";
  file_stream_program_cache layer(where, read_only_options());
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(layer.get(workload_key(i))) << i;
  EXPECT_FALSE(layer.get(workload_key(9)));
  EXPECT_EQ(layer.verify(true).removed, 0u);
}

// On a read-only mount (a bind mount remounted read-only in a private user and mount namespace:
// `unshare -rm`), the layer answers hits as on a writable one.
TEST(ReadOnlyLayer, WorksOnAReadOnlyMount) {
  if (std::system("unshare -rm true >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no unshare -rm here (user namespaces off)";
  }
  temp_dir dir;
  const fs::path root = filled(dir, 2);
  const fs::path mount = dir.path() / "mnt";
  fs::create_directories(mount);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string command = "unshare -rm sh -c 'mount --bind " + root.string() + " " +
                              mount.string() + " && mount -o remount,bind,ro " + mount.string() +
                              " && ! touch " + mount.string() +
                              "/x 2>/dev/null && CUCORE_LAYER_PROBE_DIR=" + mount.string() + " " +
                              self + " --gtest_filter=ReadOnlyLayer.ProbeChild >/dev/null'";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  EXPECT_FALSE(fs::exists(root / "x"));
}

}  // namespace
}  // namespace cucore
