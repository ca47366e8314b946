// `cucore cache verify --recompile` end to end (docs/verify-recompile.md): programs compiled by
// the tool with recipes kept, then every entry compiled again and compared. Real compiles with the
// toolkit's NVRTC and nvJitLink; no GPU needed. Each test runs the built tool (CUCORE_CLI_PATH)
// as child processes in a fresh directory, with its own cache and report directory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cucore::testing;  // cli_support.hpp, test_support.hpp

constexpr const char* kWithHeader =
    "#include \"value.cuh\"\n"
    "extern \"C\" __global__ void k(int* p) { *p = VALUE; }\n";

class Recompile : public ::testing::Test {
 protected:
  // Runs `cucore args...` in the work directory; the variables the test did not give that could
  // change what it checks are removed from the child's environment.
  run_result cucore(const std::vector<std::string>& args,
                    const std::vector<std::pair<std::string, std::string>>& given = {}) {
    std::vector<std::pair<std::string, std::string>> env = {
        {"CUCORE_CACHE_DIR", (work_ / "default-cache").string()},
        {"CUCORE_VERIFY_REPORTS", reports().string()}};
    env.insert(env.end(), given.begin(), given.end());
    std::vector<std::string> env_text;
    for (const auto& [name, value] : env) env_text.push_back(name + "=" + value);
    const std::vector<std::string> child_env = cucore::testing::environment_with(
        {"CUCORE_CACHE_RECIPES=", "CUCORE_VERIFY=", "CUCORE_CACHE_STATS="}, env_text);
    return runs_.run(args, work_, &child_env);
  }

  // `cucore compile FILE` into the test's cache, recipes kept unless `recipes` is empty.
  void compile(const std::string& file, const std::vector<std::string>& more = {},
               const std::string& recipes = "1") {
    std::vector<std::string> args = {
        "compile", file, "--arch", cucore::testing::kArch, "--cache", cache_.string(), "--json"};
    args.insert(args.end(), more.begin(), more.end());
    std::vector<std::pair<std::string, std::string>> env;
    if (!recipes.empty()) env.emplace_back("CUCORE_CACHE_RECIPES", recipes);
    const run_result r = cucore(args, env);
    ASSERT_EQ(r.status, 0) << describe(r);
    ASSERT_TRUE(json::parse(r.out)["stored"].get<bool>()) << r.out;
  }

  // `cucore cache verify --recompile --json`: its exit status and output.
  std::pair<int, json> verify() {
    const run_result r =
        cucore({"cache", "verify", "--recompile", "--cache", cache_.string(), "--json"});
    EXPECT_TRUE(r.status == 0 || r.status == 1) << describe(r);
    try {
      return {r.status, json::parse(r.out)};
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << "\n" << describe(r);
      return {r.status, json::object()};
    }
  }

  std::vector<fs::path> recipes() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(cache_ / "stats" / "recipes", ec)) {
      out.push_back(e.path());
    }
    return out;
  }

  std::size_t entries() {
    const run_result r = cucore({"cache", "ls", "--cache", cache_.string(), "--json"});
    EXPECT_EQ(r.status, 0) << describe(r);
    return json::parse(r.out).size();
  }

  fs::path reports() const { return work_ / "reports"; }

  cucore::testing::temp_dir scratch_;
  cucore::testing::temp_dir captures_;
  fs::path work_ = scratch_.path();
  fs::path cache_ = scratch_.path() / "cache";
  cucore::testing::captured_runs runs_{CUCORE_CLI_PATH, captures_.path()};
};

}  // namespace

