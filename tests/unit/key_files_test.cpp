// The key's own files beside a persistent cache (src/cache/key_files.hpp; docs/cache-keys.md,
// "The key's own files"): the compiler version memo, the header digest memo and the walk
// manifests are read as untrusted input. A FIFO, a link to /dev/zero or a huge file in their place
// costs nothing but a walk; a record planted by anyone but this user never reaches a key; a
// damaged version memo is ignored and rewritten; temp files a killed writer left are swept.
//
// Keys are derived in forked children under alarm(): a regression (an open that blocks on a
// FIFO, a read without a cap) kills the child with SIGALRM (or out of memory: the children that
// meet /dev/zero run under RLIMIT_DATA) and fails the test instead of hanging it. No NVRTC
// compile: keys only (the first child loads NVRTC once for its version; the others read the
// version memo).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cache/key_files.hpp"
#include "cache/posix_file.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/sqlite.hpp"
#include "key/compiler_version_memo.hpp"
#include "key/header_memo.hpp"
#include "key/include_tracking.hpp"
#include "key/memoized_probes.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace cucore::detail {
namespace {

namespace fs = std::filesystem;
using testing::run_in_child;
using testing::temp_dir;

// A toolkit header that includes another (host_defines.h): its memo record can omit an include.
constexpr const char* kCode =
    "#include <vector_types.h>\nextern \"C\" __global__ void k(float4* p) { p[0].x = 1; }\n";

program_cache_key_inputs key_inputs() {
  program_cache_key_inputs in;
  in.code = kCode;
  in.options.arch = testing::kArch;
  in.target = code_type::cubin;
  return in;
}

// Reports a key as "key:HEX"; anything else is a failure.
constexpr std::string_view kKeyTag = "key:";

// Limits the child's data (heap and private mappings) to 1 GiB over what it has now, so that a
// read without a cap fails fast instead of taking the machine's memory. Not under the
// sanitizers, whose shadow memory is such a mapping.
void limit_memory() {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  std::ifstream status("/proc/self/status");
  std::uint64_t data_kb = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmData:", 0) == 0) data_kb = std::stoull(line.substr(7));
  }
  const rlim_t limit = static_cast<rlim_t>((data_kb << 10) + (std::uint64_t{1} << 30));
  const struct rlimit r { limit, limit };
  ::setrlimit(RLIMIT_DATA, &r);
#endif
}

// The key of key_inputs() in a fresh child (fresh in-process memos) within `seconds`: with the
// probes of a directory cache at `root` (its version memo, digest memo and manifests), or with
// no persistent memo at all when `root` is empty. The report also says whether the walk was
// reused from a manifest ("reused").
std::string key_in_child(const fs::path& root, bool limited = false, unsigned seconds = 30) {
  return run_in_child([&]() -> std::string {
    ::alarm(seconds);
    if (limited) limit_memory();
    const compiler_probes& probes =
        root.empty() ? installed_compiler_probes() : probes_with_memo(root / "compiler-versions");
    const program_cache_key key = make_program_cache_key(key_inputs(), probes);
    return std::string(kKeyTag) + key.hex() + (key.includes().reused_walk ? " reused" : "");
  });
}

std::string key_of(const std::string& report) {
  if (report.rfind(kKeyTag, 0) != 0) return "failed: " + report;
  return report.substr(kKeyTag.size(), 64);
}

// Every manifest file under the digest memo's manifest directory.
std::vector<fs::path> manifests_under(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file() && it->path().filename().string().size() == 64) {
      out.push_back(it->path());
    }
  }
  return out;
}

void replace_with_fifo(const fs::path& p) {
  fs::remove(p);
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0) << p;
}

void replace_with_link(const fs::path& p, const fs::path& target) {
  fs::remove(p);
  fs::create_symlink(target, p);
}

// A sparse file of `bytes` (no disk used; reading it all would take minutes and the memory).
void replace_with_huge(const fs::path& p, std::uint64_t bytes) {
  fs::remove(p);
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
  ::close(fd);
}

// Sets a file's mtime `seconds` into the past (a temp file a writer abandoned that long ago).
void age(const fs::path& p, int seconds) {
  const auto now = posix::now_realtime();
  const struct timespec times[2] = {now, {now.tv_sec - seconds, now.tv_nsec}};
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << p;
}

