// What the store gate costs a miss (docs/cache-keys.md, "Observed inputs"): the same uncached
// compile with and without an observation of what it reads, plus the gate's check of the
// observation against the key, interleaved round by round in one process. A driver of compiles,
// not Google Benchmark (each sample is a second or more).
//
//   observe_bench [--rounds N] [--corpus DIR]
//   observe_bench --once plain|observed     one CUB compile (with the key and the gate), for
//                                           valgrind --tool=callgrind's instruction counts
//
// Kernels: a CUB BlockReduce (the toolkit's CCCL) and the corpus's CuTe tiled copy (CUTLASS 4.2
// from scripts/fetch-corpus.sh; default .cache/corpus under the source tree; skipped without it).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "cucore/cucore.hpp"
#include "observe/compiler_observer.hpp"

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

namespace {

struct kernel {
  std::string name;
  std::string code;
  cucore::program_options options;
};

// This process's CPU time (user + system): steadier than wall time on a shared machine.
double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  const auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::vector<kernel> kernels(const fs::path& corpus) {
  std::vector<kernel> out;
  kernel cub;
  cub.name = "cub_block_reduce";
  cub.code =
      "#include <cub/block/block_reduce.cuh>\n"
      "extern \"C\" __global__ void k(const int* in, int* out) {\n"
      "  using R = cub::BlockReduce<int, 128>;\n  __shared__ R::TempStorage t;\n"
      "  int v = R(t).Sum(in[threadIdx.x]);\n  if (threadIdx.x == 0) *out = v;\n}\n";
  cub.options.arch = "sm_90";
  cub.options.auto_pch = false;  // every compile a full miss, as a fresh process's
  cub.options.name = "cub_block_reduce.cu";
  out.push_back(cub);
  const fs::path cute_file = fs::path(CUCORE_SOURCE_DIR) / "tests/data/corpus/cute_tiled_copy.cu";
  if (fs::exists(corpus / "cutlass" / "include") && fs::exists(cute_file)) {
    std::ifstream in(cute_file);
    kernel cute;
    cute.name = "cute_tiled_copy";
    cute.code.assign(std::istreambuf_iterator<char>(in), {});
    cute.options.arch = "sm_90";
    cute.options.auto_pch = false;
    cute.options.name = "cute_tiled_copy.cu";
    cute.options.include_path = {(corpus / "cutlass" / "include").string()};
    cute.options.std = "c++17";
    cute.options.device_as_default_execution_space = true;
    out.push_back(cute);
  } else {
    std::fprintf(stderr, "observe_bench: no CuTe corpus under %s: CUB only\n", corpus.c_str());
  }
  return out;
}

// The key a miss of `k`'s cubin makes.
cucore::program_cache_key key_of(const kernel& k) {
  cucore::program_cache_key_inputs in;
  in.code = k.code;
  in.code_type = cucore::source_type::cxx;
  in.options = k.options;
  in.target = cucore::code_type::cubin;
  return cucore::make_program_cache_key(in);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  fs::path corpus = fs::path(CUCORE_SOURCE_DIR) / ".cache" / "corpus";
  std::string once;  // plain or observed: one compile of the CUB kernel, for an instruction count
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
    if (a == "--corpus") corpus = argv[i + 1];
    if (a == "--once") once = argv[i + 1];
  }
  if (!once.empty()) {
    // Under `valgrind --tool=callgrind`: the difference of the two runs' totals is what the
    // observation and the gate cost, free of the machine's noise (both make the key, as a miss
    // does).
    const kernel k = kernels(corpus).front();
    cucore::program p(k.code, cucore::source_type::cxx, k.options);
    const cucore::program_cache_key key = key_of(k);
    if (once == "plain") {
      (void)p.compile(cucore::code_type::cubin);
      return 0;
    }
    cucore::detail::compiler_observation watch;
    (void)p.compile(cucore::code_type::cubin);
    return key.check_store(watch.finish()) ? 1 : 0;
  }
  // CPU seconds per compile (medians), the median of each round's observed/plain ratio, the
  // gate's check alone (wall), and how many distinct inputs the observation held.
  std::printf("%-18s %6s %12s %12s %9s %12s %8s\n", "kernel", "rounds", "plain_cpu_s",
              "observed_cpu_s", "ratio", "gate_check_ms", "inputs");
  for (const auto& k : kernels(corpus)) {
    const cucore::program_cache_key key = key_of(k);
    cucore::program warm(k.code, cucore::source_type::cxx, k.options);
    (void)warm.compile(cucore::code_type::cubin);  // NVRTC loaded, files in the page cache
    std::vector<double> plain, observed, gate, paired;
    std::size_t inputs = 0;
    bool stored = true;
    const auto run_plain = [&] {
      cucore::program p(k.code, cucore::source_type::cxx, k.options);
      const double t = cpu_seconds();
      (void)p.compile(cucore::code_type::cubin);
      return cpu_seconds() - t;
    };
    const auto run_observed = [&] {
      cucore::program p(k.code, cucore::source_type::cxx, k.options);
      const double t = cpu_seconds();
      cucore::detail::compiler_observation watch;
      (void)p.compile(cucore::code_type::cubin);
      const auto seen = watch.finish();
      const auto g = clock_type::now();
      stored = stored && !key.check_store(seen);
      gate.push_back(seconds_since(g) * 1e3);
      inputs = seen.inputs.size();
      return cpu_seconds() - t;
    };
    for (int r = 0; r < rounds; ++r) {
      // Alternating which goes first: the second of a pair finds warmer caches.
      double a = 0, b = 0;
      if (r % 2 == 0) {
        a = run_plain();
        b = run_observed();
      } else {
        b = run_observed();
        a = run_plain();
      }
      plain.push_back(a);
      observed.push_back(b);
      paired.push_back(b / a);
    }
    std::printf("%-18s %6d %12.4f %12.4f %9.4f %12.3f %8zu%s\n", k.name.c_str(), rounds,
                median(plain), median(observed), median(paired), median(gate), inputs,
                stored ? "" : "  (the gate refused: see CUCORE_LOG)");
  }
  return 0;
}