// (a) Entries of c++ (PTX), c++ with a name expression and PTX (cubin) sources, recipes kept:
// each compiled again, the same, kept; the statistics count them.
TEST_F(Recompile, GoodEntriesAreVerifiedAndKept) {
  write_text(work_ / "saxpy.cu", kSaxpy);
  write_text(work_ / "k.cu", kTemplate);
  compile("saxpy.cu", {"--target", "ptx", "-o", "saxpy.ptx"});
  compile("k.cu", {"--target", "cubin", "-o", "k.cubin", "--name-expression", "k<float>"});
  compile("saxpy.ptx", {"--code-type", "ptx", "--target", "cubin", "-o", "from_ptx.cubin"});
  EXPECT_EQ(recipes().size(), 3u);

  const auto [status, out] = verify();
  EXPECT_EQ(status, 0) << out.dump(2);
  const json& r = out["recompile"];
  EXPECT_EQ(r["entries"], 3) << r.dump(2);
  EXPECT_EQ(r["with_recipe"], 3) << r.dump(2);
  EXPECT_EQ(r["verified"], 3) << r.dump(2);
  EXPECT_EQ(r["mismatched"], 0) << r.dump(2);
  EXPECT_EQ(r["inputs_changed"], 0) << r.dump(2);
  EXPECT_TRUE(r["recipes_enabled"].get<bool>() == false);  // this process: no variable, no file
  EXPECT_GT(r["recipe_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(entries(), 3u);

  const run_result stats = cucore({"cache", "stats", "--cache", cache_.string(), "--json"});
  ASSERT_EQ(stats.status, 0) << describe(stats);
  const json s = json::parse(stats.out)["statistics"];
  EXPECT_EQ(s["verify"]["verified"], 3) << s.dump(2);
  EXPECT_EQ(s["verify"]["mismatches"], 0) << s.dump(2);
  EXPECT_EQ(s["local"]["hits"], 0) << "reading the entries counted as hits: " << s.dump(2);
}

// (b) The limit verify mode exists for: a header edited through a page that was already dirty in
// a shared writable mapping changes its bytes, not its stat fields, so the key derived again is
// the entry's; the fresh compile differs: the entry and its recipe are removed, a report written.
TEST_F(Recompile, AStaleEntryThroughADirtyMappingIsRemoved) {
  const fs::path header = work_ / "value.cuh";
  std::ofstream(header) << "#define VALUE 1111\n";
  write_text(work_ / "main.cu", kWithHeader);
  const int fd = ::open(header.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const std::size_t size = fs::file_size(header);
  char* map = static_cast<char*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(map, MAP_FAILED);
  map[14] = '1';  // the page dirty now (its one mtime update: at this first write)
  // Settled (older than the walk's 2 s: its identity then vouches for its digest).
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  struct stat before {};
  ::fstat(fd, &before);
  compile("main.cu", {"--target", "ptx", "-o", "main.ptx"});
  ASSERT_TRUE(contains(read_text(work_ / "main.ptx"), "1111"));

  std::memcpy(map + 14, "2222", 4);  // through the dirty page: no stat field changes
  struct stat after {};
  ::fstat(fd, &after);
  const bool stamped = after.st_mtim.tv_nsec != before.st_mtim.tv_nsec ||
                       after.st_mtim.tv_sec != before.st_mtim.tv_sec ||
                       after.st_size != before.st_size;
  if (stamped) {
    ::munmap(map, size);
    ::close(fd);
    GTEST_SKIP() << "this file system stamped the write through a dirty page";
  }
  const auto [status, out] = verify();
  ::munmap(map, size);
  ::close(fd);
  EXPECT_EQ(status, 1) << out.dump(2);
  const json& r = out["recompile"];
  EXPECT_EQ(r["with_recipe"], 1) << r.dump(2);
  EXPECT_EQ(r["verified"], 0) << r.dump(2);
  EXPECT_EQ(r["mismatched"], 1) << r.dump(2);
  ASSERT_EQ(r["mismatches"].size(), 1u) << r.dump(2);
  const json& m = r["mismatches"][0];
  EXPECT_TRUE(m["removed"].get<bool>());
  EXPECT_TRUE(contains(m["what"].get<std::string>(), "first difference at byte")) << m.dump();
  ASSERT_TRUE(m["report"].is_string()) << m.dump();
  const fs::path report = m["report"].get<std::string>();
  EXPECT_EQ(report.parent_path(), reports());
  const std::string text = read_text(report);
  EXPECT_TRUE(contains(text, "key " + m["key"].get<std::string>())) << text;
  EXPECT_TRUE(contains(text, "first difference at byte")) << text;
  EXPECT_EQ(entries(), 0u);
  EXPECT_TRUE(recipes().empty());

  const run_result stats = cucore({"cache", "stats", "--cache", cache_.string(), "--json"});
  EXPECT_EQ(json::parse(stats.out)["statistics"]["verify"]["mismatches"], 1) << stats.out;
}

// (c) A header edited as an editor saves it: the key derived again is another (the entry is no
// longer reachable, and nothing is wrong with it): counted, left, exit status 0.
TEST_F(Recompile, AnEditedHeaderIsInputsChangedAndKept) {
  write_text(work_ / "value.cuh", "#define VALUE 1111\n");
  write_text(work_ / "main.cu", kWithHeader);
  compile("main.cu", {"--target", "ptx", "-o", "main.ptx"});
  write_text(work_ / "value.cuh", "#define VALUE 2222\n");
  const auto [status, out] = verify();
  EXPECT_EQ(status, 0) << out.dump(2);
  const json& r = out["recompile"];
  EXPECT_EQ(r["with_recipe"], 1) << r.dump(2);
  EXPECT_EQ(r["inputs_changed"], 1) << r.dump(2);
  EXPECT_EQ(r["mismatched"], 0) << r.dump(2);
  EXPECT_EQ(r["verified"], 0) << r.dump(2);
  EXPECT_EQ(entries(), 1u);
  EXPECT_EQ(recipes().size(), 1u);
}

// (d) Without recipes nothing can be compiled again: the summary says how to keep them.
TEST_F(Recompile, WithoutRecipesTheSummarySaysHowToKeepThem) {
  write_text(work_ / "saxpy.cu", kSaxpy);
  compile("saxpy.cu", {"--target", "ptx", "-o", "saxpy.ptx"}, /*recipes=*/"");
  EXPECT_TRUE(recipes().empty());
  const auto [status, out] = verify();
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out["recompile"]["with_recipe"], 0) << out.dump(2);
  EXPECT_EQ(out["recompile"]["without_recipe"], 1) << out.dump(2);
  const run_result r = cucore({"cache", "verify", "--recompile", "--cache", cache_.string()});
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "1 entry has no recipe")) << r.out;
  EXPECT_TRUE(contains(r.out, "CUCORE_CACHE_RECIPES=1")) << r.out;
  EXPECT_TRUE(r.err.empty()) << "progress outside a terminal: " << r.err;
}

