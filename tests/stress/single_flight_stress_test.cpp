// Single-flight with real processes and real NVRTC: 16 `cucore compile` processes miss one slow
// kernel at once through one directory cache, one SQLite file, and separate directories sharing
// one Redis server (started here on a free loopback port): exactly one compiles (counted from
// each process's --json "single_flight"), and every output equals an uncached compile. Then the
// failures: the claim holder SIGKILLed mid-compile (exactly one waiter takes over once the lock or
// the lease dies, the others wait for it), a compile error under contention (the claim is
// released, every process reports the error, nothing hangs), and a waiter that gives up after
// --single-flight-wait.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "process_support.hpp"
#include "redis_test_support.hpp"
#include "slow_kernel.hpp"
#include "test_support.hpp"

#ifdef CUCORE_CLI_PATH
namespace cucore {
namespace {

using namespace std::chrono_literals;
using testing::contains;
using testing::kSlowSource;
using testing::redis_server;
using testing::temp_dir;
namespace fs = std::filesystem;

constexpr int kProcesses = 16;

// One `cucore compile` process, its output in files of its own.
class cli_process {
 public:
  cli_process(const fs::path& dir, const std::string& name, std::vector<std::string> args)
      : out_(dir / (name + ".stdout")), err_(dir / (name + ".stderr")) {
    const std::vector<std::string> env = testing::environment_with(
        {"CUCORE_REMOTE_CACHE="}, {"CUCORE_CACHE_DIR=" + (dir / "default-cache").string()});
    testing::spawn_options o;
    o.out = out_.string();
    o.err = err_.string();
    o.env = &env;
    args.insert(args.begin(), CUCORE_CLI_PATH);
    pid_ = testing::spawn_program(args, o);
  }
  cli_process(const cli_process&) = delete;
  cli_process& operator=(const cli_process&) = delete;
  ~cli_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  // The exit status (128 + signal when killed).
  int wait() {
    if (pid_ <= 0) return status_;
    status_ = testing::wait_exit_code(pid_);
    pid_ = -1;
    return status_;
  }
  void kill() const {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
  }
  std::string out() const { return testing::read_text(out_); }
  std::string err() const { return testing::read_text(err_); }
  // The --json object's "single_flight" value ("" if absent or null).
  std::string flight() const {
    const std::string text = out();
    const std::string field = "\"single_flight\":";
    auto at = text.find(field);
    if (at == std::string::npos) return "";
    at += field.size();
    while (at < text.size() && text[at] == ' ') ++at;
    if (at >= text.size() || text[at] != '"') return "";
    const auto end = text.find('"', at + 1);
    return text.substr(at + 1, end - at - 1);
  }

 private:
  fs::path out_, err_;
  pid_t pid_ = -1;
  int status_ = -1;
};

class SingleFlightProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = (work_ / "slow.cu").string();
    testing::write_text(source_, kSlowSource);
  }
  // The compile's arguments, with `extra` (the cache) after them.
  std::vector<std::string> args(const std::string& output, std::vector<std::string> extra) const {
    std::vector<std::string> a = {"compile",  source_, "--arch", testing::kArch,
                                  "--target", "cubin", "-o",     (work_ / output).string(),
                                  "--json"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  // The bytes of an uncached compile: the oracle.
  std::string reference(std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"--cache", "none"});
    cli_process p(work_.path(), "reference", args("reference.cubin", extra));
    EXPECT_EQ(p.wait(), 0) << p.err();
    return testing::read_text(work_ / "reference.cubin");
  }
  // `n` processes at once, process i with the cache arguments cache(i); waits for them all.
  std::map<std::string, int> stampede(int n,
                                      const std::function<std::vector<std::string>(int)>& cache,
                                      const std::string& expected) {
    std::vector<std::unique_ptr<cli_process>> procs;
    for (int i = 0; i < n; ++i) {
      const std::string name = "p" + std::to_string(i);
      procs.push_back(
          std::make_unique<cli_process>(work_.path(), name, args(name + ".cubin", cache(i))));
    }
    std::map<std::string, int> outcomes;
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(procs[static_cast<std::size_t>(i)]->wait(), 0)
          << procs[static_cast<std::size_t>(i)]->err();
      ++outcomes[procs[static_cast<std::size_t>(i)]->flight()];
      EXPECT_EQ(testing::read_text(work_ / ("p" + std::to_string(i) + ".cubin")), expected)
          << "process " << i;
    }
    return outcomes;
  }

  temp_dir work_;
  std::string source_;
};

