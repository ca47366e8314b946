// Persistent walk manifests (src/key/include_tracking.cpp; docs/cache-keys.md, "Speed: the walk's
// manifest"): a fresh process of the cucore tool (CUCORE_CLI_PATH) reuses the include walk that an
// earlier process left beside a directory cache's header digest memo, and never one that a stat
// no longer answers the same for. Real files, real processes; one test compiles with NVRTC.
//
// How a test tells a reused walk from a fresh one: it deletes the digest memo first. A process
// that walks must then read and hash every header ("hashed" > 0 in the --json "headers" object);
// one that reuses the manifest reads none ("hashed": 0, "stat_fast_path": true). Whether the
// result is right: the key equals the one `--cache none` gives (no persistent memo, so no
// manifest: a plain walk).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using testing::describe;
using testing::finish;
using testing::read_text;
using testing::run_result;
using testing::temp_dir;
using testing::write_text;

// The bounds of one shard directory of manifests (include_tracking.cpp: kManifestShardFiles,
// kManifestShardBytes).
constexpr std::size_t kShardFiles = 8;
constexpr std::uintmax_t kShardBytes = 512 * 1024;

// Headers a walk reads must be older than this (include_tracking.cpp's kSettleNs, 2 s, plus a
// margin) for it to leave a manifest.
void wait_until_settled() {
  std::this_thread::sleep_for(std::chrono::milliseconds(2300));
}

// A number or boolean field of the tool's one-line JSON ("name":VALUE); "" when absent.
std::string json_field(const std::string& json, const std::string& name) {
  const std::regex pattern("\"" + name + "\":\\s*(\"[^\"]*\"|[0-9]+|true|false)");
  std::smatch m;
  if (!std::regex_search(json, m, pattern)) return {};
  std::string value = m[1];
  if (!value.empty() && value.front() == '"') value = value.substr(1, value.size() - 2);
  return value;
}

class IncludeManifest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef CUCORE_CLI_PATH
    GTEST_SKIP() << "the cucore tool is not built (CUCORE_BUILD_TOOLS=OFF)";
#endif
  }

  // A child running `cucore args...` in `cwd`, stdout and stderr to files; CUCORE_CACHE_DIR is a
  // directory of the test (the default cache is never the user's).
  using child = testing::started_run;

  child start(const fs::path& cwd, const std::vector<std::string>& args) {
    const std::vector<std::string> env = testing::environment_with(
        {}, {"CUCORE_CACHE_DIR=" + (captures_ / "default-cache").string()});
    return runs_.start(args, cwd, &env);
  }

  run_result run(const fs::path& cwd, const std::vector<std::string>& args) {
    return finish(start(cwd, args));
  }

  temp_dir captures_;
#ifdef CUCORE_CLI_PATH
  testing::captured_runs runs_{CUCORE_CLI_PATH, captures_.path()};
#else
  testing::captured_runs runs_{"cucore", captures_.path()};
#endif
};

// One project: a kernel in `work` that includes through -I A -I B (A empty at first), with a
// directory cache of its own.
//   #include <h.h>        B/h.h (A/h.h absent: a candidate before it)
//   #include <foo>        absent everywhere: A/foo, A/foo.stdh, B/foo, B/foo.stdh probed
//   #include "link.h"     B/link.h -> target1.h (./link.h and A/link.h absent)
//   __has_include(<gone.h>) then #include <gone.h>: B/gone.h
struct project {
  temp_dir work;
  fs::path cache() const { return work / "cache"; }
  fs::path memo() const { return cache() / "header-digests"; }
  fs::path manifests() const { return cache() / "header-digests.manifests"; }

  project() {
    fs::create_directories(work / "A");
    fs::create_directories(work / "B");
    write_text(work / "k.cu",
               "#include <h.h>\n"
               "#include <foo>\n"
               "#include \"link.h\"\n"
               "#if __has_include(<gone.h>)\n"
               "#include <gone.h>\n"
               "#endif\n"
               "__global__ void k(int* p) { *p = VALUE + GONE + TARGET; }\n");
    write_text(work / "B/h.h", "#define VALUE 1\n");
    write_text(work / "B/gone.h", "#define GONE 0\n");
    write_text(work / "B/target1.h", "#define TARGET 1\n");
    write_text(work / "B/target2.h", "#define TARGET 22\n");
    fs::create_symlink("target1.h", work / "B/link.h");
  }

