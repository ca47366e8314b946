// Automatic precompiled headers against plain NVRTC (docs/compilation.md, "Precompiled headers";
// docs/performance.md): one process compiles 10 different kernels that share a CUB or a CuTe
// #include prefix, each kernel with and without an automatic PCH, interleaved (plain first in
// even rounds, PCH first in odd ones) so that the load of a shared machine falls on both alike.
// Each round starts as a fresh process would (clear_auto_pch). Rows: per kernel, the medians over
// the rounds of the wall and CPU (this thread's) seconds of both, and their ratio. Then the peak
// memory (maxrss) of a child process compiling the 10 kernels plain, and of one with automatic
// PCH, and the bytes of PCH files kept.
//
// A driver of compiles, not Google Benchmark (each sample is seconds). Usage:
//   pch_bench [--rounds N] [--set cub|cute|all] [--corpus DIR]
// The CuTe set needs the header corpus (scripts/fetch-corpus.sh; default .cache/corpus).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "cucore/program.hpp"
#include "pch/auto_pch.hpp"

namespace {

namespace fs = std::filesystem;
using namespace cucore;

double thread_cpu() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::string load() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct workload {
  std::string name;
  program_options options;
  std::vector<std::string> kernels;  // 10 programs sharing one #include prefix
};

// CUB block algorithms: the corpus kernel's prefix; each kernel a different block shape and mix.
workload cub_set() {
  workload w;
  w.name = "cub";
  w.options.arch = "sm_90";
  w.options.std = "c++17";
  w.options.name = "cub_kernel.cu";
  const std::string prefix =
      "#include <cub/block/block_load.cuh>\n#include <cub/block/block_radix_sort.cuh>\n"
      "#include <cub/block/block_reduce.cuh>\n#include <cub/block/block_scan.cuh>\n"
      "#include <cub/block/block_store.cuh>\n#include <cuda/std/cstdint>\n";
  for (int i = 0; i < 10; ++i) {
    const int threads = 64 * (1 + i % 4);
    const int items = 1 + i % 3;
    const bool sort = i % 2 == 0;
    std::string k = prefix;
    k += "constexpr int T = " + std::to_string(threads) + ", I = " + std::to_string(items) + ";\n";
    k += "extern \"C\" __global__ void __launch_bounds__(T) k" + std::to_string(i) +
         "(const unsigned* in, unsigned* out, unsigned long long* total) {\n"
         "  using Load = cub::BlockLoad<unsigned, T, I, cub::BLOCK_LOAD_TRANSPOSE>;\n"
         "  using Sort = cub::BlockRadixSort<unsigned, T, I>;\n"
         "  using Scan = cub::BlockScan<unsigned, T>;\n"
         "  using Reduce = cub::BlockReduce<unsigned long long, T>;\n"
         "  __shared__ union { typename Load::TempStorage l; typename Sort::TempStorage s;\n"
         "    typename Scan::TempStorage c; typename Reduce::TempStorage r; } tmp;\n"
         "  unsigned v[I];\n"
         "  Load(tmp.l).Load(in + blockIdx.x * T * I, v);\n"
         "  __syncthreads();\n";
    k += sort ? "  Sort(tmp.s).Sort(v);\n" : "  Scan(tmp.c).ExclusiveSum(v, v);\n";
    k += "  __syncthreads();\n"
         "  unsigned long long s = 0;\n"
         "  for (int j = 0; j < I; ++j) { s += v[j] * " +
         std::to_string(i + 1) +
         "u; out[(blockIdx.x * T + threadIdx.x) * I + j] = v[j]; }\n"
         "  __syncthreads();\n"
         "  s = Reduce(tmp.r).Sum(s);\n"
         "  if (threadIdx.x == 0) total[blockIdx.x] = s;\n}\n";
    w.kernels.push_back(std::move(k));
  }
  return w;
}

// CuTe: the corpus's tiled copy with ten tile shapes (and a scale each).
workload cute_set(const fs::path& corpus) {
  workload w;
  w.name = "cute";
  w.options.arch = "sm_90";
  w.options.std = "c++17";
  w.options.device_as_default_execution_space = true;
  w.options.include_path = {(corpus / "cutlass" / "include").string()};
  w.options.name = "cute_kernel.cu";
  for (int i = 0; i < 10; ++i) {
    const int m = 32 << (i % 3);
    const int n = 32 << (i % 2);  // at most 128 x 64 floats: 32 KiB of shared memory
    std::string k = "#include <cute/tensor.hpp>\n";
    k += "using namespace cute;\nconstexpr int TM = " + std::to_string(m) +
         ", TN = " + std::to_string(n) + ";\n";
    k += "extern \"C\" __global__ void k" + std::to_string(i) +
         "(const float* in, float* out, int rows, int cols) {\n"
         "  Tensor g_in = make_tensor(make_gmem_ptr(in), make_shape(rows, cols), "
         "make_stride(cols, Int<1>{}));\n"
         "  Tensor g_out = make_tensor(make_gmem_ptr(out), make_shape(rows, cols), "
         "make_stride(cols, Int<1>{}));\n"
         "  auto tile = make_shape(Int<TM>{}, Int<TN>{});\n"
         "  auto coord = make_coord(static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y));\n"
         "  Tensor t_in = local_tile(g_in, tile, coord);\n"
         "  Tensor t_out = local_tile(g_out, tile, coord);\n"
         "  __shared__ float smem[TM * TN];\n"
         "  Tensor s = make_tensor(make_smem_ptr(smem), make_layout(tile, LayoutRight{}));\n"
         "  auto copy = make_tiled_copy(Copy_Atom<UniversalCopy<float>, float>{},\n"
         "      Layout<Shape<_8, _16>, Stride<_16, _1>>{}, Layout<Shape<_1, _1>>{});\n"
         "  auto thr = copy.get_thread_slice(threadIdx.x);\n"
         "  cute::copy(copy, thr.partition_S(t_in), thr.partition_D(s));\n"
         "  __syncthreads();\n"
         "  for (int j = threadIdx.x; j < TM * TN; j += blockDim.x) s(j) *= " +
         std::to_string(i + 2) +
         ".0f;\n"
         "  __syncthreads();\n"
         "  cute::copy(copy, thr.partition_S(s), thr.partition_D(t_out));\n}\n";
    w.kernels.push_back(std::move(k));
  }
  return w;
}

struct sample {
  double wall = 0;
  double cpu = 0;
  auto_pch_status status = auto_pch_status::off;
};

sample compile_one(const std::string& code, program_options o, bool automatic) {
  if (!automatic) o.auto_pch = false;
  program p(code, source_type::cxx, o);
  const double c0 = thread_cpu();
  const auto t0 = std::chrono::steady_clock::now();
  p.compile(code_type::cubin);
  sample s;
  s.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.cpu = thread_cpu() - c0;
  s.status = p.last_auto_pch();
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void timing(const workload& w, int rounds) {
  const std::size_t n = w.kernels.size();
  std::vector<std::vector<sample>> plain(n), pch(n);
  for (int r = 0; r < rounds; ++r) {
    clear_auto_pch();
    for (std::size_t i = 0; i < n; ++i) {
      if ((r + static_cast<int>(i)) % 2 == 0) {
        plain[i].push_back(compile_one(w.kernels[i], w.options, false));
        pch[i].push_back(compile_one(w.kernels[i], w.options, true));
      } else {
        pch[i].push_back(compile_one(w.kernels[i], w.options, true));
        plain[i].push_back(compile_one(w.kernels[i], w.options, false));
      }
    }
    std::fprintf(stderr, "  %s round %d done (load %s)\n", w.name.c_str(), r + 1, load().c_str());
  }
  std::printf("\n%s: %zu kernels, %d rounds (medians); load %s\n", w.name.c_str(), n, rounds,
              load().c_str());
  std::printf("%-4s %-10s %9s %9s %7s %9s %9s %7s\n", "#", "auto PCH", "plain s", "PCH s", "ratio",
              "plain cpu", "PCH cpu", "ratio");
  double worst_any = 0;
  std::vector<double> ratio(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<double> pw, qw, pc, qc;
    for (const auto& s : plain[i]) pw.push_back(s.wall), pc.push_back(s.cpu);
    for (const auto& s : pch[i]) qw.push_back(s.wall), qc.push_back(s.cpu);
    const double rw = median(qw) / median(pw), rc = median(qc) / median(pc);
    std::printf("%-4zu %-10s %9.3f %9.3f %7.2f %9.3f %9.3f %7.2f\n", i + 1,
                std::string(to_string(pch[i].front().status)).c_str(), median(pw), median(qw), rw,
                median(pc), median(qc), rc);
    ratio[i] = rw;
    worst_any = std::max(worst_any, rw);
  }
  std::vector<double> later;
  for (std::size_t i = 2; i < n; ++i) later.push_back(ratio[i]);
  std::printf("compiles 3..%zu (from the image): ratio median %.2f, max %.2f; worst of all %.2f\n",
              n, median(later), *std::max_element(later.begin(), later.end()), worst_any);
  const auto state = detail::auto_pch_state();
  std::printf("PCH files kept: %zu, %.0f MiB\n", state.images,
              static_cast<double>(state.bytes) / (1 << 20));
  std::fflush(stdout);
}

// Peak memory of a fresh process (this program again, --memory) compiling the set's kernels
// plain or with automatic PCH: its maxrss.
long child_maxrss_kib(const std::string& set, const fs::path& corpus, bool automatic) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string self = fs::read_symlink("/proc/self/exe").string();
    const std::string mode = automatic ? "auto" : "plain";
    const std::string dir = corpus.string();
    ::execl(self.c_str(), self.c_str(), "--memory", mode.c_str(), "--set", set.c_str(), "--corpus",
            dir.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  rusage u{};
  ::wait4(pid, &status, 0, &u);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? u.ru_maxrss : -1;
}

// NVRTC's own files across processes: a child makes an image of kernel 1 (--create-pch), a fresh
// child compiles kernel 2 with it (--use-pch). Prints that compile's seconds against a plain one
// in the same fresh child, and what NVRTC logged.
void across_processes(const std::string& set, const fs::path& corpus) {
  const fs::path file = fs::temp_directory_path() / ("pch_bench_" + std::to_string(::getpid()));
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  auto run = [&](const std::string& mode) {
    const std::string command = "'" + self + "' --explicit " + mode + " --set " + set +
                                " --corpus '" + corpus.string() + "' --file '" + file.string() +
                                "'";
    std::string out;
    if (FILE* f = ::popen(command.c_str(), "r")) {
      char buf[4096];
      while (std::fgets(buf, sizeof buf, f) != nullptr) out += buf;
      ::pclose(f);
    }
    return out;
  };
  run("create");
  std::printf("another process's image (--use-pch, a fresh process): %s", run("use").c_str());
  std::error_code ec;
  fs::remove(file, ec);
}

// The child side of across_processes.
int explicit_pch(const workload& w, const std::string& mode, const std::string& file) {
  if (mode == "create") {
    program_options o = w.options;
    o.create_pch = file;
    program(w.kernels[0], source_type::cxx, o).compile(code_type::cubin);
    return 0;
  }
  program_options o = w.options;
  o.use_pch = file;
  o.pch_verbose = true;
  program_options plain_options = w.options;
  plain_options.auto_pch = false;
  const auto t0 = std::chrono::steady_clock::now();
  program(w.kernels[1], source_type::cxx, plain_options).compile(code_type::cubin);
  const auto t1 = std::chrono::steady_clock::now();
  program used(w.kernels[1], source_type::cxx, o);
  used.compile(code_type::cubin);
  const auto t2 = std::chrono::steady_clock::now();
  std::string said = used.log();
  for (auto& c : said) c = c == '\n' ? ' ' : c;
  std::printf("%.3f s against %.3f s plain (%.2fx); NVRTC: %.160s\n",
              std::chrono::duration<double>(t2 - t1).count(),
              std::chrono::duration<double>(t1 - t0).count(),
              std::chrono::duration<double>(t2 - t1).count() /
                  std::chrono::duration<double>(t1 - t0).count(),
              said.empty() ? "(nothing)" : said.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  std::string set = "all";
  std::string memory;               // "plain" or "auto": a child measured for its peak memory
  std::string explicit_mode, file;  // a child of across_processes
  fs::path corpus = fs::path(CUCORE_SOURCE_DIR) / ".cache" / "corpus";
  if (const char* d = std::getenv("CUCORE_CORPUS_DIR"); d != nullptr && *d != '\0') corpus = d;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
    if (a == "--set") set = argv[i + 1];
    if (a == "--corpus") corpus = argv[i + 1];
    if (a == "--memory") memory = argv[i + 1];
    if (a == "--explicit") explicit_mode = argv[i + 1];
    if (a == "--file") file = argv[i + 1];
  }
  if (!explicit_mode.empty()) {
    return explicit_pch(set == "cute" ? cute_set(corpus) : cub_set(), explicit_mode, file);
  }
  if (!memory.empty()) {
    const workload w = set == "cute" ? cute_set(corpus) : cub_set();
    for (const auto& k : w.kernels) compile_one(k, w.options, memory == "auto");
    return 0;
  }
  std::printf("pch_bench: NVRTC PCH heap %zu MiB, TMPDIR %s; load at start %s\n",
              nvrtc_pch_heap_size() >> 20, std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp",
              load().c_str());
  std::vector<workload> sets;
  if (set == "cub" || set == "all") sets.push_back(cub_set());
  if (set == "cute" || set == "all") {
    if (fs::exists(corpus / "cutlass" / "include" / "cute")) {
      sets.push_back(cute_set(corpus));
    } else {
      std::printf("no CuTe headers at %s: run scripts/fetch-corpus.sh (CuTe set skipped)\n",
                  corpus.c_str());
    }
  }
  for (const auto& w : sets) {
    timing(w, rounds);
    clear_auto_pch();
    const long plain = child_maxrss_kib(w.name, corpus, false);
    const long pch = child_maxrss_kib(w.name, corpus, true);
    std::printf(
        "peak memory (maxrss of a process compiling the 10 kernels): plain %.0f MiB, "
        "automatic PCH %.0f MiB\n",
        static_cast<double>(plain) / 1024, static_cast<double>(pch) / 1024);
    across_processes(w.name, corpus);
  }
  std::printf("load at the end %s\n", load().c_str());
}