std::string describe(const std::map<std::string, int>& outcomes) {
  std::string s;
  for (const auto& [k, v] : outcomes)
    s += (k.empty() ? "(none)" : k) + "=" + std::to_string(v) + " ";
  return s;
}

// Exactly one compile; every other process waited for it (or, starting late, hit its entry).
void expect_one_compile(const std::map<std::string, int>& outcomes) {
  EXPECT_EQ(outcomes.count("compiled") ? outcomes.at("compiled") : 0, 1) << describe(outcomes);
  int others = 0;
  for (const auto& [k, v] : outcomes) {
    if (k == "waited" || k == "hit") others += v;
  }
  EXPECT_EQ(others, kProcesses - 1) << describe(outcomes);
}

TEST_F(SingleFlightProcesses, StampedeThroughOneDirectory) {
  const std::string expected = reference();
  const std::string dir = (work_ / "cache").string();
  expect_one_compile(stampede(
      kProcesses,
      [&](int) {
        return std::vector<std::string>{"--cache", dir};
      },
      expected));
}

TEST_F(SingleFlightProcesses, StampedeThroughOneSqliteFile) {
  const std::string expected = reference();
  const std::string file = "sqlite:" + (work_ / "cache.db").string();
  expect_one_compile(stampede(
      kProcesses,
      [&](int) {
        return std::vector<std::string>{"--cache", file};
      },
      expected));
}

TEST_F(SingleFlightProcesses, StampedeAcrossMachinesThroughRedis) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  const std::string expected = reference();
  // Separate local directories: the processes stand for machines, sharing only the server.
  expect_one_compile(stampede(
      kProcesses,
      [&](int i) {
        return std::vector<std::string>{
            "--cache", (work_ / ("local" + std::to_string(i))).string() + "+" + server.url("/0")};
      },
      expected));
}

// Whether any process holds a claim in the claims file at `path` (a lock anywhere in it).
bool any_claim_held(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = 0;
  lock.l_len = 0;  // to the end of any file
  const bool held = ::fcntl(fd, F_OFD_GETLK, &lock) == 0 && lock.l_type != F_UNLCK;
  ::close(fd);
  return held;
}

bool wait_for(const std::function<bool()>& condition, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

// The holder is SIGKILLed mid-compile: its claim dies with it (a lock at once, a Redis claim when
// its lease ends), and exactly one waiter compiles in its place while the others wait for that
// one (each gets the right bytes; none waits out --single-flight-wait). Before, every waiter took
// over and compiled at once. `cache(who)`: the cache arguments of the holder (-1) and waiter i.
void holder_killed_mid_compile(
    const std::function<std::vector<std::string>(int)>& cache,
    const std::function<bool()>& claim_held, const fs::path& work,
    const std::function<std::vector<std::string>(const std::string&, std::vector<std::string>)>&
        args,
    const std::string& expected) {
  auto with_cache = [&](int who) {
    std::vector<std::string> a = {"-DSLOW_CHAINS=3", "--single-flight-wait", "60"};
    const std::vector<std::string> c = cache(who);
    a.insert(a.end(), c.begin(), c.end());
    return a;
  };
  cli_process holder(work, "holder", args("holder.cubin", with_cache(-1)));
  ASSERT_TRUE(wait_for(claim_held, 30s));
  std::vector<std::unique_ptr<cli_process>> waiters;
  constexpr int kWaiters = 4;
  for (int i = 0; i < kWaiters; ++i) {
    const std::string name = "w" + std::to_string(i);
    waiters.push_back(
        std::make_unique<cli_process>(work, name, args(name + ".cubin", with_cache(i))));
  }
  std::this_thread::sleep_for(500ms);  // the waiters are waiting; the holder compiles ~1.3 s
  holder.kill();
  ASSERT_EQ(holder.wait(), 128 + SIGKILL) << "the holder finished before it was killed";
  const auto killed = std::chrono::steady_clock::now();
  std::map<std::string, int> outcomes;
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    ASSERT_EQ(waiters[i]->wait(), 0) << waiters[i]->err();
    ++outcomes[waiters[i]->flight()];
    EXPECT_EQ(testing::read_text(work / ("w" + std::to_string(i) + ".cubin")), expected);
  }
  EXPECT_EQ(outcomes["took_over"], 1) << describe(outcomes);
  EXPECT_EQ(outcomes["waited"], kWaiters - 1) << describe(outcomes);
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 40s);  // far from the 60 s wait
}

