// `cucore cache` (cli_test; cli_test_support.hpp): ls, show, extract, verify, stats, trim, clear,
// config and check, and what the statistics count of compiles that are not stored.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_support.hpp"

namespace cucore::cli_tests {
namespace {

// ---------------------------------------------------------------------------------------------
// cucore cache

TEST_F(Cache, LsShowExtract) {
  file("k.cu", kTemplate);
  const json compiled = json_of(compile_k());
  const std::string key = compiled["key"].string;
  ASSERT_TRUE(is_key(key));

  auto r = cucore({"cache", "ls"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(std::regex_match(
      r.out,
      std::regex(
          key +
          R"(  cubin  [0-9]+  k\.cu  [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\n)")))
      << r.out;

  const json ls = json_of({"cache", "ls", "--json"});
  ASSERT_TRUE(ls.is(json::kind::array));
  ASSERT_EQ(ls.items.size(), 1u);
  EXPECT_EQ(ls.items[0]["key"].string, key);
  EXPECT_EQ(ls.items[0]["code_type"].string, "cubin");
  EXPECT_EQ(ls.items[0]["payload_bytes"].number, compiled["bytes"].number);
  EXPECT_GT(ls.items[0]["stored_bytes"].number, ls.items[0]["payload_bytes"].number);
  EXPECT_EQ(ls.items[0]["name"].string, "k.cu");
  EXPECT_EQ(ls.items[0]["symbols"].number, 2);
  EXPECT_TRUE(ls.items[0]["last_used"].string.ends_with("Z"));

  r = cucore({"cache", "show", key});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "key        " + key + "\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "code type  cubin\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "name       k.cu\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "\n  k<float> = _Z1kIfEvPT_\n  k<int> = _Z1kIiEvPT_\n")) << r.out;

  const json show = json_of({"cache", "show", key, "--json"});
  EXPECT_EQ(show["key"].string, key);
  EXPECT_EQ(show["payload_bytes"].number, compiled["bytes"].number);
  EXPECT_EQ(show["symbols"]["k<int>"].string, "_Z1kIiEvPT_");

  r = cucore({"cache", "extract", key, "-o", "exported.cubin"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(output("exported.cubin"), output("k.cubin"));
  EXPECT_TRUE(contains(r.out, "-> exported.cubin (")) << r.out;

  // Not there, and not a key.
  const std::string absent(64, '0');
  expect_error(cucore({"cache", "show", absent}), 1, "no entry " + absent);
  r = cucore({"cache", "extract", absent, "-o", "nothing.cubin"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_FALSE(exists("nothing.cubin"));
  r = cucore({"cache", "show", "xyz"});
  EXPECT_EQ(r.status, 2) << describe(r);
  expect_error(cucore({"cache", "show"}), 2, "cache show needs a KEYHEX");
  expect_error(cucore({"cache", "extract", key}), 2, "-o");
}

// Looking at an entry is not a lookup: show and extract leave the hit and miss counts as they
// were, on a directory and an SQLite cache (each cucore run is a process of its own).
TEST_F(Cache, ShowAndExtractCountNothing) {
  file("k.cu", kTemplate);
  for (const std::string& spec :
       {cache_.path().string(), "sqlite:" + (cache_.path() / "c.db").string()}) {
    SCOPED_TRACE(spec);
    const std::string key = json_of(compile_k({"--cache", spec}))["key"].string;
    ASSERT_TRUE(is_key(key));
    ASSERT_EQ(json_of(compile_k({"--cache", spec}))["cache"].string, "hit");
    const json before = json_of({"cache", "stats", "--json", "--cache", spec})["statistics"];
    ASSERT_EQ(before["local"]["hits"].number, 1);
    ASSERT_EQ(before["local"]["misses"].number, 1);
    auto r = cucore({"cache", "show", key, "--cache", spec});
    ASSERT_EQ(r.status, 0) << describe(r);
    r = cucore({"cache", "extract", key, "-o", "looked.cubin", "--cache", spec});
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_EQ(output("looked.cubin"), output("k.cubin"));
    r = cucore({"cache", "show", std::string(64, '0'), "--cache", spec});
    EXPECT_EQ(r.status, 1) << describe(r);
    const json after = json_of({"cache", "stats", "--json", "--cache", spec})["statistics"];
    EXPECT_EQ(after["local"]["hits"].number, 1);
    EXPECT_EQ(after["local"]["misses"].number, 1);
    EXPECT_EQ(after["compile_hits"].number, 1);
  }
}

TEST_F(Cache, LsAndShowWorkOnSqlite) {
  file("k.cu", kTemplate);
  const std::string spec = "sqlite:" + (cache_.path() / "c.db").string();
  const std::string key = json_of(compile_k({"--cache", spec}))["key"].string;
  const json ls = json_of({"cache", "ls", "--json", "--cache", spec});
  ASSERT_EQ(ls.items.size(), 1u);
  EXPECT_EQ(ls.items[0]["key"].string, key);
  EXPECT_EQ(
      json_of({"cache", "show", key, "--json", "--cache", spec})["symbols"]["k<float>"].string,
      "_Z1kIfEvPT_");
  const json stats = json_of({"cache", "stats", "--json", "--cache", spec});
  EXPECT_EQ(stats["backend"].string, "sqlite");
  EXPECT_EQ(stats["file"].string, (cache_.path() / "c.db").string());
  EXPECT_EQ(stats["entries"].number, 1);
}

TEST_F(Cache, VerifyFindsAndRemovesADamagedEntry) {
  file("k.cu", kTemplate);
  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  const std::string good = output("k.cubin");

  auto r = cucore({"cache", "verify", "--json"});
  EXPECT_EQ(r.status, 0) << describe(r);
  json j = parse_json(r.out);
  EXPECT_EQ(j.keys, (std::vector<std::string>{"entries", "ok", "corrupt", "removed", "moved_aside",
                                              "notes"}));
  EXPECT_EQ(j["entries"].number, 1);
  EXPECT_EQ(j["ok"].number, 1);
  EXPECT_EQ(j["corrupt"].number, 0);
  EXPECT_EQ(j["removed"].number, 0);
  r = cucore({"cache", "verify"});
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.out, "1 entries, 1 ok, 0 corrupt, 0 removed\n");

  auto damage = [&] {
    const auto files = entry_files(cache_.path());
    ASSERT_EQ(files.size(), 1u);
    std::string bytes = read_text(files[0]);
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x01);
    write_text(files[0], bytes);
  };
  damage();
  r = cucore({"cache", "verify", "--json"});
  EXPECT_EQ(r.status, 1) << "damage found: " << describe(r);
  j = parse_json(r.out);
  EXPECT_EQ(j["entries"].number, 1);
  EXPECT_EQ(j["ok"].number, 0);
  EXPECT_EQ(j["corrupt"].number, 1);
  EXPECT_EQ(j["removed"].number, 1);
  EXPECT_TRUE(entry_files(cache_.path()).empty());
  r = cucore({"cache", "verify"});
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.out, "0 entries, 0 ok, 0 corrupt, 0 removed\n");

  // The next compile misses, recompiles the same bytes and stores them again.
  j = json_of(compile_k());
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_EQ(output("k.cubin"), good);

  // A damaged entry found by a compile (no verify) is a miss too, never the damaged bytes.
  damage();
  j = json_of(compile_k());
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_EQ(output("k.cubin"), good);
  EXPECT_EQ(json_of(compile_k())["cache"].string, "hit");
  EXPECT_EQ(output("k.cubin"), good);
}

// A directory where an entry belongs (issue 21, item 3): the compile misses, its store clears the
// directory (saying so), the next compile hits, and the statistics count one drop, not one per
// lookup. verify removes another one, says what it removed, and finds nothing on the next run.
TEST_F(Cache, ADirectoryWhereAnEntryBelongsIsClearedByTheStoreAndByVerify) {
  file("k.cu", kTemplate);
  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  auto block = [&] {
    const auto files = entry_files(cache_.path());
    EXPECT_EQ(files.size(), 1u);
    if (files.size() != 1u) return fs::path();
    fs::remove(files[0]);
    fs::create_directories(files[0] / "inside");
    write_text(files[0] / "inside/file", "x");
    return files[0];
  };
  const fs::path first = block();
  auto r = cucore(compile_k());
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(parse_json(r.out)["cache"].string, "miss");
  EXPECT_TRUE(contains(r.err, first.string() + " is a directory, not an entry")) << r.err;
  EXPECT_TRUE(contains(r.err, "removed " + first.string())) << r.err;
  EXPECT_EQ(json_of(compile_k())["cache"].string, "hit");
  const json local = json_of({"cache", "stats", "--json"})["statistics"]["local"];
  EXPECT_EQ(local["corrupt_dropped"].number, 1);
  EXPECT_EQ(local["puts"].number, 2);

  const fs::path second = block();
  r = cucore({"cache", "verify"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_EQ(r.out, "removed " + second.string() +
                       " (a directory, not an entry, 3 items with what was inside)\n"
                       "1 entries, 0 ok, 1 corrupt, 1 removed\n")
      << describe(r);
  r = cucore({"cache", "verify", "--json"});
  EXPECT_EQ(r.status, 0) << describe(r);
  const json j = parse_json(r.out);
  EXPECT_EQ(j["corrupt"].number, 0);
  EXPECT_EQ(j["notes"].items.size(), 0u);
  EXPECT_EQ(json_of(compile_k())["cache"].string, "miss");
  EXPECT_EQ(json_of(compile_k())["cache"].string, "hit");
}

TEST_F(Cache, StatsTrimClear) {
  file("k.cu", kTemplate);
  file("saxpy.cu", kSaxpy);
  json stats = json_of({"cache", "stats", "--json"});
  EXPECT_EQ(stats["entries"].number, 0);
  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  ASSERT_EQ(json_of({"compile", "saxpy.cu", "--arch", kArch, "--json"})["cache"].string, "miss");

  stats = json_of({"cache", "stats", "--json"});
  EXPECT_EQ(stats["description"].string, "directory " + cache_.path().string());
  EXPECT_EQ(stats["backend"].string, "directory");
  EXPECT_EQ(stats["root"].string, cache_.path().string());
  EXPECT_EQ(stats["entries"].number, 2);
  EXPECT_GT(stats["size_bytes"].number, 0);
  auto r = cucore({"cache", "stats"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "root     " + cache_.path().string() + "\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "entries  2\n")) << r.out;

  // A cap above the total removes nothing.
  r = cucore({"cache", "trim", "--max-size", "1G", "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(parse_json(r.out)["removed"].number, 0);
  r = cucore({"cache", "trim", "--max-size", "1"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "removed 2 entries; 0 left")) << r.out;
  EXPECT_EQ(json_of({"cache", "ls", "--json"}).items.size(), 0u);
  EXPECT_EQ(cucore({"cache", "ls"}).out, "");

  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  r = cucore({"cache", "clear"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "removed 1 entry (")) << r.out;
  EXPECT_EQ(json_of({"cache", "stats", "--json"})["entries"].number, 0);
  EXPECT_EQ(json_of(compile_k())["cache"].string, "miss");
  const json cleared = json_of({"cache", "clear", "--json"});
  EXPECT_EQ(cleared["removed"].number, 1);
  EXPECT_EQ(cleared["entries"].number, 0);

  for (const char* bad : {"1X", "-1", "K", "99999999999G"}) {
    r = cucore({"cache", "trim", "--max-size", bad});
    EXPECT_EQ(r.status, 2) << bad << ": " << describe(r);
    EXPECT_TRUE(contains(r.err, "--max-size")) << r.err;
  }
  expect_error(cucore({"cache", "trim"}), 2, "--max-size");
}

// --ptxas-options naming an options file (a relative path; issue 39): ptxas reads it and the key
// does not, so the compile runs without the cache (option_file), and each edit of the file gives
// what ptxas makes of it.
TEST_F(Cache, PtxasOptionsFileCompilesWithoutTheCache) {
  file("t.cu", "extern \"C\" __global__ void k(int* o) { o[0] = 47; }\n");
  file("ptxas.opts", "--maxrregcount=32\n");
  const std::vector<std::string> args = {
      "compile", "t.cu", "--arch", kArch, "--target", "cubin", "--ptxas-options=-optf=ptxas.opts",
      "--json"};
  for (int round = 0; round < 2; ++round) {
    const json j = json_of(args);
    EXPECT_EQ(j["cache"].string, "skipped");
    EXPECT_TRUE(j["cache_skip_reason"].string.starts_with("option_file: "))
        << j["cache_skip_reason"].string;
    EXPECT_TRUE(contains(j["cache_skip_reason"].string, "ptxas.opts"))
        << j["cache_skip_reason"].string;
  }
  file("ptxas.opts", "--no-such-ptxas-option\n");
  const run_result r = cucore(args);
  EXPECT_NE(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out + r.err, "no-such-ptxas-option")) << describe(r);
  const json s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_EQ(s["skips"]["option_file"].number, 3);
  EXPECT_EQ(json_of({"cache", "stats", "--json"})["entries"].number, 0);
  // An ordinary ptxas option goes through the cache: no skip.
  const std::vector<std::string> plain = {
      "compile", "t.cu", "--arch", kArch, "--target", "cubin", "--ptxas-options=-v", "--json"};
  const json p = json_of(plain);
  EXPECT_EQ(p["cache"].string, "miss");
  EXPECT_TRUE(p["stored"].is(json::kind::boolean) && p["stored"].boolean)
      << p["cache_skip_reason"].string;
}

// Inputs no key can cover (issue 39, classes 3 and 4): a procfs file whose contents change without
// its identity (the host's name in another UTS namespace) and a probe of a per-process name. The
// tool compiles them through the store gate: miss, not stored, the reason named, never a hit.
TEST_F(Cache, ProcessViewInputsAreCompiledNeverStored) {
  file("proc.cu",
       "__device__ int\n#include \"/proc/sys/kernel/ostype\"\n= 1;\n"
       "extern \"C\" __global__ void k(int* o) { o[0] = 1; }\n");
  file("stdin.cu",
       "#if __has_include(\"/dev/stdin\")\n__device__ int v = 2;\n#else\n__device__ int v = 1;\n"
       "#endif\nextern \"C\" __global__ void k(int* o) { o[0] = v; }\n");
  for (const char* name : {"proc.cu", "stdin.cu"}) {
    for (int round = 0; round < 2; ++round) {
      const json j = json_of({"compile", name, "--arch", kArch, "--target", "ptx", "--json"});
      EXPECT_EQ(j["cache"].string, "miss") << name << " round " << round;
      EXPECT_TRUE(j["stored"].is(json::kind::boolean) && !j["stored"].boolean) << name;
      EXPECT_EQ(j["cache_skip"].string, "process_view_input") << name;
    }
  }
  const json s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_EQ(s["skips"]["process_view_input"].number, 4);
  EXPECT_EQ(json_of({"cache", "stats", "--json"})["entries"].number, 0);
}

// A header modified less than its timestamp granularity before the key was made (here: an mtime in
// the future, deterministically) is compiled but not stored; --json and the statistics say why.
// Once its mtime is old and it has settled, the next compile stores.
TEST_F(Cache, TooNewHeaderIsCompiledNotStored) {
  file("h.cuh", "#define V 47\n");
  file("t.cu", "#include \"h.cuh\"\nextern \"C\" __global__ void k(int* o) { o[0] = V; }\n");
  const fs::path header = work_ / "h.cuh";
  const auto set_mtime = [&](time_t seconds) {
    const struct timespec times[2] = {{0, UTIME_OMIT}, {seconds, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, header.c_str(), times, 0), 0);
  };
  set_mtime(::time(nullptr) + 3600);
  testing::settle(header, /*mtime_too=*/false);
  const std::vector<std::string> args = {"compile",  "t.cu", "--arch", kArch,
                                         "--target", "ptx",  "--json"};
  json j = json_of(args);
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_TRUE(j["stored"].is(json::kind::boolean) && !j["stored"].boolean);
  EXPECT_EQ(j["cache_skip"].string, "header_too_new");
  EXPECT_TRUE(j["cache_skip_reason"].string.starts_with("h.cuh was modified"))
      << j["cache_skip_reason"].string;
  EXPECT_EQ(json_of(args)["cache"].string, "miss") << "nothing was stored";
  json s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_EQ(s["skips"]["header_too_new"].number, 2);
  EXPECT_EQ(s["skips"]["header_changed"].number, 0);

  set_mtime(::time(nullptr) - 3600);
  testing::settle(header);
  j = json_of(args);
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_TRUE(j["stored"].boolean);
  EXPECT_FALSE(j.find("cache_skip"));
  EXPECT_EQ(json_of(args)["cache"].string, "hit");
}

// A walk reused from a manifest another process left (the same program and search, another
// arch): the store gate covers its headers. Before, a manifest read from disk kept grouped
// checks' paths only in their groups, so every header looked unkeyed and nothing was stored.
TEST_F(Cache, AManifestFromAnotherProcessCoversItsHeaders) {
  file("h.cuh", "#define V 5\n");
  file("t.cu", "#include \"h.cuh\"\nextern \"C\" __global__ void k(int* o) { o[0] = V; }\n");
  // Settled (2 s, the walk's rule): the first process persists its manifest.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  json j = json_of({"compile", "t.cu", "--arch", kArch, "--target", "ptx", "--json"});
  ASSERT_TRUE(j["stored"].boolean);
  j = json_of({"compile", "t.cu", "--arch", "sm_80", "--target", "ptx", "--json"});
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_EQ(j["headers"]["reused_walk"].boolean, true) << "the manifest was not reused";
  EXPECT_TRUE(j["stored"].boolean) << j["cache_skip_reason"].string;
}

// Misses that explain themselves (docs/cache-keys.md): each process's miss names what differs from
// the last key stored for the program: a first compile, a header edited (its path), an option, the
// compiler (NVRTC 13.5's root); `cucore cache stats` groups the misses by reason.
TEST_F(Cache, AMissNamesWhatChanged) {
  file("h.cuh", "#define V 5\n");
  file("t.cu", "#include \"h.cuh\"\nextern \"C\" __global__ void k(int* o) { o[0] = V; }\n");
  testing::settle(work_ / "h.cuh");
  const std::vector<std::string> base = {"compile",  "t.cu", "--arch", kArch,
                                         "--target", "ptx",  "--json"};
  json j = json_of(base);
  EXPECT_EQ(j["miss"]["reason"].string, "first_compile");
  EXPECT_TRUE(j["miss"]["nearest_key"].is(json::kind::null));
  const std::string first_key = j["key"].string;
  EXPECT_FALSE(json_of(base).find("miss")) << "a hit explains nothing";

  file("h.cuh", "#define V 6\n");
  testing::settle(work_ / "h.cuh");
  j = json_of(base);
  EXPECT_EQ(j["miss"]["reason"].string, "header_changed");
  EXPECT_NE(j["miss"]["reasons"].items.at(0)["detail"].string.find("h.cuh"), std::string::npos)
      << j["miss"]["reasons"].items.at(0)["detail"].string;
  EXPECT_EQ(j["miss"]["nearest_key"].string, first_key);

  j = json_of(plus(base, {"-D", "N=2"}));
  EXPECT_EQ(j["miss"]["reason"].string, "option_changed");
  EXPECT_NE(j["miss"]["reasons"].items.at(0)["detail"].string.find("N=2"), std::string::npos)
      << j["miss"]["reasons"].items.at(0)["detail"].string;

  // Another compiler: NVRTC 12.9's root (whatever NVRTC 13 this build compiles with, the wheels'
  // 13.5 included, 12.9 is another one).
  const std::string root = cuda_12_9_root();
  if (!root.empty()) {
    j = json_of(plus(base, {"-D", "N=2"}),
                {{"CUCORE_CUDA_HOME", root}, {"CUCORE_CUDA_HOME_ONLY", "1"}});
    EXPECT_EQ(j["miss"]["reason"].string, "compiler_changed");
    EXPECT_NE(j["miss"]["reasons"].items.at(0)["detail"].string.find("12.9"), std::string::npos)
        << j["miss"]["reasons"].items.at(0)["detail"].string;
  }
  json s = json_of({"cache", "stats", "--json"})["statistics"]["misses_by_reason"];
  EXPECT_EQ(s["first_compile"].number, 1);
  EXPECT_EQ(s["header_changed"].number, 1);
  EXPECT_EQ(s["option_changed"].number, 1);
  EXPECT_EQ(s["compiler_changed"].number, root.empty() ? 0 : 1);
}

// The statistics the cache keeps across processes: each cucore run below is a process of its own.
TEST_F(Cache, StatsCountHitsMissesCompilesAndSkipsAcrossRunsAndZero) {
  file("k.cu", kTemplate);
  json s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_EQ(s["directory"].string, (cache_.path() / "stats").string());
  EXPECT_EQ(s["shards"].number, 0);
  EXPECT_TRUE(s["hit_rate"].is(json::kind::null));
  EXPECT_TRUE(s["compile_seconds_saved"].is(json::kind::null));
  EXPECT_TRUE(s["zeroed_at"].is(json::kind::null));

  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  ASSERT_EQ(json_of(compile_k())["cache"].string, "hit");
  ASSERT_EQ(json_of(compile_k())["cache"].string, "hit");
  file(kVersionedHeader, "#define V 46\n");
  file("m.cu", stores_v(kStringizedInclude));
  ASSERT_EQ(
      json_of({"compile", "m.cu", "--arch", kArch, "--target", "ptx", "--json"})["cache"].string,
      "skipped");

  s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_GE(s["shards"].number, 1);
  EXPECT_EQ(s["shards_ignored"].number, 0);
  const json& local = s["local"];
  EXPECT_EQ(local["hits"].number, 2);
  EXPECT_EQ(local["misses"].number, 1);
  EXPECT_NEAR(local["hit_rate"].number, 2.0 / 3, 1e-3);
  EXPECT_NEAR(s["hit_rate"].number, 2.0 / 3, 1e-3);
  EXPECT_EQ(local["puts"].number, 1);
  EXPECT_EQ(local["errors"].number, 0);
  EXPECT_EQ(local["corrupt_dropped"].number, 0);
  EXPECT_EQ(local["evictions"].number, 0);
  EXPECT_EQ(s.find("remote"), nullptr);
  EXPECT_EQ(s["compiles"].number, 1);
  EXPECT_EQ(s["compile_hits"].number, 2);
  EXPECT_GT(s["compile_seconds"].number, 0);
  EXPECT_NEAR(s["compile_seconds_saved"].number, 2 * s["compile_seconds"].number, 1e-5);
  EXPECT_EQ(s["skips"]["total"].number, 1);
  EXPECT_EQ(s["skips"]["needs_extra_digest"].number, 1);
  EXPECT_EQ(s["skips"]["uncacheable_options"].number, 0);
  EXPECT_EQ(s["skips"]["header_changed"].number, 0);
  EXPECT_EQ(s["skips"]["header_too_new"].number, 0);

  auto r = cucore({"cache", "stats"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "entries  1\n")) << r.out;
  EXPECT_TRUE(contains(r.out, " KiB (")) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "lookups  2 hits, 1 miss (66.7 % hits), 1 put, 0 errors, 0 corrupt "
                       "dropped, 0 evictions\n"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "compiles 1 compiled in ")) << r.out;
  EXPECT_TRUE(contains(r.out, ", 2 from the cache (about ")) << r.out;
  EXPECT_TRUE(contains(r.out, "skipped  1 (needs_extra_digest 1)\n")) << r.out;
  // One shard per process (pid % 16): as many as the runs above happened to use.
  EXPECT_TRUE(contains(r.out, "stats    ")) << r.out;
  EXPECT_TRUE(contains(r.out, " in " + (cache_.path() / "stats").string() + "\n")) << r.out;

  r = cucore({"cache", "stats", "--zero"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.out, "statistics of the directory " + cache_.path().string() + " cache zeroed\n");
  s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_EQ(s["local"]["hits"].number, 0);
  EXPECT_EQ(s["compiles"].number, 0);
  EXPECT_EQ(s["skips"]["total"].number, 0);
  EXPECT_EQ(s["zeroed_at"].type, json::kind::string);
  EXPECT_TRUE(contains(cucore({"cache", "stats"}).out, "; zeroed 20")) << "ISO time";
  // Entries are untouched, and counting goes on.
  ASSERT_EQ(json_of(compile_k())["cache"].string, "hit");
  s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_EQ(s["local"]["hits"].number, 1);
  EXPECT_EQ(s["compile_hits"].number, 1);
  EXPECT_TRUE(s["compile_seconds_saved"].is(json::kind::null)) << "no compile since the zero";
  const json z = json_of({"cache", "stats", "--zero", "--json"});
  EXPECT_TRUE(z["zeroed"].boolean);
  EXPECT_EQ(z["directory"].string, (cache_.path() / "stats").string());

  // An SQLite cache keeps them beside its file.
  const std::string db = "sqlite:" + (work_ / "c.db").string();
  ASSERT_EQ(json_of(compile_k({"--cache", db}))["cache"].string, "miss");
  ASSERT_EQ(json_of(compile_k({"--cache", db}))["cache"].string, "hit");
  s = json_of({"cache", "stats", "--json", "--cache", db})["statistics"];
  EXPECT_EQ(s["directory"].string, (work_ / "c.db.stats").string());
  EXPECT_EQ(s["local"]["hits"].number, 1);
  EXPECT_EQ(s["local"]["misses"].number, 1);
  EXPECT_EQ(s["compiles"].number, 1);

  expect_error(cucore({"cache", "ls", "--zero"}), 2, "cache ls takes no --zero");

  // CUCORE_CACHE_STATS=0: a cache that keeps none (and so creates no stats directory).
  const std::string other = (work_ / "quiet").string();
  ASSERT_EQ(json_of(compile_k({"--cache", other}), {{"CUCORE_CACHE_STATS", "0"}})["cache"].string,
            "miss");
  EXPECT_TRUE(fs::exists(work_ / "quiet" / "entries"));
  EXPECT_FALSE(fs::exists(work_ / "quiet" / "stats"));
  EXPECT_TRUE(json_of({"cache", "stats", "--json", "--cache", other},
                      {{"CUCORE_CACHE_STATS", "0"}})["statistics"]
                  .is(json::kind::null));
  const json bad = json_of(compile_k({"--cache", other}), {{"CUCORE_CACHE_STATS", "maybe"}});
  EXPECT_EQ(bad["cache"].string, "skipped");
  EXPECT_TRUE(contains(bad["cache_skip_reason"].string, "$CUCORE_CACHE_STATS"))
      << bad["cache_skip_reason"].string;
}

TEST_F(Cache, BadCommandLines) {
  auto r = cucore({"cache"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "stats, ls, show, extract, export, import, verify, trim, clear"))
      << r.err;
  expect_error(cucore({"cache", "frobnicate"}), 2, "unknown cache subcommand \"frobnicate\"");
  expect_error(cucore({"cache", "ls", "--cache", "memory"}), 2, "--cache memory");
  r = cucore({"cache", "stats", "--cache", "none"});
  EXPECT_EQ(r.status, 2) << describe(r);
  expect_error(cucore({"cache", "ls", "--max-size", "1"}), 2, "cache ls takes no --max-size");
  expect_error(cucore({"cache", "ls", "extra"}), 2, "\"extra\"");
  r = cucore({"cache", "stats", "--cache", "sqlite:"});
  EXPECT_EQ(r.status, 2) << describe(r);
}

TEST_F(Cache, ConfigSetsAPersistentSizeCap) {
  file("k.cu", kTemplate);
  auto r = cucore({"cache", "config"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "max_size = 5G (default)")) << r.out;
  r = cucore({"cache", "config", "max_size", "1K"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(fs::exists(cache_.path() / "cucore.conf"));
  r = cucore({"cache", "config", "max_size"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.out, "1K\n");
  // Enforced: a cubin entry is larger than 1 KiB, so it is not stored.
  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  EXPECT_EQ(json_of({"cache", "stats", "--json"})["entries"].number, 0);
  r = cucore({"cache", "config", "--unset", "max_size"});
  ASSERT_EQ(r.status, 0) << describe(r);
  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  EXPECT_EQ(json_of({"cache", "stats", "--json"})["entries"].number, 1);

  expect_error(cucore({"cache", "config", "max_size", "lots"}), 2, "max_size");
  r = cucore({"cache", "config", "colour", "blue"});
  EXPECT_EQ(r.status, 2) << describe(r);
  r = cucore({"cache", "config", "max_size", "--cache", "sqlite:x.db"});
  EXPECT_EQ(r.status, 2) << describe(r);
  write_text(cache_.path() / "cucore.conf", "max_size = 1X\n");
  expect_error(cucore({"cache", "stats"}), 1, "cucore.conf:1:");
}

// `cucore cache check` reads $CUCORE_CACHE_SHARED as opening the cache does (yes/true/on, any
// case), so that it never calls a group-writable key file a problem in a cache that opens shared.
TEST_F(Cache, CheckReadsCacheSharedAsOpeningDoes) {
  const fs::path group = work_ / "group";
  fs::create_directory(group);
  ASSERT_EQ(::chmod(group.c_str(), 0775), 0);
  write_text(group / "compiler-versions", "");
  ASSERT_EQ(::chmod((group / "compiler-versions").c_str(), 0664), 0);
  auto r = cucore({"cache", "check", "--cache", group.string()});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.out, "writable by others")) << r.out;
  for (const char* yes : {"yes", "TRUE", "On", "1"}) {
    const environment shared = {{"CUCORE_CACHE_SHARED", yes}};
    r = cucore({"cache", "stats", "--cache", group.string()}, shared);
    EXPECT_EQ(r.status, 0) << yes << ": " << describe(r);
    r = cucore({"cache", "check", "--cache", group.string()}, shared);
    EXPECT_EQ(r.status, 0) << yes << ": " << describe(r);
    EXPECT_FALSE(contains(r.out, "writable by others")) << yes << ": " << r.out;
  }
}

}  // namespace
}  // namespace cucore::cli_tests