// ---------------------------------------------------------------------------------------------
// The reader

TEST(KeyFiles, ReadSmallFileChecksBeforeReading) {
  temp_dir dir;
  const auto read = [](const fs::path& p, std::uint64_t cap, std::string& out, bool accept = true) {
    return posix::read_small_file(
        AT_FDCWD, p.c_str(), cap, [accept](const struct stat&) { return accept; }, out);
  };
  std::string out;
  testing::write_text(dir / "small", "twelve bytes");
  EXPECT_FALSE(read(dir / "small", 12, out));
  EXPECT_EQ(out, "twelve bytes");
  EXPECT_EQ(read(dir / "small", 11, out), std::errc::file_too_large);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(read(dir / "small", 12, out, false), std::errc::permission_denied);
  EXPECT_TRUE(out.empty());

  // A FIFO opens at once (O_NONBLOCK) and is refused as what it is.
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_EQ(read(dir / "fifo", 1 << 20, out), std::errc::invalid_argument);
  // A link is not followed, whatever it points to.
  fs::create_symlink("/dev/zero", dir / "zero");
  EXPECT_EQ(read(dir / "zero", 1 << 20, out), std::errc::too_many_symbolic_link_levels);
  fs::create_symlink(dir / "small", dir / "link");
  EXPECT_EQ(read(dir / "link", 1 << 20, out), std::errc::too_many_symbolic_link_levels);
  // A device (as root could make one in a cache) is not a regular file.
  EXPECT_EQ(read("/dev/zero", 1 << 20, out), std::errc::invalid_argument);
  EXPECT_EQ(read(dir.path(), 1 << 20, out), std::errc::invalid_argument);
  // A huge file is refused by its size before a byte is read.
  replace_with_huge(dir / "huge", std::uint64_t{1} << 40);
  EXPECT_EQ(read(dir / "huge", 1 << 20, out), std::errc::file_too_large);
  EXPECT_TRUE(out.empty());
}

// ---------------------------------------------------------------------------------------------
// What is not a key file in a key file's place: the key is derived as without it, promptly.

