// `cucore cache export` / `cucore cache import` end to end (docs/cache-packs.md): real compiles by
// the tool, packs written and read by it as child processes, progress on a terminal only (a
// pseudo-terminal stands in for one).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cucore::testing;  // cli_support.hpp, test_support.hpp

class Pack : public ::testing::Test {
 protected:
  // Runs `cucore args...` in the work directory; with `terminal`, stderr is a pseudo-terminal
  // (what it printed there comes back in err).
  run_result cucore(const std::vector<std::string>& args, bool terminal = false) {
    if (!terminal) return runs_.run(args, work_.path(), nullptr);
    const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    EXPECT_GE(master, 0);
    ::grantpt(master);
    ::unlockpt(master);
    const cucore::testing::started_run child =
        runs_.start(args, work_.path(), nullptr, ::ptsname(master));
    if (child.pid < 0) {
      ::close(master);
      return cucore::testing::finish(child);
    }
    run_result r;
    int wstatus = 0;
    // Drained while it runs: a full terminal buffer would block the child.
    for (;;) {
      pollfd p{master, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        char buffer[4096];
        const ssize_t n = ::read(master, buffer, sizeof buffer);
        if (n > 0) r.err.append(buffer, static_cast<std::size_t>(n));
        if (n > 0) continue;
      }
      if (::waitpid(child.pid, &wstatus, WNOHANG) == child.pid) break;
    }
    ::close(master);
    r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    r.out = read_text(child.out);
    return r;
  }

