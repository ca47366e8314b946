// `cucore compile` with a cache (cli_test; cli_test_support.hpp): misses and hits across processes,
// the --cache specs, inputs the key cannot see, tracked headers, hits that load no compiler, and
// caches that cannot be used.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "cli_test_support.hpp"

namespace cucore::cli_tests {
namespace {

// ---------------------------------------------------------------------------------------------
// cucore compile with a cache

TEST_F(CompileCache, MissThenHitInTwoProcessesWithTheDefaultCache) {
  file("k.cu", kTemplate);
  const json first = json_of(compile_k({"-o", "first.cubin"}));
  const json second = json_of(compile_k({"-o", "second.cubin"}));
  EXPECT_EQ(first["cache"].string, "miss");
  EXPECT_EQ(second["cache"].string, "hit");
  EXPECT_TRUE(is_key(first["key"].string)) << first["key"].string;
  EXPECT_EQ(first["key"].string, second["key"].string);
  EXPECT_TRUE(is_elf(output("first.cubin")));
  EXPECT_EQ(output("first.cubin"), output("second.cubin")) << "a hit writes the same bytes";
  EXPECT_EQ(second["bytes"].number, first["bytes"].number);
  // Name expressions work on a hit: the cached entry keeps the symbol mapping.
  EXPECT_EQ(second["mangled_names"]["k<float>"].string, "_Z1kIfEvPT_");
  EXPECT_EQ(second["mangled_names"]["k<int>"].string, "_Z1kIiEvPT_");
  EXPECT_EQ(second["backend"].string, "NVRTC");
  EXPECT_EQ(second["code_type"].string, "cubin");
  EXPECT_FALSE(second.find("cache_skip_reason"));
  // The default cache is $CUCORE_CACHE_DIR, a directory cache.
  EXPECT_EQ(entry_files(cache_.path()).size(), 1u);
}

TEST_F(CompileCache, HumanReportSaysMissThenHit) {
  file("k.cu", kTemplate);
  const std::vector<std::string> args = {"compile",           "k.cu",    "--arch", kArch,
                                         "--name-expression", "k<float>"};
  auto r = cucore(args);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(NVRTC, [0-9.]+ ms, cache miss\)\n)")))
      << r.out;
  r = cucore(args);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(NVRTC, [0-9.]+ ms, cache hit\)\n)"))) << r.out;
  EXPECT_TRUE(contains(r.out, "\n  k<float> = _Z1kIfEvPT_\n")) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST_F(CompileCache, SqliteAndDirectoryCachesGiveTheSameKey) {
  file("k.cu", kTemplate);
  temp_dir caches;
  const std::string reference = json_of(compile_k())["key"].string;
  ASSERT_TRUE(is_key(reference));
  const std::string expected = output("k.cubin");
  for (const std::string& spec : std::vector<std::string>{
           "sqlite:" + (caches.path() / "cache.db").string(), (caches.path() / "plain").string(),
           "dir:" + (caches.path() / "prefixed").string()}) {
    SCOPED_TRACE(spec);
    const json first = json_of(compile_k({"--cache", spec, "-o", "a.cubin"}));
    const json second = json_of(compile_k({"--cache", spec, "-o", "b.cubin"}));
    EXPECT_EQ(first["cache"].string, "miss");
    EXPECT_EQ(second["cache"].string, "hit");
    EXPECT_EQ(first["key"].string, reference) << "the key does not depend on the backend";
    EXPECT_EQ(second["key"].string, reference);
    EXPECT_EQ(output("a.cubin"), expected);
    EXPECT_EQ(output("b.cubin"), expected);
    EXPECT_EQ(second["mangled_names"]["k<int>"].string, "_Z1kIiEvPT_");
  }
  EXPECT_TRUE(fs::exists(caches.path() / "cache.db"));
  EXPECT_EQ(entry_files(caches.path() / "plain").size(), 1u);
  EXPECT_EQ(entry_files(caches.path() / "prefixed").size(), 1u);
  EXPECT_EQ(entry_files(cache_.path()).size(), 1u) << "only the run without --cache used it";
}

TEST_F(CompileCache, NoneAndMemory) {
  file("k.cu", kTemplate);
  for (int run = 0; run < 2; ++run) {
    const json j = json_of(compile_k({"--cache", "none"}));
    EXPECT_EQ(j["cache"].string, "off");
    EXPECT_TRUE(j["key"].is(json::kind::null));
  }
  EXPECT_TRUE(entry_files(cache_.path()).empty());
  const auto r = cucore({"compile", "k.cu", "--arch", kArch, "--cache", "none"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_FALSE(contains(r.out, "cache")) << r.out;

  // An in-memory cache lives as long as the process: every run of the tool misses.
  for (int run = 0; run < 2; ++run) {
    const json j = json_of(compile_k({"--cache", "memory"}));
    EXPECT_EQ(j["cache"].string, "miss");
    EXPECT_TRUE(is_key(j["key"].string));
  }
  EXPECT_TRUE(entry_files(cache_.path()).empty());
}

// The names in the work directory, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_F(CompileCache, BadSpecsAreUsageErrors) {
  file("k.cu", kTemplate);
  const bool had_root_file = fs::exists("/cucore-spec-test.db");  // sqlite:// made it
  // Each of these once became a directory (sqlite://NAME and dir://NAME: /NAME) and a normal miss.
  for (const char* spec :
       {"sqlite:", "dir:", "redis:/127.0.0.1:6379/0", "REDIS:127.0.0.1", "bogus://x",
        "sqlite3:k.db", "memory:", "None:", "sqlite://cucore-spec-test.db",
        "dir://cucore-spec-test", "C:\\cache", "file:///tmp/x", "rediss://127.0.0.1",
        "redis://127.0.0.1:port", "dir:d+redis:/host", "none+redis://127.0.0.1",
        "bogus:x+redis://127.0.0.1"}) {
    const auto before = names_in(work_.path());
    for (const char* command : {"compile", "key"}) {
      const auto r = cucore({command, "k.cu", "--arch", kArch, "--cache", spec});
      EXPECT_EQ(r.status, 2) << command << " --cache " << spec << ": " << describe(r);
      EXPECT_TRUE(contains(r.err, "--cache ")) << r.err;
    }
    const auto r = cucore({"cache", "stats", "--cache", spec});
    EXPECT_EQ(r.status, 2) << "cache stats --cache " << spec << ": " << describe(r);
    EXPECT_EQ(names_in(work_.path()), before) << spec << " created something";
  }
  if (!had_root_file) {
    EXPECT_FALSE(fs::exists("/cucore-spec-test.db"));
  }
  // What the message says: the scheme, the accepted forms, how to name such a directory.
  auto r = cucore({"compile", "k.cu", "--arch", kArch, "--cache", "bogus://x"});
  EXPECT_TRUE(contains(r.err, "--cache bogus://x: \"bogus:\" is not a cache scheme")) << r.err;
  EXPECT_TRUE(contains(r.err, "sqlite:FILE")) << r.err;
  EXPECT_TRUE(contains(r.err, "./bogus://x or dir:bogus://x")) << r.err;
  r = cucore({"compile", "k.cu", "--arch", kArch, "--cache", "sqlite://c.db"});
  EXPECT_TRUE(contains(r.err, "write sqlite:c.db")) << r.err;
  EXPECT_TRUE(contains(r.err, "sqlite:///ABS/PATH")) << r.err;
  EXPECT_FALSE(exists("c.db"));
  // A password in a refused spec is not echoed.
  r = cucore({"compile", "k.cu", "--arch", kArch, "--cache", "dir:d+redis://:hunter2@host:bad"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_FALSE(contains(r.err, "hunter2")) << r.err;
  r = cucore({"cache", "config", "max_size", "--cache", "bogus:x"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_FALSE(exists("bogus:x"));
  r = cucore({"cache", "config", "max_size", "--cache", "d+redis://:hunter2@host"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_FALSE(contains(r.err, "hunter2")) << r.err;
}

TEST_F(CompileCache, SchemesAndWordsAreReadInAnyCase) {
  file("k.cu", kTemplate);
  // REDIS:// is Redis (nothing listens on port 1: a miss, and no ./REDIS: directory).
  json j = json_of(compile_k({"--cache", "REDIS://127.0.0.1:1/0"}));
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_FALSE(exists("REDIS:"));
  j = json_of(compile_k({"--cache", "SQLite:c.db"}));
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_TRUE(fs::is_regular_file(work_.path() / "c.db"));
  EXPECT_EQ(json_of(compile_k({"--cache", "Dir:d"}))["cache"].string, "miss");
  EXPECT_EQ(entry_files(work_.path() / "d").size(), 1u);
  EXPECT_EQ(json_of(compile_k({"--cache", "NONE"}))["cache"].string, "off");
  EXPECT_EQ(json_of(compile_k({"--cache", "Memory"}))["cache"].string, "miss");
  EXPECT_EQ(json_of(compile_k({"--cache", "MEMORY+Redis://127.0.0.1:1/0"}))["cache"].string,
            "miss");
  EXPECT_FALSE(exists("NONE"));
  EXPECT_FALSE(exists("Memory"));
}

TEST_F(CompileCache, DirectoriesWhoseNamesHoldAColon) {
  file("k.cu", kTemplate);
  fs::create_directories(work_.path() / "abs");
  const std::vector<std::string> specs = {"./a:b",    "dir:c:d",    "dir:memory",
                                          "sub/v1:x", "my_cache:1", (work_ / "abs/x:y").string()};
  for (const std::string& spec : specs) {
    EXPECT_EQ(json_of(compile_k({"--cache", spec}))["cache"].string, "miss") << spec;
  }
  for (const char* dir : {"a:b", "c:d", "memory", "sub/v1:x", "my_cache:1", "abs/x:y"}) {
    EXPECT_EQ(entry_files(work_.path() / dir).size(), 1u) << dir;
  }
  // sqlite:///abs is the absolute path /abs.
  const std::string db = (work_.path() / "abs.db").string();
  EXPECT_EQ(json_of(compile_k({"--cache", "sqlite://" + db}))["cache"].string, "miss");
  EXPECT_TRUE(fs::is_regular_file(db));
}

TEST_F(CompileCache, AMalformedRemoteCacheVariableIsAUsageError) {
  file("k.cu", kTemplate);
  for (const char* url : {"bogus://x", "redis:/127.0.0.1", "redis://127.0.0.1:port"}) {
    const auto r = cucore({"compile", "k.cu", "--arch", kArch}, {{"CUCORE_REMOTE_CACHE", url}});
    EXPECT_EQ(r.status, 2) << url << ": " << describe(r);
    EXPECT_TRUE(contains(r.err, "$CUCORE_REMOTE_CACHE")) << r.err;
    EXPECT_FALSE(exists("k.cubin"));
  }
  // An explicit --cache is taken as given: the variable is not read.
  const auto r = cucore({"compile", "k.cu", "--arch", kArch, "--cache", "none"},
                        {{"CUCORE_REMOTE_CACHE", "bogus://x"}});
  EXPECT_EQ(r.status, 0) << describe(r);
  // In any case, it is Redis.
  const json j = json_of(compile_k(), {{"CUCORE_REMOTE_CACHE", "REDIS://127.0.0.1:1/0"}});
  EXPECT_EQ(j["cache"].string, "miss");
}

TEST_F(CompileCache, InputsTheKeyCannotSeeCompileUncachedWithANote) {
  file(kVersionedHeader, "#define V 46\n");
  file("m.cu", stores_v(kStringizedInclude));
  auto r = cucore({"compile", "m.cu", "--arch", kArch, "--target", "ptx"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(output("m.ptx"), ", 46;"));
  EXPECT_TRUE(contains(r.out, ", not cached)")) << r.out;
  EXPECT_TRUE(contains(r.err, "note: not cached: m.cu includes a header through a macro")) << r.err;
  EXPECT_TRUE(contains(r.err, "m.cu:3: #include STR(__CUDACC_VER_MAJOR__.cuh)")) << r.err;
  EXPECT_TRUE(contains(r.err, "; pass --extra-digest or --cache none\n")) << r.err;
  EXPECT_FALSE(contains(r.err, "program_cache_key_inputs")) << "the library's advice: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "said once: " << r.err;

  const json j = json_of({"compile", "m.cu", "--arch", kArch, "--target", "ptx", "--json"});
  EXPECT_EQ(j["cache"].string, "skipped");
  EXPECT_TRUE(j["key"].is(json::kind::null));
  EXPECT_TRUE(j["headers"].is(json::kind::null));
  EXPECT_TRUE(contains(j["cache_skip_reason"].string, "STR(__CUDACC_VER_MAJOR__.cuh)"))
      << j["cache_skip_reason"].string;
  EXPECT_TRUE(contains(j["cache_skip_reason"].string, "--extra-digest"));

  // --libdevice reads libdevice.10.bc.
  file("scale.ll", kScaleIr);
  const json n = json_of({"compile", "scale.ll", "--arch", kArch, "--libdevice", "--json"});
  EXPECT_EQ(n["cache"].string, "skipped");
  EXPECT_TRUE(contains(n["cache_skip_reason"].string, "--libdevice"));

  EXPECT_TRUE(entry_files(cache_.path()).empty());
}

TEST_F(CompileCache, ExtraDigestMakesThoseInputsCacheable) {
  file(kVersionedHeader, "#define V 46\n");
  file("m.cu", stores_v(kStringizedInclude));
  auto args = [](const std::string& digest, const std::string& out) {
    return std::vector<std::string>{"compile", "m.cu",   "--arch", kArch, "--target",
                                    "ptx",     "--json", "-o",     out,   "--extra-digest",
                                    digest};
  };
  const json first = json_of(args("00C0ffee", "a.ptx"));
  const json second = json_of(args("00c0FFEE", "b.ptx"));  // the same bytes
  EXPECT_EQ(first["cache"].string, "miss");
  EXPECT_EQ(second["cache"].string, "hit");
  EXPECT_TRUE(is_key(first["key"].string));
  EXPECT_EQ(first["key"].string, second["key"].string);
  EXPECT_TRUE(contains(output("a.ptx"), ", 46;"));
  EXPECT_EQ(output("a.ptx"), output("b.ptx"));
  ASSERT_TRUE(first["headers"].is(json::kind::object)) << "the rest of the closure is tracked";

  // Another digest (the header changed): another key, a miss, the new header's value.
  file(kVersionedHeader, "#define V 48\n");
  const json third = json_of(args("01", "c.ptx"));
  EXPECT_EQ(third["cache"].string, "miss");
  EXPECT_NE(third["key"].string, first["key"].string);
  EXPECT_TRUE(contains(output("c.ptx"), ", 48;"));

  // `cucore key` agrees, and lists what the digest vouches for.
  auto r = cucore({"key", "m.cu", "--arch", kArch, "--target", "ptx", "--extra-digest", "01"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.out, third["key"].string + "\n");
  r = cucore(
      {"key", "m.cu", "--arch", kArch, "--target", "ptx", "--extra-digest", "01", "--explain"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(\n  untracked_include +.*STR\(__CUDACC_VER_MAJOR__\.cuh\))")))
      << r.out;

  // A digest on inputs that need none is mixed in all the same.
  file("k.cu", kTemplate);
  const json plain = json_of(compile_k());
  const json salted = json_of(compile_k({"--extra-digest", "ab"}));
  EXPECT_EQ(salted["cache"].string, "miss");
  EXPECT_NE(salted["key"].string, plain["key"].string);
  EXPECT_EQ(json_of(compile_k({"--extra-digest", "AB"}))["cache"].string, "hit");
}

// The issue's case: a kernel and its header in one directory, compiled from another. The quoted
// #include is found beside FILE (the default program name is FILE as given), the header is in the
// key, and a cached result is always the bytes a compile without the cache gives.
TEST_F(CompileCache, QuotedIncludeBesideFileIsFoundAndTracked) {
  temp_dir src;
  const std::string kernel = (src.path() / "k.cu").string();
  write_text(src.path() / "h.cuh", "#define V 7\n");
  write_text(src.path() / "k.cu", stores_v("#include \"h.cuh\""));
  auto compile = [&](const std::string& out, const std::vector<std::string>& extra = {}) {
    return json_of(
        plus({"compile", kernel, "--arch", kArch, "--target", "ptx", "-o", out, "--json"}, extra));
  };
  const json miss = compile("miss.ptx");
  EXPECT_EQ(miss["cache"].string, "miss");
  ASSERT_TRUE(miss["headers"].is(json::kind::object)) << "headers: not tracked";
  EXPECT_GE(miss["headers"]["tracked"].number, 1);
  for (const char* count : {"absent", "in_memory", "hashed"}) {
    EXPECT_TRUE(miss["headers"][count].is(json::kind::number)) << count;
  }
  EXPECT_TRUE(miss["headers"]["stat_fast_path"].is(json::kind::boolean));
  EXPECT_TRUE(contains(output("miss.ptx"), ", 7;"));

  const json hit = compile("hit.ptx");
  EXPECT_EQ(hit["cache"].string, "hit");
  EXPECT_EQ(hit["key"].string, miss["key"].string);
  ASSERT_TRUE(hit["headers"].is(json::kind::object)) << "a hit reports the headers too";
  EXPECT_GE(hit["headers"]["tracked"].number, 1);
  EXPECT_EQ(compile("none.ptx", {"--cache", "none"})["cache"].string, "off");
  EXPECT_EQ(output("hit.ptx"), output("none.ptx"));
  EXPECT_EQ(output("miss.ptx"), output("none.ptx"));

  // Edit the header (same size): a miss, and the bytes of a fresh uncached compile.
  write_text(src.path() / "h.cuh", "#define V 8\n");
  const json edited = compile("edited.ptx");
  EXPECT_EQ(edited["cache"].string, "miss");
  EXPECT_NE(edited["key"].string, miss["key"].string);
  EXPECT_EQ(compile("fresh.ptx", {"--cache", "none"})["cache"].string, "off");
  EXPECT_TRUE(contains(output("fresh.ptx"), ", 8;"));
  EXPECT_EQ(output("edited.ptx"), output("fresh.ptx"));
  EXPECT_EQ(compile("again.ptx")["cache"].string, "hit");
  EXPECT_EQ(output("again.ptx"), output("fresh.ptx"));

  // The human report says so too, with nothing on stderr.
  const auto r = cucore({"compile", kernel, "--arch", kArch, "--target", "ptx", "-o", "h.ptx"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, kernel + " -> h.ptx (")) << r.out;
  EXPECT_TRUE(contains(r.out, ", cache hit)")) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST_F(CompileCache, IncludePathAndPreIncludeHeadersAreTracked) {
  fs::create_directory(work_ / "inc");
  file("inc/answer.h", "#define V 46\n");
  file("angle.cu", stores_v("#include <answer.h>"));
  const std::vector<std::string> args = {"compile", "angle.cu", "--arch", kArch,   "--target",
                                         "ptx",     "-I",       "inc",    "--json"};
  const json first = json_of(args);
  EXPECT_EQ(first["cache"].string, "miss");
  EXPECT_FALSE(first.find("cache_skip_reason"));
  EXPECT_GE(first["headers"]["tracked"].number, 1);
  EXPECT_EQ(json_of(args)["cache"].string, "hit");
  EXPECT_TRUE(contains(output("angle.ptx"), ", 46;"));
  // `header` defines V as `v`: the next compile (`compile`) misses and writes v into `out`.
  auto define_v = [&](const std::string& header, int v, const std::vector<std::string>& compile,
                      const std::string& out) {
    file(header, "#define V " + std::to_string(v) + "\n");
    EXPECT_EQ(json_of(compile)["cache"].string, "miss");
    EXPECT_TRUE(contains(output(out), ", " + std::to_string(v) + ";"));
  };
  define_v("inc/answer.h", 47, args, "angle.ptx");
  EXPECT_EQ(json_of(args)["cache"].string, "hit");

  file("plain.cu", stores_v(""));
  const std::vector<std::string> pre = {"compile", "plain.cu",      "--arch", kArch,   "--target",
                                        "ptx",     "--pre-include", "pre.h",  "--json"};
  define_v("pre.h", 50, pre, "plain.ptx");
  define_v("pre.h", 51, pre, "plain.ptx");
  EXPECT_EQ(json_of(pre)["cache"].string, "hit");
}

TEST_F(CompileCache, MalformedExtraDigestIsAUsageError) {
  file("k.cu", kTemplate);
  expect_errors({"compile", "k.cu", "--arch", kArch},
                {{{"--extra-digest", "abc"}, "--extra-digest: \"abc\" has an odd number"},
                 {{"--extra-digest", "a-"}, "--extra-digest: \"a-\" is not hexadecimal"}});
  const auto r = cucore({"key", "k.cu", "--arch", kArch, "--extra-digest", "zz"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_FALSE(exists("k.cubin"));
}

TEST_F(CompileCache, PtxAndNvvmHitsToo) {
  file("saxpy.cu", kSaxpy);
  ASSERT_EQ(
      cucore({"compile", "saxpy.cu", "--arch", kArch, "--target", "ptx", "--cache", "none"}).status,
      0);
  const std::vector<std::string> ptx = {"compile", "saxpy.ptx", "--arch", kArch, "--json"};
  const json miss = json_of(ptx);
  const std::string cubin = output("saxpy.cubin");
  const json hit = json_of(ptx);
  EXPECT_EQ(miss["cache"].string, "miss");
  EXPECT_EQ(hit["cache"].string, "hit");
  EXPECT_EQ(hit["backend"].string, miss["backend"].string) << "named from the key on a hit";
  EXPECT_EQ(output("saxpy.cubin"), cubin);

  file("scale.ll", kScaleIr);
  const std::vector<std::string> nvvm = {"compile", "scale.ll", "--arch", kArch, "--json"};
  EXPECT_EQ(json_of(nvvm)["cache"].string, "miss");
  const json nvvm_hit = json_of(nvvm);
  EXPECT_EQ(nvvm_hit["cache"].string, "hit");
  EXPECT_EQ(nvvm_hit["backend"].string, "NVVM");
  EXPECT_TRUE(contains(output("scale.ptx"), ".entry scale"));
}

// Issue 3, item 8: a process whose lookup hits never loads a compiler library. LD_DEBUG=files makes
// the dynamic loader name every library it opens, on stderr.
TEST_F(CompileCache, AHitLoadsNoCompilerLibrary) {
  const environment debug = {{"LD_DEBUG", "files"}};
  auto loaded = [](const run_result& r) {
    std::string libraries;
    for (const char* lib : {"libnvrtc", "libnvJitLink", "libnvvm"}) {
      if (contains(r.err, lib)) libraries += std::string(libraries.empty() ? "" : ", ") + lib;
    }
    return libraries;
  };

  file("k.cu", kTemplate);
  auto r = cucore(compile_k(), debug);
  ASSERT_EQ(r.status, 0) << describe(r);
  ASSERT_TRUE(contains(loaded(r), "libnvrtc")) << "LD_DEBUG shows a compile's libraries\n" << r.err;
  r = cucore(compile_k(), debug);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(parse_json(r.out)["cache"].string, "hit");
  EXPECT_EQ(parse_json(r.out)["mangled_names"]["k<int>"].string, "_Z1kIiEvPT_");
  EXPECT_EQ(loaded(r), "") << "a c++ hit loaded a compiler";

  // `args` once, to store the entry, then again with LD_DEBUG: a hit that loads no compiler.
  auto hit_loads_none = [&](const std::vector<std::string>& args, const std::string& what) {
    ASSERT_EQ(cucore(args).status, 0);
    const auto hit = cucore(args, debug);
    ASSERT_EQ(hit.status, 0) << describe(hit);
    EXPECT_EQ(parse_json(hit.out)["cache"].string, "hit");
    EXPECT_EQ(loaded(hit), "") << what << " loaded a compiler";
  };

  // The key the tool derives itself (--extra-digest) uses the same remembered versions.
  hit_loads_none(compile_k({"--extra-digest", "0f"}), "a hit with --extra-digest");

  // PTX: naming the backend of a hit must not load nvJitLink either.
  file("saxpy.cu", kSaxpy);
  ASSERT_EQ(cucore({"compile", "saxpy.cu", "--arch", kArch, "--target", "ptx"}).status, 0);
  hit_loads_none({"compile", "saxpy.ptx", "--arch", kArch, "--json"}, "a ptx hit");

  file("scale.ll", kScaleIr);
  hit_loads_none({"compile", "scale.ll", "--arch", kArch, "--json"}, "an nvvm hit");
}

// The same for the SQLite backend: its compiler version memo lives beside the database file.
TEST_F(CompileCache, ASqliteHitLoadsNoCompilerLibrary) {
  file("k.cu", kTemplate);
  const auto args = compile_k({"--cache", "sqlite:" + (cache_.path() / "cache.db").string()});
  ASSERT_EQ(cucore(args).status, 0);
  const auto r = cucore(args, {{"LD_DEBUG", "files"}});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(parse_json(r.out)["cache"].string, "hit");
  EXPECT_FALSE(contains(r.err, "libnvrtc"))
      << "a hit in the SQLite cache loaded NVRTC (does sqlite_program_cache override "
         "compiler_version_memo()?)";
}

TEST_F(CompileCache, ACacheThatCannotBeOpenedDoesNotFailTheCompile) {
  file("k.cu", kTemplate);
  file("not-a-directory", "x");
  const json j = json_of(compile_k({"--cache", (work_ / "not-a-directory").string()}));
  EXPECT_EQ(j["cache"].string, "skipped");
  EXPECT_TRUE(contains(j["cache_skip_reason"].string, "cannot open the cache"))
      << j["cache_skip_reason"].string;
  EXPECT_TRUE(contains(j["cache_skip_reason"].string, "not-a-directory"));
  EXPECT_TRUE(is_elf(output("k.cubin")));

  // `cucore cache` has nothing to fall back to: it fails.
  expect_error(cucore({"cache", "ls", "--cache", (work_ / "not-a-directory").string()}), 1,
               "not-a-directory");
}

TEST_F(CompileCache, CachesOthersCanWriteAreRefusedUnlessShared) {
  file("k.cu", kTemplate);
  fs::create_directory(work_ / "open");
  ASSERT_EQ(::chmod((work_ / "open").c_str(), 0777), 0);
  json j = json_of(compile_k({"--cache", (work_ / "open").string()}));
  EXPECT_EQ(j["cache"].string, "skipped");
  EXPECT_TRUE(contains(j["cache_skip_reason"].string, "world-writable"))
      << j["cache_skip_reason"].string;
  EXPECT_TRUE(is_elf(output("k.cubin")));

  fs::create_directory(work_ / "group");
  ASSERT_EQ(::chmod((work_ / "group").c_str(), 0775), 0);
  j = json_of(compile_k({"--cache", (work_ / "group").string()}));
  EXPECT_EQ(j["cache"].string, "skipped");
  EXPECT_TRUE(contains(j["cache_skip_reason"].string, "--shared-cache"))
      << j["cache_skip_reason"].string;
  expect_error(cucore({"cache", "stats", "--cache", (work_ / "group").string()}), 1,
               "group-writable");

  j = json_of(compile_k({"--cache", (work_ / "group").string(), "--shared-cache"}));
  EXPECT_EQ(j["cache"].string, "miss");
  j = json_of(compile_k({"--cache", (work_ / "group").string()}), {{"CUCORE_CACHE_SHARED", "1"}});
  EXPECT_EQ(j["cache"].string, "hit");
  const auto r =
      cucore({"cache", "stats", "--cache", (work_ / "group").string(), "--shared-cache"});
  EXPECT_EQ(r.status, 0) << describe(r);
}

}  // namespace
}  // namespace cucore::cli_tests