TEST(KeyFiles, FifosLinksAndHugeFilesInPlaceOfTheKeyFilesCostOnlyAWalk) {
  temp_dir root;
  const std::string honest = key_of(key_in_child({}));
  ASSERT_EQ(honest.size(), 64u) << honest;
  // A first process writes the three files (the toolkit's headers have long settled: the walk
  // leaves a manifest).
  ASSERT_EQ(key_of(key_in_child(root.path())), honest);
  const fs::path versions = root / "compiler-versions";
  const fs::path memo = root / "header-digests";
  ASSERT_TRUE(fs::is_regular_file(versions));
  ASSERT_TRUE(fs::is_regular_file(memo));
  auto manifests = manifests_under(root / "header-digests.manifests");
  ASSERT_EQ(manifests.size(), 1u);
  const fs::path manifest = manifests[0];
  EXPECT_EQ(key_in_child(root.path()), "key:" + honest + " reused");

  struct planted {
    const char* what;
    std::function<void(const fs::path&)> plant;
  };
  const std::vector<planted> cases = {
      {"a FIFO", [](const fs::path& p) { replace_with_fifo(p); }},
      {"a link to /dev/zero", [](const fs::path& p) { replace_with_link(p, "/dev/zero"); }},
      {"a 1 TiB file", [](const fs::path& p) { replace_with_huge(p, std::uint64_t{1} << 40); }},
  };
  for (const auto& c : cases) {
    for (const fs::path& file : {versions, memo, manifest}) {
      SCOPED_TRACE(std::string(c.what) + " at " + file.string());
      // A walk reused from the manifest reads no digest memo: without one, it does.
      if (file == memo) fs::remove(manifest);
      c.plant(file);
      const auto started = std::chrono::steady_clock::now();
      const std::string report = key_in_child(root.path(), /*limited=*/true);
      EXPECT_EQ(key_of(report), honest) << report;
      EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
      // Gone, the next process writes it again (the version memo after its probe, the digest
      // memo after a walk that hashed, the manifest after a walk).
      fs::remove(file);
      if (file == memo) fs::remove(manifest);
      ASSERT_EQ(key_of(key_in_child(root.path())), honest);
      ASSERT_TRUE(fs::is_regular_file(file));
    }
  }
  // The manifest comes back too, once it is gone.
  ASSERT_EQ(key_of(key_in_child(root.path())), honest);
  EXPECT_EQ(manifests_under(root / "header-digests.manifests").size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// A planted digest memo record never reaches a key.

// The path the walk records for header `name` (its spelled path: "header PATH (...)"). In a
// child: a walk in this process would leave a manifest in its memory that the children would
// inherit and reuse instead of reading any memo.
std::string walked_path_of(const std::string& name) {
  const std::string report = run_in_child([&]() -> std::string {
    const program_cache_key key = make_program_cache_key(key_inputs(), installed_compiler_probes());
    for (const key_field& f : key.explain()) {
      if (f.label != "header") continue;
      const std::string path = f.payload.substr(0, f.payload.find(" ("));
      if (path.ends_with("/" + name)) return "path:" + path;
    }
    return "no header " + name;
  });
  return report.rfind("path:", 0) == 0 ? report.substr(5) : std::string();
}

// Writes, at `file`, a memo that holds one record for the header at `path`: its identity now,
// and the scan of other text (a stale digest, and an include list that omits its includes), as
// another user with write access to the directory could.
void plant_stale_record(const fs::path& file, const std::string& path) {
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
  fs::remove(file);
  header_digest_memo planted(file);
  planted.remember(path, identity_of(st), make_scanned("/* not what the file holds */\n"));
  planted.save();
  ASSERT_TRUE(fs::is_regular_file(file));
  ASSERT_TRUE(header_digest_memo(file).lookup(path, identity_of(st))) << "a memo that reads back";
}

TEST(KeyFiles, AMemoRecordPlantedByAnotherUserIsIgnored) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give files to another uid";
  const std::string header = walked_path_of("vector_types.h");
  ASSERT_FALSE(header.empty());
  const std::string honest = key_of(key_in_child({}));
  ASSERT_EQ(honest.size(), 64u) << honest;
  constexpr uid_t kOther = 54321;

  // A private cache (only this user writes the directory): the memo is "header-digests".
  {
    temp_dir root;
    ASSERT_EQ(header_memo_file_beside(root / "compiler-versions"), root / "header-digests");
    plant_stale_record(root / "header-digests", header);
    // Trusted (this user's own, writable by nobody else), the record is used: the plant works.
    const std::string poisoned = key_of(key_in_child(root.path()));
    ASSERT_EQ(poisoned.size(), 64u) << poisoned;
    EXPECT_NE(poisoned, honest) << "the planted record did not take: the test shows nothing";
    // Another user's, or writable by the group: ignored.
    for (const bool by_group : {false, true}) {
      SCOPED_TRACE(by_group ? "group-writable" : "another user's");
      fs::remove_all(root / "header-digests.manifests");  // the poisoned walk's, this user's
      plant_stale_record(root / "header-digests", header);
      if (by_group) {
        ASSERT_EQ(::chmod((root / "header-digests").c_str(), 0660), 0);
      } else {
        ASSERT_EQ(::chown((root / "header-digests").c_str(), kOther, kOther), 0);
      }
      EXPECT_EQ(key_of(key_in_child(root.path())), honest);
      // Nor does the manifest the walk left carry it: a fresh process reuses it, honestly.
      EXPECT_EQ(key_in_child(root.path()), "key:" + honest + " reused");
    }
  }

  // A cache shared by a group (its directory group-writable): each user has a memo of its own,
  // and another member's file at that name is ignored.
  {
    temp_dir root;
    ASSERT_EQ(::chmod(root.path().c_str(), 02775), 0);
    const fs::path own = root / ("header-digests." + std::to_string(::geteuid()));
    ASSERT_EQ(header_memo_file_beside(root / "compiler-versions"), own);
    // The name every user used to share, planted: not read at all.
    plant_stale_record(root / "header-digests", header);
    ASSERT_EQ(::chown((root / "header-digests").c_str(), kOther, kOther), 0);
    // This user's name, planted by another member of the group.
    plant_stale_record(own, header);
    ASSERT_EQ(::chown(own.c_str(), kOther, kOther), 0);
    ASSERT_EQ(::chmod(own.c_str(), 0664), 0);
    EXPECT_EQ(key_of(key_in_child(root.path())), honest);
    EXPECT_EQ(key_in_child(root.path()), "key:" + honest + " reused");
    // The walk's own memo replaced the planted one.
    struct stat st {};
    ASSERT_EQ(::stat(own.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, ::geteuid());
    EXPECT_EQ(st.st_mode & 077, 0u);
  }
}

// ---------------------------------------------------------------------------------------------
// The compiler version memo

// A file standing in for a compiler library (its identity is all the memo looks at).
file_identity library_at(const fs::path& p) {
  auto id = identify_file(fs::canonical(p).string());
  if (!id) std::abort();
  return *id;
}

TEST(KeyFiles, VersionMemoIsChecksummedAndKeyedByTheWholeIdentity) {
  temp_dir dir;
  const fs::path lib = dir / "libfake.so";
  testing::write_text(lib, "a library");
  const fs::path file = dir / "compiler-versions";
  compiler_version_memo(file).remember("nvrtc", library_at(lib), "13.0;release=x");
  EXPECT_EQ(compiler_version_memo(file).lookup("nvrtc", library_at(lib)), "13.0;release=x");

  // Any damaged byte: ignored (a probe runs again), and the next remember writes a valid file.
  std::string bytes = testing::read_text(file);
  for (std::size_t at : {std::size_t{0}, bytes.size() / 2, bytes.size() - 1}) {
    std::string damaged = bytes;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x20);
    testing::write_text(file, damaged);
    EXPECT_FALSE(compiler_version_memo(file).lookup("nvrtc", library_at(lib))) << at;
  }
  testing::write_text(file, bytes.substr(0, bytes.size() - 1));
  EXPECT_FALSE(compiler_version_memo(file).lookup("nvrtc", library_at(lib)));
  // The format before checksums (text), with a version for this very file: ignored.
  const file_identity id = library_at(lib);
  testing::write_text(file, "# cucore compiler versions v1\nnvrtc\t" + id.path + "\t" +
                                std::to_string(id.inode) + "\t" + std::to_string(id.size) + "\t" +
                                std::to_string(id.mtime_ns) + "\t13.0;release=x\n");
  EXPECT_FALSE(compiler_version_memo(file).lookup("nvrtc", library_at(lib)));
  compiler_version_memo(file).remember("nvrtc", library_at(lib), "13.0;release=y");
  EXPECT_EQ(compiler_version_memo(file).lookup("nvrtc", library_at(lib)), "13.0;release=y");

  // The library rewritten in place with the same size and mtime (restored): ctime tells.
  struct stat before {};
  ASSERT_EQ(::stat(lib.c_str(), &before), 0);
  testing::write_text(lib, "b library");
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, lib.c_str(), times, 0), 0);
  const file_identity rewritten = library_at(lib);
  ASSERT_EQ(rewritten.inode, id.inode);
  ASSERT_EQ(rewritten.size, id.size);
  ASSERT_EQ(rewritten.mtime_ns, id.mtime_ns);
  EXPECT_FALSE(compiler_version_memo(file).lookup("nvrtc", rewritten));

  // Records other processes wrote meanwhile survive a remember.
  const fs::path other = dir / "libother.so";
  testing::write_text(other, "another library");
  compiler_version_memo first(file);
  (void)first.lookup("nvrtc", rewritten);  // loaded before the other process writes
  compiler_version_memo(file).remember("nvvm", library_at(other), "lib=2.0");
  first.remember("nvrtc", rewritten, "13.0;release=z");
  EXPECT_EQ(compiler_version_memo(file).lookup("nvvm", library_at(other)), "lib=2.0");
  EXPECT_EQ(compiler_version_memo(file).lookup("nvrtc", rewritten), "13.0;release=z");

  // Another user's file in a directory only this user writes: ignored.
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(file.c_str(), 54321, 54321), 0);
    EXPECT_FALSE(compiler_version_memo(file).lookup("nvrtc", rewritten));
  }
}