  std::vector<std::string> key_args(const std::string& cache_spec,
                                    const std::string& file = "k.cu") const {
    return {"key",    file,    "-I",     "A",       "-I",      "B", "--no-toolkit-include",
            "--arch", "sm_90", "--json", "--cache", cache_spec};
  }

  // The manifest files (not temp files) in the cache's manifest directory.
  std::vector<fs::path> manifest_files() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(manifests(), ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file()) out.push_back(it->path());
    }
    return out;
  }

  void forget_memo() const {
    std::error_code ec;
    fs::remove(memo(), ec);
  }
};

struct key_result {
  std::string key;
  std::string hashed;
  std::string tracked;
  std::string stat_fast_path;
};

class IncludeManifestKeys : public IncludeManifest {
 protected:
  key_result key(const project& p, const std::string& cache_spec,
                 const std::string& file = "k.cu") {
    const run_result r = run(p.work.path(), p.key_args(cache_spec, file));
    EXPECT_EQ(r.status, 0) << describe(r);
    return {json_field(r.out, "key"), json_field(r.out, "hashed"), json_field(r.out, "tracked"),
            json_field(r.out, "stat_fast_path")};
  }
  key_result key(const project& p) { return key(p, p.cache().string()); }
  // A plain walk: no persistent memo, so no manifest either.
  std::string reference_key(const project& p, const std::string& file = "k.cu") {
    return key(p, "none", file).key;
  }
};

TEST_F(IncludeManifestKeys, FreshProcessReusesTheWalk) {
  project p;
  wait_until_settled();
  const mode_t umask_was = ::umask(0);  // the child's too: the manifests stay private anyway
  const key_result first = key(p);
  ::umask(umask_was);
  ASSERT_EQ(first.key.size(), 64u);
  EXPECT_NE(first.hashed, "0");  // walked: nothing was memoised yet
  ASSERT_EQ(p.manifest_files().size(), 1u);
  const fs::path manifest = p.manifest_files()[0];
  EXPECT_EQ(manifest.filename().string().size(), 64u);
  EXPECT_EQ(manifest.parent_path().filename().string(), manifest.filename().string().substr(0, 2));
  for (const fs::path& made : {p.manifests(), manifest.parent_path(), manifest}) {
    const auto others = fs::perms::group_all | fs::perms::others_all;
    EXPECT_EQ(fs::status(made).permissions() & others, fs::perms::none) << made;
  }

  p.forget_memo();
  const key_result second = key(p);
  EXPECT_EQ(second.key, first.key);
  EXPECT_EQ(second.hashed, "0");  // no memo, nothing read: the manifest answered
  EXPECT_EQ(second.stat_fast_path, "true");
  EXPECT_EQ(second.tracked, first.tracked);
  EXPECT_FALSE(fs::exists(p.memo()));  // a reused walk does not even load (or save) the memo
  EXPECT_EQ(reference_key(p), first.key);

  // Other inputs (a define) are another walk: not this manifest.
  p.forget_memo();
  std::vector<std::string> args = p.key_args(p.cache().string());
  args.push_back("-DX=1");
  const run_result other = run(p.work.path(), args);
  ASSERT_EQ(other.status, 0) << describe(other);
  EXPECT_NE(json_field(other.out, "hashed"), "0");
  EXPECT_EQ(p.manifest_files().size(), 2u);
}

TEST_F(IncludeManifestKeys, NoManifestWithoutAPersistentCache) {
  project p;
  wait_until_settled();
  for (const std::string spec : {"none", "memory"}) {
    const key_result k = key(p, spec);
    EXPECT_NE(k.hashed, "0") << spec;
  }
  EXPECT_FALSE(fs::exists(p.cache()));
  EXPECT_FALSE(fs::exists(captures_ / "default-cache" / "header-digests.manifests"));
}

