// The stampede (issue 9): N `cucore compile` processes started at once miss one slow kernel
// (NVRTC takes most of a second on it). Wall time from the first start to the last exit, each
// configuration on a fresh cache (primed with another kernel, then empty), the median of R runs:
//   cold        one process alone (the floor: one cold compile, process start included)
//   directory   N processes, one directory cache, single-flight on       goal: <= 1.2x cold
//   sqlite      N processes, one SQLite file, single-flight on
//   redis       N processes, a directory each + one redis-server, single-flight on
//   off         N processes, one directory cache, --no-single-flight (every process compiles)
// Processes rather than Google Benchmark: each sample is a fleet of processes, seconds long.
//
//   stampede_bench [--processes N] [--runs R] [--slow-n DEPTH] [--cli PATH]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "process_support.hpp"
#include "redis_test_support.hpp"
#include "slow_kernel.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using cucore::testing::kSlowSource;
using cucore::testing::redis_server;
using cucore::testing::temp_dir;

std::string cli_path = CUCORE_CLI_PATH;

pid_t spawn(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> argv = {cli_path};
  argv.insert(argv.end(), args.begin(), args.end());
  cucore::testing::spawn_options o;
  o.out = o.err = log.string();  // one file for both
  const pid_t pid = cucore::testing::spawn_program(argv, o);
  if (pid < 0) {
    std::fprintf(stderr, "cannot start %s\n", cli_path.c_str());
    std::exit(1);
  }
  return pid;
}

// Starts `n` compiles at once, process i with the cache arguments cache(i); the wall time in
// seconds until the last exits, and how many of them compiled (from --json "single_flight").
struct sample {
  double seconds = 0;
  int compiled = 0;
};

sample fleet(const fs::path& work, const std::string& source, const std::string& slow_n, int n,
             const std::function<std::vector<std::string>(int)>& cache) {
  std::vector<pid_t> pids;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> args = {
        "compile",  source,
        "--arch",   "sm_90",
        "--target", "cubin",
        "-o",       (work / ("p" + std::to_string(i) + ".cubin")).string(),
        "--json",   "-DSLOW_N=" + slow_n};
    const auto extra = cache(i);
    args.insert(args.end(), extra.begin(), extra.end());
    pids.push_back(spawn(args, work / ("p" + std::to_string(i) + ".log")));
  }
  for (pid_t pid : pids) {
    if (cucore::testing::wait_exit_code(pid) != 0) {
      std::fprintf(stderr, "a compile failed; see %s\n", work.c_str());
      std::exit(1);
    }
  }
  sample s;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int i = 0; i < n; ++i) {
    const std::string out = cucore::testing::read_text(work / ("p" + std::to_string(i) + ".log"));
    for (const char* what : {"\"compiled\"", "\"took_over\"", "\"gave_up\"", "\"unclaimed\""}) {
      if (out.find(std::string("\"single_flight\":") + what) != std::string::npos) ++s.compiled;
    }
  }
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int processes = 16;
  int runs = 3;
  std::string slow_n = "120";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string opt = argv[i];
    if (opt == "--processes")
      processes = std::atoi(argv[i + 1]);
    else if (opt == "--runs")
      runs = std::atoi(argv[i + 1]);
    else if (opt == "--slow-n")
      slow_n = argv[i + 1];
    else if (opt == "--cli")
      cli_path = argv[i + 1];
  }
  temp_dir work;
  const std::string source = (work / "slow.cu").string();
  cucore::testing::write_text(source, kSlowSource);
  redis_server server;
  const bool have_redis = server.installed() && server.running();

  struct config {
    const char* name;
    int n;
    std::function<std::vector<std::string>(const fs::path&, int)> cache;
  };
  std::vector<config> configs = {
      {"cold (1 process)", 1,
       [](const fs::path& d, int) {
         return std::vector<std::string>{"--cache", (d / "c").string()};
       }},
      {"directory", processes,
       [](const fs::path& d, int) {
         return std::vector<std::string>{"--cache", (d / "c").string()};
       }},
      {"sqlite", processes,
       [](const fs::path& d, int) {
         return std::vector<std::string>{"--cache", "sqlite:" + (d / "c.db").string()};
       }},
      {"off (every process compiles)", processes,
       [](const fs::path& d, int) {
         return std::vector<std::string>{"--cache", (d / "c").string(), "--no-single-flight"};
       }},
  };
  if (have_redis) {
    configs.insert(configs.begin() + 3,
                   {"redis (a directory each)", processes, [&](const fs::path& d, int i) {
                      // A database of its own per run, so that every run starts cold.
                      static std::map<std::string, int> dbs;
                      const int db =
                          dbs.emplace(d.string(), static_cast<int>(dbs.size() % 16)).first->second;
                      return std::vector<std::string>{
                          "--cache", (d / ("l" + std::to_string(i))).string() + "+" +
                                         server.url("/" + std::to_string(db))};
                    }});
  }

  std::printf("stampede: %d processes, one kernel (SLOW_N=%s), median of %d runs\n", processes,
              slow_n.c_str(), runs);
  // Primed: each cache has compiled another kernel before (as a machine's cache has after its
  // first compile ever), so it holds the compiler version memo and no process loads NVRTC just
  // to derive the key. Empty: every process loads NVRTC to derive the key.
  for (const bool primed : {true, false}) {
    std::printf(primed ? "caches that have compiled before (compiler version memo present):\n"
                       : "empty caches (every process loads NVRTC to derive the key):\n");
    // Run r of every configuration, then run r + 1: load that drifts (a shared machine) falls on
    // all of them alike.
    std::vector<std::vector<double>> times(configs.size());
    std::vector<int> compiled(configs.size(), 0);
    for (int r = 0; r < runs; ++r) {
      for (std::size_t k = 0; k < configs.size(); ++k) {
        const config& c = configs[k];
        const fs::path dir = work / (std::string(primed ? "p" : "e") + "-run-" + std::to_string(r) +
                                     "-" + std::to_string(k));
        fs::create_directories(dir / "prime");
        if (primed) {
          // One process per distinct cache (one for a shared one), with a tiny kernel.
          const int distinct = c.n > 1 && c.cache(dir, 0) != c.cache(dir, 1) ? c.n : 1;
          for (int i = 0; i < distinct; ++i) {
            (void)fleet(dir / "prime", source, "1", 1, [&](int) { return c.cache(dir, i); });
          }
        }
        const sample s = fleet(dir, source, slow_n, c.n, [&](int i) { return c.cache(dir, i); });
        times[k].push_back(s.seconds);
        compiled[k] = std::max(compiled[k], s.compiled);
      }
    }
    // The ratio to the cold compile of the same run, then the median: drift cancels.
    for (std::size_t k = 0; k < configs.size(); ++k) {
      std::vector<double> ratios;
      for (int r = 0; r < runs; ++r) ratios.push_back(times[k][r] / times[0][r]);
      std::printf("  %-30s %7.3f s  %5.2fx cold (same run)  compiles (most in a run): %d\n",
                  configs[k].name, median(times[k]), median(ratios), compiled[k]);
    }
  }
  if (!have_redis) std::printf("  (redis-server not installed: no redis row)\n");
  return 0;
}