// ---------------------------------------------------------------------------------------------
// Temp files a killed writer left

struct temps {
  std::vector<fs::path> stale;  // must go
  std::vector<fs::path> kept;   // must stay: young, or not a key file's
};

// Leaves, beside a version memo `versions`, what writers killed between write and rename leave
// (an hour old), and what a live writer or someone else has there.
temps leave_temps(const fs::path& versions) {
  const fs::path dir = versions.parent_path();
  const std::string base = versions.filename().string();  // ...compiler-versions
  const std::string memo = header_memo_file_beside(versions).filename().string();
  const fs::path shard = dir / (memo + ".manifests") / "ab";
  fs::create_directories(shard);
  ::chmod(shard.parent_path().c_str(), 0700);
  ::chmod(shard.c_str(), 0700);
  temps t;
  const std::string hex64(64, 'a');
  t.stale = {dir / (base + ".tmp-Ab3dE1"), dir / (memo + ".tmp-x0Y1z2"),
             dir / (base.substr(0, base.size() - 17) + "header-digests.1000.tmp-QwErTy"),
             shard / (hex64 + ".tmp-abcdef")};
  t.kept = {dir / (memo + ".tmp-young1"), dir / "notes.tmp-abcdef", shard / hex64};
  for (const auto& p : t.stale) {
    testing::write_text(p, "partial");
    age(p, 3600);
  }
  for (const auto& p : t.kept) testing::write_text(p, "keep");
  age(t.kept[1], 3600);
  age(t.kept[2], 3600);
  return t;
}