TEST_F(SingleFlightProcesses, HolderKilledMidCompileThroughADirectory) {
  const std::string expected = reference({"-DSLOW_CHAINS=3"});
  const fs::path dir = work_ / "cache";
  holder_killed_mid_compile(
      [&](int) {
        return std::vector<std::string>{"--cache", dir.string()};
      },
      [&] { return any_claim_held(dir / "claims"); }, work_.path(),
      [&](const std::string& out, std::vector<std::string> extra) { return args(out, extra); },
      expected);
  EXPECT_FALSE(any_claim_held(dir / "claims"));
}

TEST_F(SingleFlightProcesses, HolderKilledMidCompileThroughASqliteFile) {
  const std::string expected = reference({"-DSLOW_CHAINS=3"});
  const fs::path file = work_ / "cache.db";
  holder_killed_mid_compile(
      [&](int) {
        return std::vector<std::string>{"--cache", "sqlite:" + file.string()};
      },
      [&] { return any_claim_held(file.string() + ".claims"); }, work_.path(),
      [&](const std::string& out, std::vector<std::string> extra) { return args(out, extra); },
      expected);
  EXPECT_FALSE(any_claim_held(file.string() + ".claims"));
}

// The same across machines (a local directory each, one Redis server): the holder's Redis claim
// outlives it until its lease (1 s) ends; then exactly one machine's waiter takes over.
TEST_F(SingleFlightProcesses, HolderKilledMidCompileThroughRedis) {
  redis_server server;
  CUCORE_REQUIRE_REDIS(server);
  const std::string expected = reference({"-DSLOW_CHAINS=3"});
  auto claims = [&] {
    testing::raw_redis raw = server.client();
    testing::reply_ptr r = raw.command({"KEYS", "cucore:v1:claim:*"});
    std::size_t n = 0;
    if (r && r->type == REDIS_REPLY_ARRAY) {
      for (std::size_t i = 0; i < r->elements; ++i) {
        n += !std::string_view(r->element[i]->str, r->element[i]->len).ends_with(":abandoned");
      }
    }
    return n;
  };
  holder_killed_mid_compile(
      [&](int who) {
        return std::vector<std::string>{
            "--cache", (work_ / ("local" + std::to_string(who))).string() + "+" + server.url("/0"),
            "--single-flight-lease", "1"};
      },
      [&] { return claims() == 1; }, work_.path(),
      [&](const std::string& out, std::vector<std::string> extra) { return args(out, extra); },
      expected);
  EXPECT_EQ(claims(), 0u);
}

// A compile error under contention: the holder's claim is released, every process reports the
// error itself (errors are not cached), nothing is stored, no claim is left.
TEST_F(SingleFlightProcesses, CompileErrorUnderContentionReleasesTheClaim) {
  testing::write_text(source_,
                      std::string(kSlowSource) + "\nstatic_assert(SLOW_N < 0, \"boom\");\n");
  const std::string dir = (work_ / "cache").string();
  std::vector<std::unique_ptr<cli_process>> procs;
  for (int i = 0; i < 8; ++i) {
    const std::string name = "e" + std::to_string(i);
    procs.push_back(
        std::make_unique<cli_process>(work_.path(), name, args(name + ".cubin", {"--cache", dir})));
  }
  for (auto& p : procs) {
    EXPECT_EQ(p->wait(), 1) << p->out() << p->err();
    EXPECT_TRUE(contains(p->err(), "boom")) << p->err();
  }
  EXPECT_FALSE(any_claim_held(fs::path(dir) / "claims"));
  EXPECT_TRUE(fs::is_empty(fs::path(dir) / "entries"));
}

// A claim that never goes (here the test holds every key's) makes the process wait
// --single-flight-wait, then compile itself.
TEST_F(SingleFlightProcesses, WaiterGivesUpAfterTheBound) {
  const std::string expected = reference();
  const fs::path dir = work_ / "cache";
  fs::create_directories(dir);
  const int fd = ::open((dir / "claims").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = 0;
  lock.l_len = 0;
  ASSERT_EQ(::fcntl(fd, F_OFD_SETLK, &lock), 0);
  const auto start = std::chrono::steady_clock::now();
  cli_process p(work_.path(), "p",
                args("p.cubin", {"--cache", dir.string(), "--single-flight-wait", "0.5"}));
  ASSERT_EQ(p.wait(), 0) << p.err();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 500ms);
  EXPECT_EQ(p.flight(), "gave_up") << p.out();
  EXPECT_EQ(testing::read_text(work_ / "p.cubin"), expected);
  ::close(fd);
}

}  // namespace
}  // namespace cucore
#endif