// Every change to what the walk stat'd: the next fresh process walks again, and its key is a plain
// walk's.
TEST_F(IncludeManifestKeys, AnyChangeToAStatMeansAWalk) {
  struct edit_case {
    std::string name;
    std::function<void(const fs::path&)> edit;
    bool key_changes;
  };
  const std::vector<edit_case> cases = {
      {"contents changed, same size",
       [](const fs::path& w) { write_text(w / "B/h.h", "#define VALUE 2\n"); }, true},
      {"contents changed, other size",
       [](const fs::path& w) { write_text(w / "B/h.h", "#define VALUE 100\n"); }, true},
      {"touched (mtime only)",
       [](const fs::path& w) {
         ASSERT_EQ(::utimensat(AT_FDCWD, (w / "B/h.h").c_str(), nullptr, 0), 0);
       },
       false},
      {"a header added earlier in the search path",
       [](const fs::path& w) { write_text(w / "A/h.h", "#define VALUE 3\n"); }, true},
      {"a header deleted", [](const fs::path& w) { fs::remove(w / "B/gone.h"); }, true},
      {"a .stdh file created next to a probed name",
       [](const fs::path& w) { write_text(w / "A/foo.stdh", "#define FOO 1\n"); }, true},
      {"a symlink retargeted",
       [](const fs::path& w) {
         fs::remove(w / "B/link.h");
         fs::create_symlink("target2.h", w / "B/link.h");
       },
       true},
      {"a quoted include now found in the program's directory",
       [](const fs::path& w) { write_text(w / "link.h", "#define TARGET 5\n"); }, true},
      {"a symlink replaced by the file it named",
       [](const fs::path& w) {
         fs::remove(w / "B/link.h");
         fs::copy_file(w / "B/target1.h", w / "B/link.h");
       },
       false},
  };
  std::vector<std::unique_ptr<project>> projects;
  for (std::size_t i = 0; i < cases.size(); ++i) projects.push_back(std::make_unique<project>());
  wait_until_settled();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    const project& p = *projects[i];
    const key_result before = key(p);
    ASSERT_EQ(p.manifest_files().size(), 1u);
    p.forget_memo();
    ASSERT_EQ(key(p).hashed, "0");  // reused while nothing changed

    cases[i].edit(p.work.path());
    p.forget_memo();
    const key_result after = key(p);
    EXPECT_NE(after.hashed, "0");  // walked again
    EXPECT_EQ(after.key, reference_key(p));
    EXPECT_EQ(after.key != before.key, cases[i].key_changes);
  }
}

