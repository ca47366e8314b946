// The directory cache (file_stream_program_cache): real files in fresh temp directories, real
// child processes (fork), no mocks. Races with a peer are staged deterministically through the
// test hooks, which run at the exact point where another process could interleave.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/entry_format.hpp"
#include "cache_test_support.hpp"
#include "cache_workload.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using testing::log_capture;
using testing::run_children;
using testing::run_in_child;
using testing::temp_dir;
using testing::workload_key;
using testing::workload_value;
using testing::write_text;

// ---------------------------------------------------------------------------------------------
// Helpers

file_stream_cache_options fast(std::optional<std::uint64_t> cap = std::nullopt) {
  file_stream_cache_options o;
  o.fsync = false;
  o.max_size_bytes = cap;
  return o;
}

object_code code_of(std::size_t n, const std::string& name = "c", std::byte fill = std::byte{7}) {
  return object_code(code_type::cubin, std::vector<std::byte>(n, fill), name);
}

std::uint64_t stored_size(cache_key_ref key, const object_code& code) {
  return detail::encode_entry(key.bytes(), code).size();
}

std::vector<std::byte> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

// Writes `bytes` to `path` in place (the inode is kept: a tampered file, not a replaced one).
void write_bytes(const fs::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Regular files under entries/*/.
std::vector<fs::path> entry_files(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& shard : fs::directory_iterator(root / "entries", ec)) {
    if (!shard.is_directory() || shard.is_symlink()) continue;
    for (const auto& f : fs::directory_iterator(shard.path())) {
      if (f.is_regular_file() && !f.is_symlink()) out.push_back(f.path());
    }
  }
  return out;
}

std::vector<fs::path> tmp_files(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(root / "tmp", ec)) out.push_back(f.path());
  return out;
}

// Where `key`'s entry lives under `root`: found by storing it in a scratch cache (this does not
// assume the naming scheme; LayoutIsSha256OfTheKey checks that separately).
fs::path entry_file(const fs::path& root, cache_key_ref key) {
  temp_dir scratch;
  file_stream_program_cache cache(scratch.path(), fast());
  cache.put(key, code_of(1));
  auto files = entry_files(scratch.path());
  if (files.size() != 1) std::abort();
  return root / fs::relative(files[0], scratch.path());
}

struct stat lstat_of(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) std::memset(&st, 0, sizeof st);
  return st;
}

std::int64_t ns(const timespec& t) {
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}
std::int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ns(t);
}

// Sets a file's atime (and, optionally, its mtime) to `seconds_ago` before now.
void set_times(const fs::path& p, double atime_seconds_ago,
               std::optional<double> mtime_seconds_ago = std::nullopt) {
  auto ago = [](double s) {
    const std::int64_t t = now_ns() - static_cast<std::int64_t>(s * 1e9);
    return timespec{static_cast<time_t>(t / 1'000'000'000), static_cast<long>(t % 1'000'000'000)};
  };
  timespec times[2] = {ago(atime_seconds_ago),
                       mtime_seconds_ago ? ago(*mtime_seconds_ago) : timespec{0, UTIME_OMIT}};
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << p;
}

// Installs test hooks while in scope.
class hooks_scope {
 public:
  explicit hooks_scope(const std::function<void(detail::file_stream_test_hooks&)>& set) {
    set(hooks_);
    detail::set_file_stream_test_hooks(&hooks_);
  }
  ~hooks_scope() { detail::set_file_stream_test_hooks(nullptr); }

 private:
  detail::file_stream_test_hooks hooks_;
};

// Runs `body` in a forked child (run_in_child) that, when we are root, first drops to uid/gid
// 65534 (nobody), so that file modes apply to it.
std::string run_as_nobody(const std::function<std::string()>& body) {
  return run_in_child([&]() -> std::string {
    if (::geteuid() == 0) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) {
        return "cannot drop privileges to nobody";
      }
    }
    return body();
  });
}

#define CHILD_EXPECT(cond)                                                            \
  do {                                                                                \
    if (!(cond)) return std::string("line ") + std::to_string(__LINE__) + ": " #cond; \
  } while (0)

bool running_as_root() {
  return ::geteuid() == 0;
}

// ---------------------------------------------------------------------------------------------
// CRUD and values

TEST(FileStreamCache, EmptyOnCreate) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.size_bytes(), 0u);
  EXPECT_FALSE(cache.get("missing"));
  EXPECT_EQ(cache.stats().misses, 1u);
  EXPECT_TRUE(fs::is_directory(dir / "entries"));
  EXPECT_TRUE(fs::is_directory(dir / "tmp"));
  EXPECT_EQ(cache.root(), dir.path());
  EXPECT_EQ(cache.description(), "directory " + dir.path().string());
}

TEST(FileStreamCache, RoundTripKeepsTheWholeObjectCode) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path());  // default options: fsync on
  testing::expect_round_trip(cache);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().puts, 1u);
  EXPECT_EQ(cache.stats().errors, 0u);
  EXPECT_TRUE(tmp_files(dir.path()).empty()) << "no temp file left behind";
}

TEST(FileStreamCache, EveryCodeTypeAndEmptyPayloadRoundTrip) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  const code_type types[] = {code_type::ptx,    code_type::cubin,  code_type::ltoir,
                             code_type::fatbin, code_type::object, code_type::library};
  for (code_type t : types) {
    object_code code(t, std::vector<std::byte>(17, std::byte{0x5a}), std::string(to_string(t)));
    cache.put(std::string(to_string(t)), code);
  }
  cache.put("empty", object_code(code_type::ptx, std::vector<std::byte>{}));
  for (code_type t : types) {
    auto hit = cache.get(std::string(to_string(t)));
    ASSERT_TRUE(hit) << to_string(t);
    EXPECT_EQ(hit->type(), t);
    EXPECT_EQ(hit->size(), 17u);
  }
  auto empty = cache.get("empty");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->size(), 0u);
}

TEST(FileStreamCache, LayoutIsSha256OfTheKey) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("abc", code_of(5));
  // SHA-256("abc"), the FIPS 180-2 test vector.
  const fs::path expected =
      dir / "entries/ba/7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  ASSERT_TRUE(fs::is_regular_file(expected));
  auto bytes = read_bytes(expected);
  ASSERT_GE(bytes.size(), 8u);
  EXPECT_EQ(std::memcmp(bytes.data(), "CUCOREPC", 8), 0) << "the entry format, header first";
  EXPECT_EQ(fs::file_size(expected), stored_size("abc", code_of(5)));
}

TEST(FileStreamCache, CompilerVersionMemoLivesBesideTheEntries) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(1 << 20));
  ASSERT_EQ(cache.compiler_version_memo(), dir / "compiler-versions");
  write_text(dir / "compiler-versions", "memo");
  cache.put("k", code_of(10));
  cache.clear();
  cache.trim(0);
  EXPECT_EQ(cache.verify(true).entries, 0u) << "not an entry";
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_TRUE(fs::exists(dir / "compiler-versions")) << "left alone by clear, trim and verify";
}

TEST(FileStreamCache, StringAndByteKeysAlias) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(3));
  std::vector<std::byte> bytes = {std::byte{'k'}};
  EXPECT_TRUE(cache.get(std::span<const std::byte>(bytes)));
  EXPECT_TRUE(cache.get(std::string("k")));
  EXPECT_EQ(cache.size(), 1u);
}

TEST(FileStreamCache, LongAndBinaryKeys) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  const std::string long_key(100'000, 'x');  // far beyond any file name limit
  std::vector<std::byte> binary_key = {std::byte{0}, std::byte{0xff}, std::byte{'/'}, std::byte{0},
                                       std::byte{'.'}};
  cache.put(long_key, code_of(10, "long"));
  cache.put(std::span<const std::byte>(binary_key), code_of(11, "binary"));
  ASSERT_TRUE(cache.get(long_key));
  EXPECT_EQ(cache.get(long_key)->name(), "long");
  ASSERT_TRUE(cache.get(std::span<const std::byte>(binary_key)));
  EXPECT_EQ(cache.get(std::span<const std::byte>(binary_key))->name(), "binary");
  EXPECT_FALSE(cache.get(std::string(99'999, 'x')));
  for (const auto& f : entry_files(dir.path())) EXPECT_EQ(f.filename().string().size(), 62u);
}

TEST(FileStreamCache, OverwriteReplacesValue) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(10, "first"));
  cache.put("k", code_of(25, "second"));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.size_bytes(), stored_size("k", code_of(25, "second")));
  auto hit = cache.get("k");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->name(), "second");
  EXPECT_EQ(hit->size(), 25u);
}

TEST(FileStreamCache, EraseRemovesAndReportsMissing) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(1 << 20));
  cache.put("a", code_of(1));
  cache.put("b", code_of(2));
  EXPECT_TRUE(cache.erase("a"));
  EXPECT_FALSE(cache.erase("a")) << "second erase: nothing there";
  EXPECT_FALSE(cache.erase("never"));
  EXPECT_FALSE(cache.get("a"));
  EXPECT_TRUE(cache.get("b"));
  EXPECT_EQ(cache.size(), 1u);
}

TEST(FileStreamCache, SizeCountsEntriesAndSizeBytesSumsFiles) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  std::uint64_t expected = 0;
  for (int i = 0; i < 20; ++i) {
    const std::string key = "key-" + std::to_string(i);
    cache.put(key, code_of(static_cast<std::size_t>(i * 10), key));
    expected += stored_size(key, code_of(static_cast<std::size_t>(i * 10), key));
  }
  EXPECT_EQ(cache.size(), 20u);
  EXPECT_EQ(cache.size_bytes(), expected);
  write_text(dir / "tmp/entry-in-flight", std::string(1000, 'x'));
  EXPECT_EQ(cache.size_bytes(), expected) << "temp files are not entries";
  write_text(dir / "entries/stray", "x");
  EXPECT_EQ(cache.size(), 20u) << "a stray file at the top of entries/ is not an entry";
}

TEST(FileStreamCache, ClearRemovesEntries) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(1 << 20));
  for (int i = 0; i < 10; ++i) cache.put("k" + std::to_string(i), code_of(100));
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(cache.get("k3"));
  cache.put("again", code_of(3));
  EXPECT_TRUE(cache.get("again")) << "usable after clear";
}

TEST(FileStreamCache, PersistsAcrossReopen) {
  temp_dir dir;
  {
    file_stream_program_cache cache(dir.path());
    cache.put("persist", code_of(42, "p"));
  }
  file_stream_program_cache reopened(dir.path());
  auto hit = reopened.get("persist");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->name(), "p");
  EXPECT_EQ(hit->size(), 42u);
}

TEST(FileStreamCache, UpdateIsABulkPut) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  std::vector<std::pair<std::string, object_code>> items = {{"a", code_of(1)}, {"b", code_of(2)}};
  cache.update(items);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.get("b")->size(), 2u);
}

TEST(FileStreamCache, ZeroCapRejected) {
  temp_dir dir;
  EXPECT_THROW(file_stream_program_cache(dir.path(), fast(0)), invalid_argument);
}

TEST(FileStreamCache, EmptyPathRejected) {
  EXPECT_THROW(file_stream_program_cache(fs::path(), fast()), invalid_argument);
}

TEST(FileStreamCache, UseAfterCloseThrows) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(1));
  cache.close();
  EXPECT_THROW(cache.get("k"), error);
  EXPECT_THROW(cache.put("k", code_of(1)), error);
  EXPECT_THROW(cache.size(), error);
  EXPECT_EQ(cache.stats().puts, 1u) << "stats stay readable";
  EXPECT_NO_THROW(cache.close()) << "closing twice is fine";
}

TEST(FileStreamCache, RootIsMadeAbsoluteAndNormal) {
  temp_dir dir;
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  file_stream_program_cache relative("sub/cache/", fast());
  fs::current_path(cwd);
  EXPECT_EQ(relative.root(), dir / "sub/cache");
  relative.put("k", code_of(1));
  EXPECT_TRUE(relative.get("k")) << "still works after the working directory changed";
}

TEST(FileStreamCache, DefaultDirectoryComesFromTheEnvironment) {
  temp_dir dir;
  const char* old = std::getenv("CUCORE_CACHE_DIR");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("CUCORE_CACHE_DIR", (dir / "default").c_str(), 1);
  {
    file_stream_program_cache cache;
    EXPECT_EQ(cache.root(), dir / "default");
    EXPECT_TRUE(fs::is_directory(dir / "default/entries"));
  }
  if (old != nullptr) {
    ::setenv("CUCORE_CACHE_DIR", saved.c_str(), 1);
  } else {
    ::unsetenv("CUCORE_CACHE_DIR");
  }
}

// ---------------------------------------------------------------------------------------------
// Directories, modes, temp files

TEST(FileStreamCache, TmpIsOwnerOnlyAndFilesFollowTheUmask) {
  temp_dir dir;
  const mode_t old = ::umask(022);
  {
    file_stream_program_cache cache(dir / "c", fast());
    cache.put("k", code_of(1));
    EXPECT_EQ(lstat_of(dir / "c/tmp").st_mode & 07777, 0700u);
    EXPECT_EQ(lstat_of(dir / "c/entries").st_mode & 07777, 0755u);
    EXPECT_EQ(lstat_of(entry_file(dir / "c", "k")).st_mode & 07777, 0644u);
  }
  ::umask(077);
  {
    file_stream_program_cache cache(dir / "private", fast());
    cache.put("k", code_of(1));
    EXPECT_EQ(lstat_of(dir / "private/entries").st_mode & 07777, 0700u);
    EXPECT_EQ(lstat_of(entry_file(dir / "private", "k")).st_mode & 07777, 0600u);
  }
  ::umask(0);
  {
    file_stream_program_cache cache(dir / "open", fast());
    cache.put("k", code_of(1));
    EXPECT_EQ(lstat_of(entry_file(dir / "open", "k")).st_mode & 07777, 0644u)
        << "entry files are never group- or world-writable, whatever the umask";
    EXPECT_EQ(lstat_of(dir / "open/tmp").st_mode & 07777, 0700u);
  }
  ::umask(old);
}

TEST(FileStreamCache, PreexistingSharedRootUsedAsIs) {
  // A group-shared root (the user opted in to a shared cache): used with the mode it has.
  temp_dir dir;
  fs::create_directory(dir / "shared");
  ::chmod((dir / "shared").c_str(), 0775);
  file_stream_cache_options shared = fast();
  shared.access = cache_access::shared;
  file_stream_program_cache cache(dir / "shared", shared);
  cache.put("k", code_of(1));
  EXPECT_TRUE(cache.get("k"));
  EXPECT_EQ(lstat_of(dir / "shared").st_mode & 07777, 0775u) << "no chmod of an existing root";
  EXPECT_EQ(lstat_of(dir / "shared/tmp").st_mode & 07777, 0775u) << "the group writes there too";
  // A private cache refuses it (cache_trust_test has the rest of the trust rules).
  EXPECT_THROW(file_stream_program_cache(dir / "shared", fast()), invalid_argument);
}

TEST(FileStreamCache, ExistingTmpModeIsLeftAlone) {
  temp_dir dir;
  fs::create_directories(dir / "c/tmp");
  ::chmod((dir / "c/tmp").c_str(), 0750);
  file_stream_program_cache cache(dir / "c", fast());
  EXPECT_EQ(lstat_of(dir / "c/tmp").st_mode & 07777, 0750u);
}

TEST(FileStreamCache, RecreatesTmpDirIfMissing) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  fs::remove_all(dir / "tmp");
  cache.put("k", code_of(5));
  EXPECT_TRUE(cache.get("k"));
  EXPECT_TRUE(fs::is_directory(dir / "tmp"));
  EXPECT_EQ(lstat_of(dir / "tmp").st_mode & 07777, 0700u);
  EXPECT_EQ(cache.stats().errors, 0u);
}

TEST(FileStreamCache, RecreatesEntriesShardAndRootIfMissing) {
  temp_dir dir;
  file_stream_program_cache cache(dir / "root", fast(1 << 20));
  cache.put("a", code_of(5));
  fs::remove_all(entry_file(dir / "root", "a").parent_path());  // the shard directory
  cache.put("a", code_of(6));
  ASSERT_TRUE(cache.get("a"));
  fs::remove_all(dir / "root/entries");
  EXPECT_FALSE(cache.get("a")) << "a missing entries/ is a miss";
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.verify(true).entries, 0u);
  EXPECT_TRUE(cache.list().empty());
  cache.put("b", code_of(7));
  EXPECT_TRUE(cache.get("b"));
  fs::remove_all(dir / "root");
  cache.put("c", code_of(8));
  EXPECT_TRUE(cache.get("c")) << "the whole root is recreated";
  EXPECT_EQ(cache.stats().errors, 0u);
}

TEST(FileStreamCache, SweepsStaleTmpFilesOnOpen) {
  temp_dir dir;
  { file_stream_program_cache cache(dir.path(), fast()); }
  write_text(dir / "tmp/entry-stale", "old");
  write_text(dir / "tmp/entry-young", "new");
  set_times(dir / "tmp/entry-stale", 7200, 7200);  // two hours old
  set_times(dir / "tmp/entry-young", 1800, 1800);  // half an hour old: a slow write, maybe
  file_stream_program_cache cache(dir.path(), fast());
  EXPECT_FALSE(fs::exists(dir / "tmp/entry-stale"));
  EXPECT_TRUE(fs::exists(dir / "tmp/entry-young"));
}

TEST(FileStreamCache, TempFileOfADeadWriterIsSweptAtOnce) {
  // A writer dies between writing its temp file and renaming it: the file can never be committed.
  // Its name says which process on this host made it, so the next sweep removes it without
  // waiting an hour (it would otherwise count against the size cap all that time).
  temp_dir dir;
  { file_stream_program_cache cache(dir.path(), fast()); }
  const std::string result = run_in_child([&]() -> std::string {
    file_stream_program_cache cache(dir.path(), fast());
    hooks_scope hooks([&](detail::file_stream_test_hooks& h) {
      h.before_commit = [](const std::string&) { ::_exit(0); };
    });
    cache.put("k", code_of(1000));
    return "put went on after the simulated crash";
  });
  EXPECT_EQ(result, "");
  ASSERT_EQ(tmp_files(dir.path()).size(), 1u) << "the dead writer's temp file";
  file_stream_program_cache cache(dir.path(), fast());
  EXPECT_TRUE(tmp_files(dir.path()).empty()) << "swept on open";
  EXPECT_FALSE(cache.get("k"));
}

TEST(FileStreamCache, TempFileOfALiveWriterSurvivesSweepsAndClear) {
  // A peer process is stopped between writing and renaming; an open, a clear() and an eviction
  // pass meanwhile must leave its temp file alone, and its put then completes.
  temp_dir dir;
  { file_stream_program_cache cache(dir.path(), fast()); }
  int go[2];
  int ready[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    file_stream_program_cache cache(dir.path(), fast());
    hooks_scope hooks([&](detail::file_stream_test_hooks& h) {
      h.before_commit = [&](const std::string&) {
        char c = 1;
        (void)!::write(ready[1], &c, 1);
        (void)!::read(go[0], &c, 1);
      };
    });
    cache.put("slow", code_of(1000, "slow"));
    ::_exit(cache.stats().errors == 0 ? 0 : 1);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(tmp_files(dir.path()).size(), 1u);
  {
    file_stream_program_cache cache(dir.path(), fast(100));  // opening sweeps
    cache.clear();
    cache.trim(0);
    cache.put("tiny", code_of(0));  // the temp file puts the total over the cap: eviction runs
    EXPECT_EQ(cache.stats().evictions, 1u) << "it evicted what it could: its own entry";
  }
  EXPECT_EQ(tmp_files(dir.path()).size(), 1u) << "the live writer's temp file was kept";
  ASSERT_EQ(::write(go[1], &c, 1), 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  file_stream_program_cache cache(dir.path(), fast());
  auto hit = cache.get("slow");
  ASSERT_TRUE(hit) << "the peer's put completed";
  EXPECT_EQ(hit->name(), "slow");
  for (int fd : {go[0], go[1], ready[0], ready[1]}) ::close(fd);
}

TEST(FileStreamCache, ClearPreservesYoungTmpFilesAndSweepsStaleOnes) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(3));
  write_text(dir / "tmp/entry-young", "in flight");
  write_text(dir / "tmp/entry-stale", "crashed");
  set_times(dir / "tmp/entry-stale", 4000, 4000);
  cache.clear();
  EXPECT_TRUE(fs::exists(dir / "tmp/entry-young")) << "a peer's write in progress";
  EXPECT_FALSE(fs::exists(dir / "tmp/entry-stale"));
  EXPECT_EQ(cache.size(), 0u);
}

TEST(FileStreamCache, AtomicNoHalfWrittenFile) {
  // A reader thread hammers one key while a writer alternates two large values: every hit is one
  // of them, whole.
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  const object_code a = code_of(3 << 20, "a", std::byte{1});
  const object_code b = code_of(2 << 20, "b", std::byte{2});
  cache.put("big", a);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::atomic<int> hits{0};
  std::thread reader([&] {
    while (!stop.load()) {
      if (auto hit = cache.get("big")) {
        ++hits;
        if (!(*hit == a) && !(*hit == b)) ++bad;
      }
    }
  });
  for (int i = 0; i < 20; ++i) cache.put("big", i % 2 ? a : b);
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(hits.load(), 0);
  EXPECT_EQ(cache.stats().corrupt_dropped, 0u);
  EXPECT_TRUE(tmp_files(dir.path()).empty());
}

// ---------------------------------------------------------------------------------------------
// Stat guards and recency

TEST(FileStreamCache, ReadRecordsRecencyAndKeepsMtime) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(10));
  const fs::path file = entry_file(dir.path(), "k");
  set_times(file, 500, 400);
  const struct stat before = lstat_of(file);
  const std::int64_t t0 = now_ns();
  ASSERT_TRUE(cache.get("k"));
  const struct stat after = lstat_of(file);
  EXPECT_GE(ns(after.st_atim), t0 - 1'000'000) << "atime set to the time of the read";
  EXPECT_EQ(ns(after.st_mtim), ns(before.st_mtim)) << "mtime untouched";
  EXPECT_EQ(after.st_ino, before.st_ino) << "no rewrite";
}

TEST(FileStreamCache, RepeatedReadsWithinASecondAreRecordedOnce) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(10));
  const fs::path file = entry_file(dir.path(), "k");
  ASSERT_TRUE(cache.get("k"));
  const std::int64_t first = ns(lstat_of(file).st_atim);
  ASSERT_TRUE(cache.get("k"));
  EXPECT_EQ(ns(lstat_of(file).st_atim), first);
}

TEST(FileStreamCache, TouchRecordsOnlyTheFileThatWasRead) {
  // A peer replaces the entry between our read and our recording of it: the file we read gets
  // the new atime, the peer's file is left alone.
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  file_stream_program_cache peer(dir.path(), fast());
  cache.put("k", code_of(10, "old"));
  const fs::path file = entry_file(dir.path(), "k");
  set_times(file, 600, 600);
  std::int64_t peer_atime = 0;
  {
    hooks_scope hooks([&](detail::file_stream_test_hooks& h) {
      h.after_read = [&](const std::string& path) {
        fs::create_hard_link(path, dir / "read-inode");
        peer.put("k", code_of(11, "new"));
        set_times(path, 300, 300);
        peer_atime = ns(lstat_of(path).st_atim);
      };
    });
    auto hit = cache.get("k");
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->name(), "old") << "the bytes read before the replacement";
  }
  EXPECT_EQ(ns(lstat_of(file).st_atim), peer_atime) << "the peer's file was not touched";
  EXPECT_GT(ns(lstat_of(dir / "read-inode").st_atim), now_ns() - 60'000'000'000)
      << "the file that was read was";
  EXPECT_EQ(cache.get("k")->name(), "new");
}

TEST(FileStreamCache, PruneOnlyIfStatUnchanged) {
  // get() reads a damaged file; before it prunes, a peer replaces the entry with a good one.
  // The good one must survive.
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  file_stream_program_cache peer(dir.path(), fast());
  cache.put("k", code_of(100));
  const fs::path file = entry_file(dir.path(), "k");
  auto bytes = read_bytes(file);
  bytes.back() ^= std::byte{1};
  write_bytes(file, bytes);
  {
    hooks_scope hooks([&](detail::file_stream_test_hooks& h) {
      h.after_read = [&](const std::string&) { peer.put("k", code_of(7, "good")); };
    });
    EXPECT_FALSE(cache.get("k")) << "what was read is damaged: a miss";
  }
  EXPECT_EQ(cache.stats().corrupt_dropped, 0u) << "the peer replaced it: nothing was dropped";
  auto hit = cache.get("k");
  ASSERT_TRUE(hit) << "the peer's replacement was not pruned";
  EXPECT_EQ(hit->name(), "good");
  EXPECT_TRUE(tmp_files(dir.path()).empty()) << "nothing left aside in tmp/";
}

TEST(FileStreamCache, ClearDoesNotUnlinkAReplacedFile) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  file_stream_program_cache peer(dir.path(), fast());
  cache.put("replaced", code_of(10, "v1"));
  cache.put("other", code_of(10));
  const fs::path replaced = entry_file(dir.path(), "replaced");
  {
    hooks_scope hooks([&](detail::file_stream_test_hooks& h) {
      h.before_remove = [&](const std::string& path) {
        if (path == replaced.string()) peer.put("replaced", code_of(12, "v2"));
      };
    });
    cache.clear();
  }
  auto hit = cache.get("replaced");
  ASSERT_TRUE(hit) << "an entry a peer wrote during clear() survives";
  EXPECT_EQ(hit->name(), "v2");
  EXPECT_FALSE(cache.get("other"));
  EXPECT_TRUE(tmp_files(dir.path()).empty());
}

// ---------------------------------------------------------------------------------------------
// Size cap and eviction

// Four entries of this size exceed a 4000-byte cap; three fit under 90% of it.
constexpr std::size_t kPayload = 1000;
std::uint64_t entry_bytes(const std::string& key) {
  return stored_size(key, code_of(kPayload, key));
}

TEST(FileStreamCache, SizeCapEvictsLeastRecentlyRead) {
  temp_dir dir;
  ASSERT_GT(4 * entry_bytes("a"), 4000u);
  ASSERT_LE(3 * entry_bytes("a"), 3600u);
  file_stream_program_cache cache(dir.path(), fast(4000));
  for (const char* k : {"a", "b", "c"}) cache.put(k, code_of(kPayload, k));
  set_times(entry_file(dir.path(), "a"), 300);  // written first...
  set_times(entry_file(dir.path(), "b"), 200);
  set_times(entry_file(dir.path(), "c"), 100);
  ASSERT_TRUE(cache.get("a"));  // ...but read last
  cache.put("d", code_of(kPayload, "d"));
  EXPECT_TRUE(cache.get("a")) << "read recently: survives although written first";
  EXPECT_FALSE(cache.get("b")) << "least recently read: evicted";
  EXPECT_TRUE(cache.get("c"));
  EXPECT_TRUE(cache.get("d"));
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_LE(cache.size_bytes(), 4000u);
}

TEST(FileStreamCache, WithoutReadsTheOldestWrittenGoesFirst) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(4000));
  for (const char* k : {"a", "b", "c"}) cache.put(k, code_of(kPayload, k));
  set_times(entry_file(dir.path(), "a"), 300, 300);
  set_times(entry_file(dir.path(), "b"), 200, 200);
  set_times(entry_file(dir.path(), "c"), 100, 100);
  cache.put("d", code_of(kPayload, "d"));
  EXPECT_FALSE(cache.get("a"));
  EXPECT_TRUE(cache.get("b"));
  EXPECT_TRUE(cache.get("c"));
  EXPECT_TRUE(cache.get("d"));
}

TEST(FileStreamCache, UnboundedByDefault) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  for (int i = 0; i < 200; ++i) cache.put("k" + std::to_string(i), code_of(10'000));
  EXPECT_EQ(cache.size(), 200u);
  EXPECT_EQ(cache.stats().evictions, 0u);
}

TEST(FileStreamCache, EntryLargerThanTheCapIsNotStored) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(4000));
  cache.put("small", code_of(100));
  cache.put("huge", code_of(5000));
  EXPECT_FALSE(cache.get("huge"));
  EXPECT_TRUE(cache.get("small")) << "a too-large entry does not flush the cache";
  EXPECT_EQ(cache.stats().errors, 0u);
}

TEST(FileStreamCache, WritesSkipTheScanUnderTheCapAndScanOverIt) {
  temp_dir dir;
  int scans = 0;
  hooks_scope hooks([&](detail::file_stream_test_hooks& h) { h.on_scan = [&] { ++scans; }; });
  file_stream_program_cache cache(dir.path(), fast(1 << 20));
  EXPECT_EQ(scans, 1) << "the constructor seeds the estimate";
  for (int i = 0; i < 50; ++i) cache.put("k" + std::to_string(i), code_of(100));
  EXPECT_EQ(scans, 1) << "50 small puts: the running estimate suffices";
  cache.put("big", code_of((1 << 20) - 100));
  EXPECT_EQ(scans, 2) << "over the cap: scan and evict";
  EXPECT_GT(cache.stats().evictions, 0u);
}

TEST(FileStreamCache, ScansAfterAnEighthOfTheCapWrittenEvenUnderIt) {
  // Several processes each under the cap can together be far over it: each rescans after
  // writing cap/8 bytes, which catches the others' writes.
  temp_dir dir;
  int scans = 0;
  hooks_scope hooks([&](detail::file_stream_test_hooks& h) { h.on_scan = [&] { ++scans; }; });
  file_stream_program_cache cache(dir.path(), fast(80'000));
  file_stream_program_cache peer(dir.path(), fast());
  for (int i = 0; i < 20; ++i) peer.put("peer" + std::to_string(i), code_of(4000));  // 80 KB+
  scans = 0;
  cache.put("mine", code_of(11'000));
  EXPECT_EQ(scans, 1);
  EXPECT_LE(cache.size_bytes(), 80'000u) << "the peers' bytes were found and evicted";
}

TEST(FileStreamCache, TrackerReconcilesAfterExternalDrift) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(4000));
  for (const char* k : {"a", "b", "c"}) cache.put(k, code_of(kPayload, k));
  // Someone removes two entries behind the cache's back: its estimate is now too high.
  fs::remove(entry_file(dir.path(), "a"));
  fs::remove(entry_file(dir.path(), "b"));
  cache.put("d", code_of(kPayload, "d"));
  cache.put("e", code_of(kPayload, "e"));
  EXPECT_EQ(cache.stats().evictions, 0u) << "the scan found the real total under the cap";
  EXPECT_TRUE(cache.get("c"));
  EXPECT_TRUE(cache.get("d"));
  EXPECT_TRUE(cache.get("e"));
}

TEST(FileStreamCache, TrackerNeverNegativeUnderDeleteRace) {
  // The cache opens an empty directory (estimate 0); a peer writes an entry; the cache erases
  // it. Subtracting its size must stop at zero, not wrap around to a huge estimate that would
  // make every later put scan and evict.
  temp_dir dir;
  int scans = 0;
  hooks_scope hooks([&](detail::file_stream_test_hooks& h) { h.on_scan = [&] { ++scans; }; });
  file_stream_program_cache cache(dir.path(), fast(1 << 20));
  file_stream_program_cache peer(dir.path(), fast());
  peer.put("k", code_of(50'000));
  EXPECT_TRUE(cache.erase("k"));
  EXPECT_FALSE(cache.erase("k"));
  scans = 0;
  cache.put("small", code_of(100));
  EXPECT_EQ(scans, 0) << "estimate clamped at zero";
  EXPECT_TRUE(cache.get("small"));
}

TEST(FileStreamCache, ClearWithACapResetsTheEstimate) {
  temp_dir dir;
  int scans = 0;
  hooks_scope hooks([&](detail::file_stream_test_hooks& h) { h.on_scan = [&] { ++scans; }; });
  file_stream_program_cache cache(dir.path(), fast(1 << 20));
  for (int i = 0; i < 9; ++i) cache.put("k" + std::to_string(i), code_of(100'000));
  cache.clear();
  scans = 0;
  cache.put("small", code_of(100));
  EXPECT_EQ(scans, 0) << "after clear() the estimate is what is left (nothing), not 900 KB";
  EXPECT_EQ(cache.stats().evictions, 0u);
}

TEST(FileStreamCache, OverEvictionRaceAPeerRemovesTheCandidateFirst) {
  // The review finding on the reference design: after the scan, a peer removes the eviction
  // candidate; if the lost race is not subtracted from the total, eviction goes on and removes
  // the entry just written. Here the peer wins the race at exactly that point.
  temp_dir dir;
  const std::uint64_t one = stored_size("old", code_of(600, "old"));
  const std::uint64_t cap = 2 * one - 100;  // two entries are over the cap, one is far under
  file_stream_program_cache cache(dir.path(), fast(cap));
  cache.put("old", code_of(600, "old"));
  set_times(entry_file(dir.path(), "old"), 100);
  const fs::path old_path = entry_file(dir.path(), "old");
  int peer_removals = 0;
  {
    hooks_scope hooks([&](detail::file_stream_test_hooks& h) {
      h.before_remove = [&](const std::string& path) {
        if (path == old_path.string() && peer_removals++ == 0) {
          fs::remove(path);  // the peer wins the race
        }
      };
    });
    cache.put("new", code_of(600, "new"));
  }
  EXPECT_EQ(peer_removals, 1) << "eviction did try the old entry first";
  EXPECT_FALSE(cache.get("old"));
  auto hit = cache.get("new");
  ASSERT_TRUE(hit) << "over-eviction: the fresh entry was removed after a lost unlink race";
  EXPECT_EQ(hit->name(), "new");
  EXPECT_EQ(cache.stats().evictions, 0u) << "the peer removed it, not us";
}

TEST(FileStreamCache, EvictionKeepsAnEntryAPeerReplacedAfterTheScan) {
  temp_dir dir;
  const std::uint64_t one = stored_size("old", code_of(600, "old"));
  file_stream_program_cache cache(dir.path(), fast(2 * one - 100));
  file_stream_program_cache peer(dir.path(), fast());
  cache.put("old", code_of(600, "old"));
  set_times(entry_file(dir.path(), "old"), 100);
  const fs::path old_path = entry_file(dir.path(), "old");
  {
    hooks_scope hooks([&](detail::file_stream_test_hooks& h) {
      h.before_remove = [&](const std::string& path) {
        if (path == old_path.string()) {
          peer.put("old", code_of(600, "rewritten"));
        }
      };
    });
    cache.put("new", code_of(600, "new"));
  }
  auto hit = cache.get("old");
  ASSERT_TRUE(hit) << "the entry a peer rewrote after the scan was not evicted";
  EXPECT_EQ(hit->name(), "rewritten");
  EXPECT_TRUE(tmp_files(dir.path()).empty()) << "nothing left aside in tmp/";
  EXPECT_LE(cache.size_bytes(), 2 * one - 100) << "the cap still holds: another entry went";
}

TEST(FileStreamCache, EvictionSparesAnEntryReadAfterTheScan) {
  // The scan saw "a" as least recently read, but a peer reads it before it is removed: it is now
  // the most recently read, so the next candidate goes instead.
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(4000));
  file_stream_program_cache peer(dir.path(), fast());
  for (const char* k : {"a", "b", "c"}) cache.put(k, code_of(kPayload, k));
  set_times(entry_file(dir.path(), "a"), 300, 300);
  set_times(entry_file(dir.path(), "b"), 200, 200);
  set_times(entry_file(dir.path(), "c"), 100, 100);
  const fs::path a_path = entry_file(dir.path(), "a");
  {
    hooks_scope hooks([&](detail::file_stream_test_hooks& h) {
      h.before_remove = [&](const std::string& path) {
        if (path == a_path.string()) {
          EXPECT_TRUE(peer.get("a"));
        }
      };
    });
    cache.put("d", code_of(kPayload, "d"));
  }
  EXPECT_TRUE(cache.get("a")) << "read after the scan: kept";
  EXPECT_FALSE(cache.get("b")) << "the next least recently read went instead";
  EXPECT_TRUE(cache.get("c"));
  EXPECT_TRUE(cache.get("d"));
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_TRUE(tmp_files(dir.path()).empty());
}

TEST(FileStreamCache, SizeCapCountsTmpFiles) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast(4000));
  cache.put("a", code_of(kPayload, "a"));
  write_text(dir / "tmp/entry-peer-in-flight", std::string(2500, 'x'));
  cache.put("b", code_of(kPayload, "b"));  // entries 2 × ~1.07 KB + 2.5 KB in tmp/ > 4000
  EXPECT_GE(cache.stats().evictions, 1u);
  EXPECT_FALSE(cache.get("a"));
  EXPECT_TRUE(fs::exists(dir / "tmp/entry-peer-in-flight")) << "young temp files are not evicted";
}

TEST(FileStreamCache, TrimEvictsLeastRecentlyReadDownToTheLimit) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  for (const char* k : {"a", "b", "c", "d"}) cache.put(k, code_of(kPayload, k));
  set_times(entry_file(dir.path(), "a"), 400);
  set_times(entry_file(dir.path(), "b"), 300);
  set_times(entry_file(dir.path(), "c"), 200);
  set_times(entry_file(dir.path(), "d"), 100);
  ASSERT_TRUE(cache.get("a"));
  EXPECT_EQ(cache.trim(2 * entry_bytes("a")), 2u);
  EXPECT_TRUE(cache.get("a"));
  EXPECT_TRUE(cache.get("d"));
  EXPECT_FALSE(cache.get("b"));
  EXPECT_FALSE(cache.get("c"));
  EXPECT_EQ(cache.trim(0), 2u);
  EXPECT_EQ(cache.size(), 0u);
}

// ---------------------------------------------------------------------------------------------
// Corruption: every damaged file is a miss, counted, pruned; never a crash or a wrong value.

struct damaged_case {
  std::string what;
  std::function<void(std::vector<std::byte>&, const detail::entry_header&)> damage;
};

std::vector<damaged_case> damage_cases() {
  std::vector<damaged_case> cases;
  for (std::size_t cut : {0, 1, 7, 8, 11, 12, 19, 20, 25}) {
    cases.push_back({"truncated to " + std::to_string(cut),
                     [cut](std::vector<std::byte>& b, const detail::entry_header&) {
                       b.resize(std::min(cut, b.size()));
                     }});
  }
  cases.push_back({"truncated in the payload", [](auto& b, const auto& h) {
                     b.resize(h.payload_offset + h.payload_length / 2);
                   }});
  cases.push_back({"last byte missing", [](auto& b, const auto&) { b.pop_back(); }});
  cases.push_back({"trailing bytes", [](auto& b, const auto&) { b.push_back(std::byte{0}); }});
  cases.push_back(
      {"zeroed", [](auto& b, const auto&) { std::fill(b.begin(), b.end(), std::byte{0}); }});
  auto flip = [](std::string what, std::function<std::size_t(const detail::entry_header&)> at) {
    return damaged_case{"bit flip in " + what,
                        [at](auto& b, const auto& h) { b[at(h)] ^= std::byte{0x10}; }};
  };
  cases.push_back(flip("magic", [](const auto&) { return 0; }));
  cases.push_back(flip("format version", [](const auto&) { return 8; }));
  cases.push_back(flip("code type", [](const auto&) { return 12; }));
  cases.push_back(flip("reserved", [](const auto&) { return 14; }));
  cases.push_back(flip("key length", [](const auto&) { return 16; }));
  cases.push_back(flip("key", [](const auto&) { return 20; }));
  cases.push_back(flip("name", [](const auto& h) { return 20 + h.key.size() + 4; }));
  cases.push_back(flip("symbol", [](const auto& h) { return h.payload_offset - 20; }));
  cases.push_back(flip("payload length", [](const auto& h) { return h.payload_offset - 16; }));
  cases.push_back(flip("checksum", [](const auto& h) { return h.payload_offset - 8; }));
  cases.push_back(flip("first payload byte", [](const auto& h) { return h.payload_offset; }));
  cases.push_back(flip("last payload byte",
                       [](const auto& h) { return h.payload_offset + h.payload_length - 1; }));
  cases.push_back({"format version 2", [](auto& b, const auto&) { b[8] = std::byte{2}; }});
  cases.push_back({"foreign file", [](auto& b, const auto&) {
                     const std::string text = "#!/bin/sh\necho not a cache entry\n";
                     b.assign(reinterpret_cast<const std::byte*>(text.data()),
                              reinterpret_cast<const std::byte*>(text.data()) + text.size());
                   }});
  return cases;
}

TEST(FileStreamCache, DamagedEntriesAreMissesAndArePruned) {
  const object_code code(code_type::cubin, std::vector<std::byte>(300, std::byte{0x42}), "damaged",
                         symbol_map{{"f<int>", "_Z1fIiEvv"}});
  for (const auto& c : damage_cases()) {
    SCOPED_TRACE(c.what);
    temp_dir dir;
    log_capture logs;
    file_stream_program_cache cache(dir.path(), fast());
    cache.put("k", code);
    const fs::path file = entry_file(dir.path(), "k");
    auto bytes = read_bytes(file);
    auto header = detail::read_entry_header(bytes);
    ASSERT_TRUE(header);
    c.damage(bytes, *header);
    write_bytes(file, bytes);
    EXPECT_FALSE(cache.get("k"));
    EXPECT_EQ(cache.stats().corrupt_dropped, 1u);
    EXPECT_EQ(cache.stats().misses, 1u);
    EXPECT_FALSE(fs::exists(file)) << "pruned";
    EXPECT_EQ(logs.at(log_level::warning).size(), 1u);
    cache.put("k", code);
    ASSERT_TRUE(cache.get("k")) << "a fresh put works again";
    EXPECT_EQ(*cache.get("k"), code);
  }
}

// A hit reads a large entry without zero-filling its buffer and checks the checksum over the whole
// payload: one flipped byte anywhere in 256 KiB of code (first, page and 64 KiB boundaries, middle,
// last) is a miss, never stale code; the undamaged entry is a hit with the same bytes.
TEST(FileStreamCache, AFlippedByteAnywhereInALargePayloadIsAMiss) {
  std::mt19937_64 rng(9);
  std::vector<std::byte> payload((256u << 10) + 1000);
  for (auto& b : payload) b = static_cast<std::byte>(rng());
  const object_code code(code_type::cubin, payload, "large", symbol_map{{"k<1>", "_Z1kILi1EEvv"}});
  temp_dir dir;
  log_capture logs;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code);
  const fs::path file = entry_file(dir.path(), "k");
  const auto good = read_bytes(file);
  auto header = detail::read_entry_header(good);
  ASSERT_TRUE(header);
  ASSERT_EQ(header->payload_length, payload.size());
  auto hit = cache.get("k");
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, code);
  const std::size_t p = header->payload_offset;
  const std::size_t n = payload.size();
  std::uint64_t dropped = 0;
  for (std::size_t at :
       {p, p + 4095, p + 4096, p + (64u << 10) - 1, p + (64u << 10), p + n / 2, p + n - 1}) {
    SCOPED_TRACE("byte " + std::to_string(at));
    auto bytes = good;
    bytes[at] ^= std::byte{0x01};
    write_bytes(file, bytes);
    EXPECT_FALSE(cache.get("k"));
    EXPECT_EQ(cache.stats().corrupt_dropped, ++dropped);
    EXPECT_FALSE(fs::exists(file)) << "pruned";
    write_bytes(file, good);
    auto again = cache.get("k");
    ASSERT_TRUE(again) << "the undamaged entry is a hit";
    EXPECT_EQ(*again, code);
  }
}

TEST(FileStreamCache, AnotherKeysEntryAtThisPathIsAMiss) {
  // The file name is a hash: a file copied (or a hash collision) onto another key's path must
  // not be served for that key; the echoed key catches it.
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("a", code_of(10, "a"));
  cache.put("b", code_of(10, "b"));
  fs::copy_file(entry_file(dir.path(), "a"), entry_file(dir.path(), "b"),
                fs::copy_options::overwrite_existing);
  EXPECT_FALSE(cache.get("b"));
  EXPECT_EQ(cache.stats().corrupt_dropped, 1u);
  EXPECT_FALSE(fs::exists(entry_file(dir.path(), "b")));
  EXPECT_EQ(cache.get("a")->name(), "a");
}

TEST(FileStreamCache, VerifyFindsAndRemovesDamagedAndStrayFiles) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  for (int i = 0; i < 8; ++i)
    cache.put("k" + std::to_string(i), code_of(200, "k" + std::to_string(i)));
  // Damage: a truncation, a bit flip, a misplaced copy, a foreign file in a shard, a stray file at
  // the top of entries/, a symlink in a shard, and a directory in a shard.
  const fs::path k0 = entry_file(dir.path(), "k0");
  fs::resize_file(k0, 30);
  const fs::path k1 = entry_file(dir.path(), "k1");
  auto b1 = read_bytes(k1);
  b1[b1.size() / 2] ^= std::byte{4};
  write_bytes(k1, b1);
  fs::copy_file(entry_file(dir.path(), "k3"), entry_file(dir.path(), "k2"),
                fs::copy_options::overwrite_existing);
  write_text(k0.parent_path() / "README", "not an entry");
  write_text(dir / "entries/stray", "stray");
  write_text(dir / "outside", "outside the cache");
  fs::create_symlink(dir / "outside", k0.parent_path() / "link");
  fs::create_directory(k0.parent_path() / "nested");

  cucore::cache_verify_report report = cache.verify(false);
  EXPECT_EQ(report.ok, 5u);       // k3..k7
  EXPECT_EQ(report.corrupt, 7u);  // k0, k1, k2 (misplaced), README, stray, link, nested
  EXPECT_EQ(report.entries, 12u);
  EXPECT_EQ(report.removed, 0u);
  EXPECT_TRUE(fs::exists(k0)) << "verify(false) removes nothing";

  report = cache.verify(true);
  EXPECT_EQ(report.corrupt, 7u);
  EXPECT_EQ(report.removed, 7u) << "the directory too";
  EXPECT_EQ(report.moved_aside, 0u);
  EXPECT_EQ(cache.stats().corrupt_dropped, 7u);
  EXPECT_TRUE(fs::exists(dir / "outside")) << "the symlink was removed, not its target";
  report = cache.verify(false);
  EXPECT_EQ(report.ok, 5u);
  EXPECT_EQ(report.corrupt, 0u) << "repaired: nothing to report on the next run";
  EXPECT_TRUE(report.notes.empty());
  for (int i = 3; i < 8; ++i) EXPECT_TRUE(cache.get("k" + std::to_string(i)));
}

// A directory tree where an entry belongs (a person's mkdir, an unpacked archive, another tool):
// verify(true) removes it with everything inside, without following a symbolic link out of the
// cache, and says so; the key then works and the next verify finds nothing.
TEST(FileStreamCache, VerifyRemovesADirectoryTreeWithoutFollowingLinks) {
  temp_dir dir;
  file_stream_program_cache cache(dir / "c", fast());
  cache.put("k", code_of(10));
  const fs::path file = entry_file(dir / "c", "k");
  fs::remove(file);
  fs::create_directories(file / "a/b/c");
  write_text(file / "a/b/c/deep", "deep");
  write_text(file / "top", "top");
  ASSERT_EQ(::mkfifo((file / "a/fifo").c_str(), 0644), 0);
  fs::create_directories(dir / "outside/keep");
  write_text(dir / "outside/keep/precious", "precious");
  fs::create_directory_symlink(dir / "outside", file / "a/link-to-dir");
  fs::create_symlink(dir / "outside/keep/precious", file / "a/b/link-to-file");

  cache_verify_report report = cache.verify(false);
  EXPECT_EQ(report.corrupt, 1u);
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_EQ(report.notes[0], file.string() + " is a directory, not an entry");
  EXPECT_TRUE(fs::is_directory(file)) << "verify(false) removes nothing";

  report = cache.verify(true);
  EXPECT_EQ(report.corrupt, 1u);
  EXPECT_EQ(report.removed, 1u);
  EXPECT_EQ(report.moved_aside, 0u);
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_TRUE(
      report.notes[0].starts_with("removed " + file.string() + " (a directory, not an entry"))
      << report.notes[0];
  EXPECT_FALSE(fs::exists(fs::symlink_status(file)));
  EXPECT_EQ(testing::read_text(dir / "outside/keep/precious"), "precious")
      << "nothing outside the cache was followed";
  EXPECT_TRUE(tmp_files(dir / "c").empty()) << "removed, not left in tmp/";
  EXPECT_EQ(cache.stats().corrupt_dropped, 1u);

  cache.put("k", code_of(11));
  EXPECT_EQ(cache.get("k"), code_of(11));
  report = cache.verify(true);
  EXPECT_EQ(report.corrupt, 0u);
  EXPECT_EQ(report.ok, 1u);
  EXPECT_TRUE(report.notes.empty());
}

// What cannot be removed (here a file inside a directory its owner cannot write) is moved out of
// the key's way into tmp/, and the note says where and how to remove it; verify retries it later.
TEST(FileStreamCache, VerifyMovesAsideWhatItCannotRemove) {
  temp_dir dir;
  const fs::path root = dir / "c";
  const fs::path file = entry_file(root, "k");
  if (running_as_root()) {
    ASSERT_EQ(::chown(dir.path().c_str(), 65534, 65534), 0);
  }
  const std::string result = run_as_nobody([&]() -> std::string {
    file_stream_program_cache cache(root, fast());
    cache.put("k", code_of(10));
    CHILD_EXPECT(fs::exists(file));
    fs::remove(file);
    fs::create_directories(file / "locked");
    write_text(file / "locked/stuck", "cannot be unlinked: its directory is not writable");
    write_text(file / "loose", "can go");
    CHILD_EXPECT(::chmod((file / "locked").c_str(), 0500) == 0);

    cache_verify_report report = cache.verify(true);
    auto notes = [&] {
      std::string all;
      for (const auto& n : report.notes) all += n + "\n";
      return all;
    };
    if (report.notes.size() != 1u) return "notes: " + notes();
    CHILD_EXPECT(report.corrupt == 1u);
    CHILD_EXPECT(report.removed == 0u);
    CHILD_EXPECT(report.moved_aside == 1u);
    const std::string& note = report.notes[0];
    CHILD_EXPECT(note.starts_with("moved " + file.string() +
                                  " (a directory, not an entry) aside to " +
                                  (root / "tmp/aside-").string()));
    CHILD_EXPECT(note.find("locked/stuck: Permission denied") != std::string::npos);
    CHILD_EXPECT(note.find("rm -rf " + (root / "tmp/aside-").string()) != std::string::npos);
    CHILD_EXPECT(!fs::exists(fs::symlink_status(file)));
    CHILD_EXPECT(cache.stats().corrupt_dropped == 1u);
    // The key works again.
    cache.put("k", code_of(11));
    CHILD_EXPECT(cache.get("k") == code_of(11));
    // The next verify has nothing corrupt, and says what is still left in tmp/.
    report = cache.verify(true);
    CHILD_EXPECT(report.corrupt == 0u);
    CHILD_EXPECT(report.notes.size() == 1u);
    CHILD_EXPECT(report.notes[0].find("set aside by an earlier repair") != std::string::npos);
    // Once it can be removed, verify removes it.
    for (const auto& p : fs::directory_iterator(root / "tmp")) {
      CHILD_EXPECT(::chmod((p.path() / "locked").c_str(), 0700) == 0);
    }
    report = cache.verify(true);
    CHILD_EXPECT(report.notes.empty());
    CHILD_EXPECT(tmp_files(root).empty());
    return "";
  });
  EXPECT_EQ(result, "");
}

TEST(FileStreamCache, ListReadsHeadersOnly) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("small",
            object_code(code_type::ptx, std::vector<std::byte>(10), "s", symbol_map{{"a", "b"}}));
  // 8 MiB: listed from a prefix of the file.
  cache.put("big", code_of(8 << 20, "big"));
  // A header longer than the first read (a large symbol map), and a payload beyond it.
  symbol_map many;
  for (int i = 0; i < 3000; ++i) many["expr<" + std::to_string(i) + ">"] = std::string(40, 'm');
  cache.put("many", object_code(code_type::cubin, std::vector<std::byte>(1 << 20), "many", many));
  cache.put("damaged", code_of(10));
  fs::resize_file(entry_file(dir.path(), "damaged"), 12);
  set_times(entry_file(dir.path(), "small"), 1000);

  auto list = cache.list();
  std::map<std::string, cache_entry_info> by_name;
  for (auto& info : list) by_name[info.name] = info;
  ASSERT_EQ(by_name.size(), 3u) << "the damaged entry is not listed";
  const auto& small = by_name.at("s");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(small.key.data()), small.key.size()),
            "small");
  EXPECT_EQ(small.type, code_type::ptx);
  EXPECT_EQ(small.symbol_count, 1u);
  EXPECT_EQ(small.payload_bytes, 10u);
  EXPECT_EQ(small.stored_bytes, fs::file_size(entry_file(dir.path(), "small")));
  ASSERT_TRUE(small.last_used);
  const auto age = std::chrono::system_clock::now() - *small.last_used;
  EXPECT_GT(age, std::chrono::seconds(990));
  EXPECT_LT(age, std::chrono::seconds(1010));
  EXPECT_EQ(by_name.at("big").payload_bytes, 8u << 20);
  EXPECT_EQ(by_name.at("many").symbol_count, 3000u);
  EXPECT_EQ(by_name.at("many").payload_bytes, 1u << 20);
}

// ---------------------------------------------------------------------------------------------
// Hostile directories

TEST(FileStreamCache, SymlinkAtAnEntryPathIsNotFollowed) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(10, "real"));
  const fs::path file = entry_file(dir.path(), "k");
  // A valid entry for "k" outside the cache, and a symlink to it where the entry should be.
  fs::rename(file, dir / "elsewhere");
  fs::create_symlink(dir / "elsewhere", file);
  log_capture logs;
  EXPECT_FALSE(cache.get("k")) << "O_NOFOLLOW: a symlink is never read through";
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(file))) << "the symlink was removed";
  EXPECT_TRUE(fs::exists(dir / "elsewhere")) << "its target was not touched";
  EXPECT_EQ(cache.stats().corrupt_dropped, 1u);
  EXPECT_EQ(logs.at(log_level::warning).size(), 1u);
  cache.put("k", code_of(10, "again"));
  EXPECT_EQ(cache.get("k")->name(), "again");
}

TEST(FileStreamCache, PutReplacesASymlinkInsteadOfWritingThroughIt) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(10));
  const fs::path file = entry_file(dir.path(), "k");
  write_text(dir / "victim", "precious");
  fs::remove(file);
  fs::create_symlink(dir / "victim", file);
  cache.put("k", code_of(11));
  EXPECT_EQ(read_bytes(dir / "victim").size(), 8u) << "the symlink's target is untouched";
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(file)));
  EXPECT_EQ(cache.get("k")->size(), 11u);
}

TEST(FileStreamCache, ScansDoNotFollowASymlinkedShard) {
  temp_dir dir;
  file_stream_program_cache cache(dir / "c", fast(1 << 20));
  cache.put("k", code_of(10));
  fs::create_directory(dir / "outside");
  write_text(dir / "outside/0123456789012345678901234567890123456789012345678901234567890a", "x");
  fs::create_directory_symlink(dir / "outside", dir / "c/entries/zz");
  EXPECT_EQ(cache.size(), 1u);
  cache.clear();
  cache.trim(0);
  EXPECT_EQ(
      fs::file_size(dir / "outside/0123456789012345678901234567890123456789012345678901234567890a"),
      1u)
      << "nothing outside the cache was removed";
  auto report = cache.verify(true);
  EXPECT_EQ(report.corrupt, 1u) << "the symlinked shard";
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(dir / "c/entries/zz")));
  EXPECT_TRUE(fs::exists(dir / "outside"));
}

TEST(FileStreamCache, FifoAtAnEntryPathDoesNotHang) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(10));
  const fs::path file = entry_file(dir.path(), "k");
  fs::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0);
  EXPECT_FALSE(cache.get("k"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(file))) << "pruned";
}

// A directory where an entry belongs is a miss that get() names, with the fix, once; it is not
// counted as a dropped entry (nothing was dropped). The put that follows the miss clears it and
// stores the entry: the key does not miss forever.
TEST(FileStreamCache, DirectoryAtAnEntryPathIsReplacedByThePut) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code_of(10));
  const fs::path file = entry_file(dir.path(), "k");
  fs::remove(file);
  fs::create_directories(file / "inside");
  write_text(file / "inside/file", "x");
  log_capture logs;
  EXPECT_FALSE(cache.get("k"));
  EXPECT_FALSE(cache.get("k"));
  EXPECT_TRUE(fs::is_directory(file / "inside")) << "a read does not remove it";
  EXPECT_EQ(cache.stats().corrupt_dropped, 0u) << "nothing was dropped";
  EXPECT_EQ(cache.stats().errors, 2u);
  ASSERT_EQ(logs.count(log_level::warning), 1u) << "warned once";
  const std::string warning = logs.at(log_level::warning)[0];
  EXPECT_NE(warning.find(file.string() + " is a directory, not an entry"), std::string::npos)
      << warning;
  EXPECT_NE(warning.find("cucore cache verify --cache " + dir.path().string()), std::string::npos)
      << warning;

  EXPECT_NO_THROW(cache.put("k", code_of(11)));
  EXPECT_EQ(cache.get("k"), code_of(11));
  EXPECT_EQ(cache.stats().corrupt_dropped, 1u);
  EXPECT_EQ(cache.stats().errors, 2u) << "the put did not fail";
  EXPECT_EQ(logs.count(log_level::warning, "removed " + file.string()), 1u);
  EXPECT_TRUE(tmp_files(dir.path()).empty());
  EXPECT_EQ(cache.verify(true).corrupt, 0u);
}

// A put whose directory cannot be cleared fails (per on_write_failure) with a message that names
// the path and says how to remove it; strict throws it.
TEST(FileStreamCache, PutNamesADirectoryItCannotClear) {
  temp_dir dir;
  const fs::path root = dir / "c";
  const fs::path file = entry_file(root, "k");
  if (running_as_root()) {
    ASSERT_EQ(::chown(dir.path().c_str(), 65534, 65534), 0);
  }
  const std::string result = run_as_nobody([&]() -> std::string {
    file_stream_cache_options strict = fast();
    strict.on_write_failure = write_failure_policy::strict;
    file_stream_program_cache cache(root, strict);
    cache.put("other", code_of(1));
    fs::create_directories(file / "locked");
    write_text(file / "locked/stuck", "x");
    CHILD_EXPECT(::chmod((file / "locked").c_str(), 0500) == 0);
    // The shard is not writable either: nothing can be moved or removed there.
    CHILD_EXPECT(::chmod(file.parent_path().c_str(), 0500) == 0);
    try {
      cache.put("k", code_of(2));
      return "the put did not throw";
    } catch (const error& e) {
      const std::string what = e.what();
      if (what.find("a directory, not an entry") == std::string::npos) return what;
      CHILD_EXPECT(what.find("could not move the new entry into " + file.string()) !=
                   std::string::npos);
      CHILD_EXPECT(what.find("a directory, not an entry") != std::string::npos);
      CHILD_EXPECT(what.find("rm -rf " + file.string()) != std::string::npos);
    }
    CHILD_EXPECT(cache.stats().corrupt_dropped == 0u);
    CHILD_EXPECT(::chmod(file.parent_path().c_str(), 0755) == 0);
    CHILD_EXPECT(::chmod((file / "locked").c_str(), 0755) == 0);
    return "";
  });
  EXPECT_EQ(result, "");
}

// Something that is not a directory where a shard directory belongs blocks every key of that
// shard: a put removes it and makes the shard.
TEST(FileStreamCache, PutClearsAFileWhereTheShardBelongs) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  const fs::path shard = entry_file(dir.path(), "k").parent_path();
  fs::create_directories(dir / "entries");
  write_text(shard, "not a shard");
  EXPECT_FALSE(cache.get("k"));
  cache.put("k", code_of(10));
  EXPECT_EQ(cache.get("k"), code_of(10));
  EXPECT_TRUE(fs::is_directory(fs::symlink_status(shard)));
  EXPECT_EQ(cache.stats().corrupt_dropped, 1u);
  EXPECT_EQ(cache.stats().errors, 0u);
}

// A drop is counted when something was dropped: a symlink get() cannot remove (its shard is not
// writable) is not.
TEST(FileStreamCache, GetCountsADropOnlyWhenItRemovedSomething) {
  temp_dir dir;
  const fs::path root = dir / "c";
  const fs::path file = entry_file(root, "k");
  if (running_as_root()) {
    ASSERT_EQ(::chown(dir.path().c_str(), 65534, 65534), 0);
  }
  const std::string result = run_as_nobody([&]() -> std::string {
    file_stream_program_cache cache(root, fast());
    cache.put("k", code_of(10));
    fs::remove(file);
    fs::create_symlink(root / "elsewhere", file);
    CHILD_EXPECT(::chmod(file.parent_path().c_str(), 0555) == 0);
    CHILD_EXPECT(!cache.get("k"));
    CHILD_EXPECT(fs::is_symlink(fs::symlink_status(file)));
    CHILD_EXPECT(cache.stats().corrupt_dropped == 0u);
    CHILD_EXPECT(cache.stats().errors == 1u);
    CHILD_EXPECT(::chmod(file.parent_path().c_str(), 0755) == 0);
    CHILD_EXPECT(!cache.get("k"));
    CHILD_EXPECT(!fs::exists(fs::symlink_status(file)));
    CHILD_EXPECT(cache.stats().corrupt_dropped == 1u);
    return "";
  });
  EXPECT_EQ(result, "");
}

TEST(FileStreamCache, SymlinkedSubdirectoryIsRefused) {
  temp_dir dir;
  fs::create_directories(dir / "c");
  fs::create_directory(dir / "real-entries");
  fs::create_directory_symlink(dir / "real-entries", dir / "c/entries");
  try {
    file_stream_program_cache cache(dir / "c", fast());
    FAIL() << "a symlinked entries/ was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
}

TEST(FileStreamCache, RootThatIsAFileIsRefused) {
  temp_dir dir;
  write_text(dir / "file", "x");
  EXPECT_THROW(file_stream_program_cache(dir / "file", fast()), invalid_argument);
}

TEST(FileStreamCache, OwnSymlinkToARootIsFollowed) {
  temp_dir dir;
  fs::create_directory(dir / "real");
  fs::create_directory_symlink(dir / "real", dir / "link");
  file_stream_program_cache cache(dir / "link", fast());
  cache.put("k", code_of(3));
  EXPECT_TRUE(fs::is_directory(dir / "real/entries"));
  EXPECT_TRUE(cache.get("k"));
}

TEST(FileStreamCache, SymlinkOwnedByAnotherUserIsRefused) {
  if (!running_as_root()) GTEST_SKIP() << "needs root to create a symlink owned by another user";
  temp_dir dir;
  fs::create_directory(dir / "real");
  fs::create_directory_symlink(dir / "real", dir / "link");
  ASSERT_EQ(::lchown((dir / "link").c_str(), 65534, 65534), 0);
  try {
    file_stream_program_cache cache(dir / "link", fast());
    FAIL() << "followed a symlink planted by another user";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("owned by another user"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "real/entries")) << "nothing created through it";
}

TEST(FileStreamCache, OtherUsersWorldWritableRootWithoutStickyIsRefused) {
  if (!running_as_root()) GTEST_SKIP() << "needs root to create a directory owned by another user";
  temp_dir dir;
  fs::create_directory(dir / "theirs");
  ASSERT_EQ(::chown((dir / "theirs").c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod((dir / "theirs").c_str(), 0777), 0);
  try {
    file_stream_program_cache cache(dir / "theirs", fast());
    FAIL() << "accepted a world-writable directory of another user";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("world-writable"), std::string::npos) << e.what();
  }
  // The sticky bit (like /tmp) does not make another user's directory ours: still refused.
  ASSERT_EQ(::chmod((dir / "theirs").c_str(), 01777), 0);
  EXPECT_THROW(file_stream_program_cache(dir / "theirs", fast()), invalid_argument);
}

TEST(FileStreamCache, OtherUsersCacheIsRefusedUnlessShared) {
  // A cache of another user (not world-writable) could hold anything that user planted: refused,
  // unless the reader opts in to a shared cache.
  if (!running_as_root()) GTEST_SKIP() << "needs root to create a directory owned by another user";
  temp_dir dir;
  {
    file_stream_program_cache cache(dir / "theirs", fast());
    cache.put("k", code_of(5));
  }
  for (const auto& p : fs::recursive_directory_iterator(dir / "theirs")) {
    ASSERT_EQ(::lchown(p.path().c_str(), 65534, 65534), 0);
  }
  ASSERT_EQ(::chown((dir / "theirs").c_str(), 65534, 65534), 0);
  try {
    file_stream_program_cache cache(dir / "theirs", fast());
    FAIL() << "accepted another user's cache";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to another user"), std::string::npos) << e.what();
  }
  file_stream_cache_options shared = fast();
  shared.access = cache_access::shared;
  file_stream_program_cache cache(dir / "theirs", shared);
  EXPECT_TRUE(cache.get("k"));
}

TEST(FileStreamCache, OtherUsersWorldWritableEntriesDirIsRefused) {
  if (!running_as_root()) GTEST_SKIP() << "needs root to create a directory owned by another user";
  temp_dir dir;
  fs::create_directories(dir / "c/entries");
  ASSERT_EQ(::chown((dir / "c/entries").c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod((dir / "c/entries").c_str(), 0777), 0);
  EXPECT_THROW(file_stream_program_cache(dir / "c", fast()), invalid_argument);
}

TEST(FileStreamCache, ReadOnlyCacheServesReadsAndDegradesWrites) {
  // Modes do not stop root: the body runs in a child that drops to nobody when we are root.
  temp_dir dir;
  const fs::path root = dir / "ro";
  {
    file_stream_program_cache cache(root, fast(1 << 20));
    cache.put("k", code_of(10, "stored"));
    set_times(entry_file(root, "k"), 100);
  }
  const fs::path entry = entry_file(root, "k");
  for (const auto& p : fs::recursive_directory_iterator(root)) {
    if (running_as_root()) ::lchown(p.path().c_str(), 65534, 65534);
  }
  if (running_as_root()) ::chown(root.c_str(), 65534, 65534);
  if (running_as_root()) ::chown(dir.path().c_str(), 65534, 65534);
  for (const auto& p : fs::recursive_directory_iterator(root)) {
    if (p.is_directory()) ::chmod(p.path().c_str(), 0500);
  }
  ::chmod(root.c_str(), 0500);

  const std::string result = run_as_nobody([&]() -> std::string {
    log_capture logs;
    file_stream_program_cache cache(root, fast(1 << 20));
    auto hit = cache.get("k");
    CHILD_EXPECT(hit && hit->name() == "stored");
    cache.put("new", code_of(10));  // warn: no exception
    CHILD_EXPECT(!cache.get("new"));
    CHILD_EXPECT(cache.stats().errors == 1);
    CHILD_EXPECT(logs.at(log_level::warning).size() == 1);
    CHILD_EXPECT(logs.at(log_level::warning)[0].find("Permission denied") != std::string::npos);
    CHILD_EXPECT(!cache.erase("k"));  // cannot remove: false, and counted
    CHILD_EXPECT(cache.get("k"));
    file_stream_cache_options strict = fast();
    strict.on_write_failure = write_failure_policy::strict;
    file_stream_program_cache strict_cache(root, strict);
    try {
      strict_cache.put("new", code_of(10));
      return "strict put did not throw";
    } catch (const error& e) {
      CHILD_EXPECT(std::string(e.what()).find(root.string()) != std::string::npos);
    }
    return "";
  });
  EXPECT_EQ(result, "");
}

TEST(FileStreamCache, WriteFailureWarnLogsAndCarriesOn) {
  temp_dir dir;
  log_capture logs;
  file_stream_program_cache cache(dir.path(), fast());
  // Make staging impossible, even for root: tmp/ is a regular file.
  fs::remove_all(dir / "tmp");
  write_text(dir / "tmp", "in the way");
  EXPECT_NO_THROW(cache.put("k", code_of(10)));
  EXPECT_FALSE(cache.get("k"));
  EXPECT_EQ(cache.stats().errors, 1u);
  EXPECT_EQ(cache.stats().puts, 0u);
  auto warnings = logs.at(log_level::warning);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find((dir / "tmp").string()), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("Not a directory"), std::string::npos)
      << "errno text: " << warnings[0];
  cache.put("k2", code_of(10));
  EXPECT_EQ(cache.stats().errors, 2u);
  EXPECT_EQ(logs.at(log_level::warning).size(), 1u) << "the same failure again: debug level";
  EXPECT_EQ(logs.at(log_level::debug).size(), 1u);
}

TEST(FileStreamCache, WriteFailureStrictThrows) {
  temp_dir dir;
  file_stream_cache_options options = fast();
  options.on_write_failure = write_failure_policy::strict;
  file_stream_program_cache cache(dir.path(), options);
  fs::remove_all(dir / "tmp");
  write_text(dir / "tmp", "in the way");
  try {
    cache.put("k", code_of(10));
    FAIL() << "strict put did not throw";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("tmp"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.stats().errors, 1u);
}

TEST(FileStreamCache, UncreatableRootWarnsOrThrows) {
  temp_dir dir;
  write_text(dir / "file", "x");
  const fs::path root = dir / "file/cache";  // below a regular file: ENOTDIR
  {
    log_capture logs;
    file_stream_program_cache cache(root, fast());
    EXPECT_EQ(logs.at(log_level::warning).size(), 1u);
    EXPECT_FALSE(cache.get("k"));
    cache.put("k", code_of(1));
    EXPECT_EQ(cache.stats().errors, 2u);
  }
  file_stream_cache_options strict = fast();
  strict.on_write_failure = write_failure_policy::strict;
  EXPECT_THROW(file_stream_program_cache(root, strict), error);
}

TEST(FileStreamCache, DiskFullLeavesNoTempFile) {
  // RLIMIT_FSIZE makes write(2) fail with EFBIG past the limit, like a full disk (ENOSPC) would:
  // a partial temp file exists at the moment of failure and must be removed.
  temp_dir dir;
  { file_stream_program_cache cache(dir.path(), fast()); }
  const std::string result = run_in_child([&]() -> std::string {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{16 * 1024, 16 * 1024};
    CHILD_EXPECT(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
    log_capture logs;
    file_stream_program_cache cache(dir.path(), fast());
    cache.put("small", code_of(100));
    cache.put("big", code_of(100 * 1024));
    CHILD_EXPECT(cache.get("small"));
    CHILD_EXPECT(!cache.get("big"));
    CHILD_EXPECT(cache.stats().errors == 1);
    CHILD_EXPECT(logs.at(log_level::warning).size() == 1);
    CHILD_EXPECT(logs.at(log_level::warning)[0].find("File too large") != std::string::npos);
    CHILD_EXPECT(tmp_files(dir.path()).empty());
    file_stream_cache_options strict = fast();
    strict.on_write_failure = write_failure_policy::strict;
    file_stream_program_cache strict_cache(dir.path(), strict);
    try {
      strict_cache.put("big", code_of(100 * 1024));
      return "strict put did not throw";
    } catch (const error&) {
    }
    CHILD_EXPECT(tmp_files(dir.path()).empty());
    return "";
  });
  EXPECT_EQ(result, "");
}

// ---------------------------------------------------------------------------------------------
// Concurrency: threads of one process, and processes

TEST(FileStreamCache, ThreadsShareOneCache) {
  temp_dir dir;
  // A cap of about a third of the working set: eviction runs in every thread.
  file_stream_program_cache cache(dir.path(), fast(512 * 1024));
  const auto results = testing::run_workload_in_threads(cache, 6, 100, 48, 300);
  testing::expect_clean(results);
  EXPECT_GT(cache.stats().evictions, 0u);
  EXPECT_EQ(cache.stats().errors, 0u);
  EXPECT_EQ(cache.stats().corrupt_dropped, 0u);
}

TEST(FileStreamCache, ProcessesWritingOneKeyLeaveOneWholeValue) {
  temp_dir dir;
  { file_stream_program_cache cache(dir.path(), fast()); }
  auto reports = run_children(6, [&](int i) -> std::string {
    file_stream_program_cache cache(dir.path());
    for (int j = 0; j < 20; ++j)
      cache.put("shared", workload_value(0, static_cast<std::uint32_t>(i)));
    return cache.stats().errors == 0 ? "" : "errors";
  });
  for (const auto& r : reports) EXPECT_EQ(r, "");
  file_stream_program_cache cache(dir.path(), fast());
  auto hit = cache.get("shared");
  ASSERT_TRUE(hit);
  EXPECT_TRUE(testing::is_valid_workload_value(0, *hit)) << "one writer's value, whole";
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_TRUE(tmp_files(dir.path()).empty());
}

TEST(FileStreamCache, ProcessesWritingDistinctKeysAllSurvive) {
  temp_dir dir;
  { file_stream_program_cache cache(dir.path(), fast()); }
  auto reports = run_children(4, [&](int i) -> std::string {
    file_stream_program_cache cache(dir.path(), fast());
    for (int j = 0; j < 25; ++j) {
      const auto index = static_cast<std::uint32_t>(i * 100 + j);
      cache.put(workload_key(index), workload_value(index, 1));
    }
    return "";
  });
  for (const auto& r : reports) EXPECT_EQ(r, "");
  file_stream_program_cache cache(dir.path(), fast());
  EXPECT_EQ(cache.size(), 100u);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 25; ++j) {
      const auto index = static_cast<std::uint32_t>(i * 100 + j);
      auto hit = cache.get(workload_key(index));
      ASSERT_TRUE(hit) << index;
      EXPECT_EQ(*hit, workload_value(index, 1));
    }
  }
}

TEST(FileStreamCache, ReaderProcessNeverSeesATornFile) {
  temp_dir dir;
  {
    file_stream_program_cache cache(dir.path(), fast());
    cache.put(workload_key(0), workload_value(0, 0));
  }
  auto reports = run_children(2, [&](int role) -> std::string {
    file_stream_program_cache cache(dir.path(), fast());
    if (role == 0) {  // writer: rewrites key 0 and churns others
      for (std::uint32_t j = 0; j < 200; ++j) {
        cache.put(workload_key(0), workload_value(0, j % 4));
        cache.put(workload_key(1 + j % 20), workload_value(1 + j % 20, j));
      }
      return "";
    }
    int hits = 0;
    for (int j = 0; j < 200; ++j) {
      auto hit = cache.get(workload_key(0));
      if (!hit) return "miss on a key that is always present";
      if (!testing::is_valid_workload_value(0, *hit)) return "wrong value";
      ++hits;
    }
    return hits == 200 && cache.stats().corrupt_dropped == 0 ? "" : "torn read";
  });
  for (const auto& r : reports) EXPECT_EQ(r, "");
}

}  // namespace
}  // namespace cucore