// (e) A damaged recipe is ignored and counted; one whose entry is gone is deleted.
TEST_F(Recompile, DamagedAndOrphanRecipes) {
  write_text(work_ / "saxpy.cu", kSaxpy);
  write_text(work_ / "k.cu", kTemplate);
  compile("saxpy.cu", {"--target", "ptx", "-o", "saxpy.ptx"});
  compile("k.cu", {"--target", "ptx", "-o", "k.ptx"});
  const auto files = recipes();
  ASSERT_EQ(files.size(), 2u);
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');  // in the body: the digest no longer matches
  }
  const fs::path orphan = cache_ / "stats" / "recipes" / std::string(64, 'a');
  fs::copy_file(files[1], orphan);
  fs::last_write_time(orphan, fs::file_time_type::clock::now() - std::chrono::hours(1));

  const auto [status, out] = verify();
  EXPECT_EQ(status, 0) << out.dump(2);
  const json& r = out["recompile"];
  EXPECT_EQ(r["entries"], 2) << r.dump(2);
  EXPECT_EQ(r["damaged_recipes"], 1) << r.dump(2);
  EXPECT_EQ(r["with_recipe"], 1) << r.dump(2);
  EXPECT_EQ(r["verified"], 1) << r.dump(2);
  EXPECT_EQ(r["orphan_recipes_removed"], 1) << r.dump(2);
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_TRUE(fs::exists(files[0]));  // ignored, not removed: its entry is still there
  EXPECT_EQ(entries(), 2u);
}

// cucore.conf's `recipes = true` keeps them without the variable; the variable overrides it.
TEST_F(Recompile, TheConfigFileKeepsRecipesAndTheVariableOverridesIt) {
  const run_result set = cucore({"cache", "config", "recipes", "true", "--cache", cache_.string()});
  ASSERT_EQ(set.status, 0) << describe(set);
  write_text(work_ / "saxpy.cu", kSaxpy);
  write_text(work_ / "k.cu", kTemplate);
  compile("saxpy.cu", {"--target", "ptx", "-o", "saxpy.ptx"}, /*recipes=*/"");
  EXPECT_EQ(recipes().size(), 1u);
  compile("k.cu", {"--target", "ptx", "-o", "k.ptx"}, /*recipes=*/"off");
  EXPECT_EQ(recipes().size(), 1u);
  const run_result shown = cucore({"cache", "config", "recipes", "--cache", cache_.string()});
  EXPECT_EQ(shown.out, "true\n") << describe(shown);
}

// NVRTC's per-process names only inside mangled names (_ZN40_INTERNAL_..._<8 hex>_<pid>4cuda...:
// libcu++'s namespaces with a name expression): the fresh compile gets the entry's pid, so a good
// entry is not taken for a stale one.
TEST_F(Recompile, MangledPerProcessNamesAreReproduced) {
  write_text(work_ / "it.cu",
             "#include <cuda/std/iterator>\n"
             "template <class T> __global__ void f(T* p) {\n"
             "  *cuda::std::begin(*reinterpret_cast<T(*)[2]>(p)) = 1;\n"
             "}\n");
  compile("it.cu", {"--target", "ptx", "-o", "it.ptx", "--name-expression", "f<int>"});
  ASSERT_TRUE(contains(read_text(work_ / "it.ptx"), "_INTERNAL_")) << "no per-process names";
  const auto [status, out] = verify();
  EXPECT_EQ(status, 0) << out.dump(2);
  EXPECT_EQ(out["recompile"]["verified"], 1) << out.dump(2);
  EXPECT_EQ(out["recompile"]["mismatched"], 0) << out.dump(2);
}