// A manifest file that is damaged, or another walk's, is ignored; the walk writes a good one.
TEST_F(IncludeManifestKeys, DamagedManifestIsIgnoredAndRewritten) {
  project p;
  write_text(p.work / "k2.cu", "#include <h.h>\n__global__ void k2(int* p) { *p = VALUE; }\n");
  wait_until_settled();
  const key_result other = key(p, p.cache().string(), "k2.cu");
  ASSERT_EQ(p.manifest_files().size(), 1u);
  const fs::path other_manifest = p.manifest_files()[0];
  const std::string other_bytes = read_text(other_manifest);
  const key_result good = key(p);
  ASSERT_EQ(p.manifest_files().size(), 2u);
  fs::path manifest;
  for (const auto& f : p.manifest_files()) {
    if (f != other_manifest) manifest = f;
  }
  const std::string bytes = read_text(manifest);
  ASSERT_GT(bytes.size(), 64u);
  const std::string reference = reference_key(p);
  ASSERT_EQ(good.key, reference);

  const std::vector<std::pair<std::string, std::function<std::string()>>> damages = {
      {"truncated", [&] { return bytes.substr(0, bytes.size() / 2); }},
      {"last byte cut", [&] { return bytes.substr(0, bytes.size() - 1); }},
      {"one byte flipped",
       [&] {
         std::string b = bytes;
         b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 0x20);
         return b;
       }},
      {"checksum flipped",
       [&] {
         std::string b = bytes;
         b.back() = static_cast<char>(b.back() ^ 1);
         return b;
       }},
      {"empty", [] { return std::string(); }},
      {"garbage", [&] { return std::string(bytes.size(), '\x5a'); }},
      {"another walk's manifest", [&] { return other_bytes; }},
  };
  for (const auto& [name, damaged] : damages) {
    SCOPED_TRACE(name);
    write_text(manifest, damaged());
    p.forget_memo();
    const key_result k = key(p);
    EXPECT_NE(k.hashed, "0");  // the file was not used
    EXPECT_EQ(k.key, reference);
    // Rewritten: the same walk, the same manifest.
    EXPECT_TRUE(read_text(manifest) == bytes) << "the manifest was not rewritten";
    p.forget_memo();
    EXPECT_EQ(key(p).hashed, "0");  // and used again
  }
  // Writable by others (a cache root shared with a group): not trusted, and replaced.
  fs::permissions(manifest, fs::perms::group_write, fs::perm_options::add);
  p.forget_memo();
  const key_result writable = key(p);
  EXPECT_NE(writable.hashed, "0");
  EXPECT_EQ(writable.key, reference);
  EXPECT_EQ(fs::status(manifest).permissions() & fs::perms::group_write, fs::perms::none);
  p.forget_memo();
  EXPECT_EQ(key(p).hashed, "0");

  // The other kernel's manifest was left alone throughout.
  p.forget_memo();
  const key_result other_again = key(p, p.cache().string(), "k2.cu");
  EXPECT_EQ(other_again.hashed, "0");
  EXPECT_EQ(other_again.key, other.key);
}

// Processes that walk at once all write the manifest (temp file + rename): one whole file is left,
// and it is used.
TEST_F(IncludeManifestKeys, ConcurrentWritersLeaveOneValidManifest) {
  project p;
  wait_until_settled();
  const std::string reference = reference_key(p);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    for (const auto& f : p.manifest_files()) fs::remove(f);
    std::vector<child> children;
    for (int i = 0; i < 8; ++i)
      children.push_back(start(p.work.path(), p.key_args(p.cache().string())));
    for (const auto& c : children) {
      const run_result r = finish(c);
      ASSERT_EQ(r.status, 0) << describe(r);
      EXPECT_EQ(json_field(r.out, "key"), reference);
    }
    const auto files = p.manifest_files();
    ASSERT_EQ(files.size(), 1u);  // no temp file left behind either
    EXPECT_EQ(files[0].filename().string().size(), 64u);
    p.forget_memo();
    const key_result k = key(p);
    EXPECT_EQ(k.hashed, "0");
    EXPECT_EQ(k.key, reference);
  }
}