  json json_of(const std::vector<std::string>& args) {
    const run_result r = cucore(args);
    EXPECT_EQ(r.status, 0) << describe(r);
    try {
      return json::parse(r.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << "\n" << describe(r);
      return json::object();
    }
  }

  // `cucore compile FILE` through `spec`: its --json.
  json compile(const std::string& file, const std::string& spec) {
    std::vector<std::string> args = {"compile", file, "--arch", cucore::testing::kArch,
                                     "--cache", spec, "-o",     file + ".cubin",
                                     "--json"};
    if (file == "k.cu") args.insert(args.end(), {"--name-expression", "k<float>"});
    return json_of(args);
  }

  void SetUp() override {
    std::ofstream(work_.path() / "saxpy.cu") << kSaxpy;
    std::ofstream(work_.path() / "k.cu") << kTemplate;
  }

  temp_dir work_;
  cucore::testing::captured_runs runs_{CUCORE_CLI_PATH, work_.path()};
};

TEST_F(Pack, ExportedEntriesImportIntoAnotherCacheAndHit) {
  ASSERT_EQ(compile("saxpy.cu", "a")["cache"], "miss");
  ASSERT_EQ(compile("k.cu", "a")["cache"], "miss");
  const std::string saxpy_cubin = read_text(work_.path() / "saxpy.cu.cubin");

  json r = json_of({"cache", "export", "-o", "all.cupack", "--cache", "a", "--json"});
  EXPECT_EQ(r["entries"], 2);
  EXPECT_EQ(r["skipped"], 0);
  EXPECT_EQ(r["with_compiler_identity"], 2);
  r = json_of({"cache", "import", "--check", "all.cupack", "--json"});
  EXPECT_EQ(r["ok"], true);
  EXPECT_EQ(r["entries"], 2);
  EXPECT_EQ(r["format_version"], 1);

  for (const std::string spec : {"sqlite:b.db", "dir:c"}) {
    SCOPED_TRACE(spec);
    r = json_of({"cache", "import", "all.cupack", "--cache", spec, "--json"});
    EXPECT_EQ(r["added"], 2);
    EXPECT_EQ(r["already_present"], 0);
    // Looking for what is there counted nothing: the next compiles are the cache's first hits.
    EXPECT_EQ(compile("saxpy.cu", spec)["cache"], "hit");
    EXPECT_EQ(read_text(work_.path() / "saxpy.cu.cubin"), saxpy_cubin);
    EXPECT_EQ(compile("k.cu", spec)["cache"], "hit");
    const json stats = json_of({"cache", "stats", "--json", "--cache", spec})["statistics"];
    EXPECT_EQ(stats["local"]["hits"], 2);
    EXPECT_EQ(stats["local"]["misses"], 0);
    r = json_of({"cache", "import", "all.cupack", "--cache", spec, "--json"});
    EXPECT_EQ(r["added"], 0);
    EXPECT_EQ(r["already_present"], 2);
  }

  // Selections: one key, a program name, a time.
  const std::string key = compile("saxpy.cu", "a")["key"];
  EXPECT_EQ(
      json_of({"cache", "export", key, "-o", "one.cupack", "--cache", "a", "--json"})["entries"],
      1);
  EXPECT_EQ(json_of({"cache", "export", "--match", "k.*", "-o", "k.cupack", "--cache", "a",
                     "--json"})["entries"],
            1);
  EXPECT_EQ(json_of({"cache", "export", "--since", "1h", "-o", "recent.cupack", "--cache", "a",
                     "--json"})["entries"],
            2);
  EXPECT_EQ(json_of({"cache", "export", "--since", "2999-01-01", "-o", "none.cupack", "--cache",
                     "a", "--json"})["entries"],
            0);
  // `extract` writes one entry's code, as `export KEYHEX -o FILE` did before packs.
  const run_result x = cucore({"cache", "extract", key, "-o", "x.cubin", "--cache", "a"});
  ASSERT_EQ(x.status, 0) << describe(x);
  EXPECT_EQ(read_text(work_.path() / "x.cubin"), saxpy_cubin);
}

TEST_F(Pack, ADamagedPackAddsNothingAndSaysWhere) {
  ASSERT_EQ(compile("saxpy.cu", "a")["cache"], "miss");
  ASSERT_EQ(compile("k.cu", "a")["cache"], "miss");
  ASSERT_EQ(cucore({"cache", "export", "-o", "p.cupack", "--cache", "a"}).status, 0);
  std::string bytes = read_text(work_.path() / "p.cupack");
  const std::size_t second = bytes.find("\x28\xb5\x2f\xfd", 60);  // the second record's frame
  ASSERT_NE(second, std::string::npos);
  bytes[second + 20] ^= 0x10;
  std::ofstream(work_.path() / "p.cupack", std::ios::binary | std::ios::trunc) << bytes;
  run_result r = cucore({"cache", "import", "p.cupack", "--cache", "b"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "record 1 at byte " + std::to_string(second) + ": damaged")) << r.err;
  EXPECT_EQ(json_of({"cache", "stats", "--json", "--cache", "b"})["entries"], 0);
  r = cucore({"cache", "import", "--check", "p.cupack"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "record 1")) << r.err;
  std::ofstream(work_.path() / "foreign.cupack") << "not a pack at all";
  r = cucore({"cache", "import", "foreign.cupack", "--cache", "b"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "not a cucore cache pack")) << r.err;
}

TEST_F(Pack, ProgressIsShownOnATerminalOnly) {
  ASSERT_EQ(compile("saxpy.cu", "a")["cache"], "miss");
  run_result r = cucore({"cache", "export", "-o", "p.cupack", "--cache", "a"}, true);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.err, "exporting [")) << r.err;
  EXPECT_TRUE(contains(r.err, "1/1 entries")) << r.err;
  r = cucore({"cache", "import", "p.cupack", "--cache", "b"}, true);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.err, "verifying [")) << r.err;
  EXPECT_TRUE(contains(r.err, "importing [")) << r.err;
  r = cucore({"cache", "import", "--check", "p.cupack"}, true);
  EXPECT_TRUE(contains(r.err, "verifying [")) << r.err;
  r = cucore({"cache", "import", "--quiet", "p.cupack", "--cache", "b"}, true);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_FALSE(contains(r.err, "[")) << r.err;
  r = cucore({"cache", "export", "-o", "p.cupack", "--cache", "a"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.err, "");
}

TEST_F(Pack, UsageErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"cache", "export", "--cache", "a"}, "needs -o PACK"},
      {{"cache", "export", std::string(64, '0'), "--since", "1d", "-o", "p"}, "KEYHEX names"},
      {{"cache", "export", "--since", "yesterday", "-o", "p"}, "--since yesterday: not a time"},
      {{"cache", "export", "--all", "--match", "x", "-o", "p"}, "--all exports every entry"},
      {{"cache", "import"}, "needs a PACK"},
      {{"cache", "import", "p", "q"}, "takes one PACK"},
      {{"cache", "import", "p", "--cache", "memory"}, "needs a cache that outlives it"},
      {{"cache", "import", "p", "--since", "1d"}, "cache import takes no --since"},
  };
  for (const auto& [args, message] : cases) {
    const run_result r = cucore(args);
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_TRUE(contains(r.err, message)) << message << "\n" << r.err;
  }
  // A missing key: nothing written.
  const run_result r =
      cucore({"cache", "export", std::string(64, '0'), "-o", "p.cupack", "--cache", "a"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "no entry " + std::string(64, '0'))) << r.err;
  EXPECT_FALSE(fs::exists(work_.path() / "p.cupack"));
}

}  // namespace