void expect_swept(const temps& t) {
  for (const auto& p : t.stale) EXPECT_FALSE(fs::exists(p)) << p;
  for (const auto& p : t.kept) EXPECT_TRUE(fs::exists(p)) << p;
}

TEST(KeyFiles, TempFilesAreSweptByVerifyClearAndWrites) {
  temp_dir dir;
  file_stream_cache_options o;
  o.fsync = false;
  const fs::path root = dir / "cache";
  file_stream_program_cache cache(root, o);
  const fs::path versions = *cache.compiler_version_memo();
  {
    SCOPED_TRACE("directory cache: verify");
    const temps t = leave_temps(versions);
    (void)cache.verify(/*remove_bad=*/true);
    expect_swept(t);
  }
  {
    SCOPED_TRACE("directory cache: clear");
    const temps t = leave_temps(versions);
    cache.clear();
    expect_swept(t);
  }
  {
    SCOPED_TRACE("directory cache: open");
    const temps t = leave_temps(versions);
    file_stream_program_cache again(root, o);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_FALSE(fs::exists(t.stale[i])) << t.stale[i];
    for (std::size_t i = 0; i < 2; ++i) EXPECT_TRUE(fs::exists(t.kept[i])) << t.kept[i];
  }
  {
    SCOPED_TRACE("a digest memo's save");
    const temps t = leave_temps(versions);
    header_digest_memo memo(header_memo_file_beside(versions));
    memo.remember("/nonexistent/h.h", header_identity{1, 2, 3, 4, 5}, make_scanned("int x;\n"));
    memo.save();
    for (std::size_t i = 0; i < 3; ++i) EXPECT_FALSE(fs::exists(t.stale[i])) << t.stale[i];
    for (std::size_t i = 0; i < 2; ++i) EXPECT_TRUE(fs::exists(t.kept[i])) << t.kept[i];
  }
  {
    SCOPED_TRACE("a version memo's write");
    const temps t = leave_temps(versions);
    testing::write_text(dir / "libfake.so", "x");
    compiler_version_memo(versions).remember("nvrtc", library_at(dir / "libfake.so"), "13.0");
    for (std::size_t i = 0; i < 3; ++i) EXPECT_FALSE(fs::exists(t.stale[i])) << t.stale[i];
  }
  sqlite_program_cache db(dir / "c.db");
  const fs::path db_versions = *db.compiler_version_memo();
  {
    SCOPED_TRACE("sqlite cache: verify");
    const temps t = leave_temps(db_versions);
    (void)db.verify(/*remove_bad=*/true);
    expect_swept(t);
  }
  {
    SCOPED_TRACE("sqlite cache: clear");
    const temps t = leave_temps(db_versions);
    db.clear();
    expect_swept(t);
  }
}

}  // namespace
}  // namespace cucore::detail