// Writing a manifest trims its shard directory: at most kShardFiles manifests and kShardBytes,
// those written longest ago going first; abandoned temp files go after ten minutes.
TEST_F(IncludeManifestKeys, ManifestsPerShardAreBounded) {
  project p;
  wait_until_settled();
  key(p);
  ASSERT_EQ(p.manifest_files().size(), 1u);
  const fs::path manifest = p.manifest_files()[0];
  const fs::path shard = manifest.parent_path();
  const auto age = [](const fs::path& file, std::chrono::seconds ago) {
    struct timespec times[2];
    ::clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= static_cast<time_t>(ago.count());
    times[1] = times[0];
    ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
  };
  const auto planted = [&](int i) {
    char name[65];
    std::snprintf(name, sizeof name, "%064x", i);
    return shard / name;
  };
  // Twelve small old manifests (i hours old), a stale and a fresh temp file.
  for (int i = 1; i <= 12; ++i) {
    write_text(planted(i), "old manifest");
    age(planted(i), std::chrono::hours(i));
  }
  const fs::path stale_temp = shard / (manifest.filename().string() + ".tmp-aaaaaa");
  const fs::path fresh_temp = shard / (manifest.filename().string() + ".tmp-bbbbbb");
  write_text(stale_temp, "abandoned");
  age(stale_temp, std::chrono::hours(1));
  write_text(fresh_temp, "being written");
  fs::remove(manifest);

  key(p);  // walks, writes, trims
  EXPECT_TRUE(fs::exists(manifest));
  EXPECT_FALSE(fs::exists(stale_temp));
  EXPECT_TRUE(fs::exists(fresh_temp));
  for (int i = 1; i <= 12; ++i) {
    // The newest kShardFiles - 1 stay beside the new one.
    EXPECT_EQ(fs::exists(planted(i)), i <= static_cast<int>(kShardFiles) - 1) << i;
  }

  // By bytes: three large ones, newer than the small ones left.
  const std::string large(200 * 1024, 'x');
  for (int i = 100; i < 103; ++i) {
    write_text(planted(i), large);
    age(planted(i), std::chrono::minutes(103 - i));
  }
  fs::remove(manifest);
  key(p);
  EXPECT_TRUE(fs::exists(manifest));
  std::uintmax_t total = 0;
  std::size_t count = 0;
  for (const auto& f : fs::directory_iterator(shard)) {
    if (f.path().filename().string().size() != 64) continue;
    total += f.file_size();
    ++count;
  }
  EXPECT_LE(count, kShardFiles);
  EXPECT_LE(total, kShardBytes);
  EXPECT_FALSE(fs::exists(planted(100)));  // the oldest large one went
  EXPECT_TRUE(fs::exists(planted(101)));
  EXPECT_TRUE(fs::exists(planted(102)));
  for (int i = 1; i <= 12; ++i) EXPECT_FALSE(fs::exists(planted(i))) << i;
  // The manifest left is a good one.
  p.forget_memo();
  EXPECT_EQ(key(p).hashed, "0");
}

// A compile's hit in a fresh process: the stored bytes, no header read; an edited header misses.
TEST_F(IncludeManifest, FreshProcessCompileHitReusesTheWalk) {
  temp_dir work;
  fs::create_directories(work / "inc");
  write_text(work / "k.cu",
             "#include \"value.h\"\n"
             "extern \"C\" __global__ void k(int* p) { *p = VALUE; }\n");
  write_text(work / "inc/value.h", "#define VALUE 1\n");
  wait_until_settled();
  const fs::path cache = work / "cache";
  const auto compile = [&](const std::string& out, const std::string& cache_spec) {
    const run_result r = run(work.path(), {"compile", "k.cu", "-I", "inc", "--arch", "sm_90",
                                           "--cache", cache_spec, "-o", out, "--json"});
    EXPECT_EQ(r.status, 0) << describe(r);
    return r.out;
  };
  const std::string miss = compile("1.cubin", cache.string());
  EXPECT_EQ(json_field(miss, "cache"), "miss");
  fs::remove(cache / "header-digests");
  const std::string hit = compile("2.cubin", cache.string());
  EXPECT_EQ(json_field(hit, "cache"), "hit");
  EXPECT_EQ(json_field(hit, "hashed"), "0");
  EXPECT_EQ(json_field(hit, "stat_fast_path"), "true");
  EXPECT_EQ(json_field(hit, "key"), json_field(miss, "key"));
  EXPECT_EQ(read_text(work / "2.cubin"), read_text(work / "1.cubin"));

  write_text(work / "inc/value.h", "#define VALUE 2\n");
  fs::remove(cache / "header-digests");
  const std::string edited = compile("3.cubin", cache.string());
  EXPECT_EQ(json_field(edited, "cache"), "miss");
  EXPECT_NE(json_field(edited, "hashed"), "0");
  EXPECT_NE(json_field(edited, "key"), json_field(miss, "key"));
  compile("4.cubin", "none");
  EXPECT_EQ(read_text(work / "3.cubin"), read_text(work / "4.cubin"));
  EXPECT_NE(read_text(work / "3.cubin"), read_text(work / "1.cubin"));
}

}  // namespace
}  // namespace cucore
