// The compile server against in-process compiles (docs/compile-server.md, "Measured"). A driver of
// compiles, not Google Benchmark (samples are seconds). Parts:
//   fresh:    a fresh `cucore compile` process misses a CUB kernel whose #include prefix another
//             process compiled before: --no-server against --server (medians, interleaved);
//   threads:  K distinct CUB kernels, sharing a prefix, compiled by K threads of this process
//             through the server, against the same K compiled serially in-process;
//   files:    the same, each round's kernel in a new file (B1.cu, B2.cu, ...) after A.cu's image,
//             outputs checked against plain (module ids masked) (--only files: this part alone);
//   overhead: a small kernel with no #include (no PCH) through the server against in-process;
//   dropin:   K distinct CUB kernels compiled by T threads of an unmodified NVRTC program
//             (bench/nvrtc_threads.c) under `cucore run` with no flag (empty cache, no server
//             running: the drop-in starts one) and `--no-server`, against the
//             same program plain, serial and threaded; then another process's K kernels of the
//             prefix (its images made by the first);
//   memory:   each worker's peak resident memory after the above.
// Usage: compile_server_bench [--rounds N] [--kernels K] [--threads T] [--workers W]
//                             [--cuda-home DIR] [--only dropin|files]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cucore/program.hpp"
#include "cucore/server.hpp"

#if !defined(CUCORE_CLI_PATH) || !defined(CUCORE_NVRTC_THREADS_PATH)
#error \
    "CUCORE_CLI_PATH and CUCORE_NVRTC_THREADS_PATH must point at the cucore tool and nvrtc_threads"
#endif

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

std::string cub_kernel(int i, const std::string& key = "int") {
  return "#include <cub/block/block_radix_sort.cuh>\n#include <cuda/std/complex>\n"
         "__global__ void sort" +
         std::to_string(i) +
         "(int* d) {\n"
         "  using S = cub::BlockRadixSort<" +
         key + ", 128, " + std::to_string(1 + i % 8) +
         ">;\n"
         "  __shared__ typename S::TempStorage t;\n"
         "  " +
         key + " k[" + std::to_string(1 + i % 8) +
         "];\n"
         "  for (int j = 0; j < " +
         std::to_string(1 + i % 8) + "; ++j) k[j] = d[threadIdx.x * 8 + j] + " + std::to_string(i) +
         ";\n"
         "  S(t).Sort(k);\n"
         "  d[threadIdx.x] = k[0];\n"
         "}\n";
}

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double run_timed(const std::string& command) {
  const auto t = clock_type::now();
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "failed: %s\n", command.c_str());
    std::exit(1);
  }
  return seconds_since(t);
}

cucore::program_options options(cucore::compile_server_mode mode, int i) {
  cucore::program_options o;
  o.arch = "sm_90";
  // One name for every kernel, as a program compiling many kernels gives (NVRTC's
  // default_program in cuda.core).
  o.name = "bench.cu";
  (void)i;
  o.compile_server = mode;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5, kernels = 6, threads = 0;
  int workers = static_cast<int>(std::thread::hardware_concurrency());
  std::string cuda_home = std::getenv("CUDA_HOME") ? std::getenv("CUDA_HOME") : "/usr/local/cuda";
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--kernels")) kernels = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--workers")) workers = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--cuda-home")) cuda_home = argv[i + 1];
    if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];
  }
  if (threads <= 0) threads = kernels;
  char pattern[] = "/tmp/cucore-server-bench-XXXXXX";
  const fs::path root = ::mkdtemp(pattern);
  const fs::path dir = root / "server";
  ::setenv("CUCORE_SERVER_DIR", dir.c_str(), 1);
  const std::string cli = CUCORE_CLI_PATH;
  const std::string start = cli + " server start --dir " + dir.string() + " --workers " +
                            std::to_string(workers) + " >/dev/null";
  run_timed(start);
  const auto wait_for_images = [&] {
    for (int i = 0; i < 6000; ++i) {
      const auto s = cucore::query_compile_server(dir);
      if (s && s->images_being_made == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };

  if (only.empty() || only == "dropin") {
    // dropin: an unmodified program's threads under `cucore run`, empty caches, a fresh server
    // (no image of the prefix anywhere), against the program plain: serial, and threaded (NVRTC
    // serializes a process's compiles).
    // The toolkit's NVRTC first, as a program run against it finds it (and cucore's own libraries
    // where the caller's path has them).
    const char* inherited = std::getenv("LD_LIBRARY_PATH");
    const std::string lib = "LD_LIBRARY_PATH=" + cuda_home + "/lib64" +
                            (inherited && *inherited ? std::string(":") + inherited : "") + " ";
    const auto program = [&](int count, int with_threads, int first) {
      return std::string(CUCORE_NVRTC_THREADS_PATH) + " " + std::to_string(count) + " " +
             std::to_string(with_threads) + " " + std::to_string(first) + " sm_90 " + cuda_home +
             "/include/cccl " + cuda_home + "/include";
    };
    const double plain_serial = run_timed(lib + program(kernels, 1, 0));
    const double plain_threads = run_timed(lib + program(kernels, threads, kernels));
    // The floor of any scheme of processes: K plain processes at once, a kernel each (no key, no
    // server; what NVRTC itself costs when the machine compiles K at once).
    std::string at_once = "(";
    for (int i = 0; i < kernels; ++i) at_once += lib + program(1, 1, 4 * kernels + i) + " & ";
    at_once += "wait)";
    const double floor = run_timed(at_once);
    const auto empty_cache = [&](int n) {
      const fs::path c = root / ("cache" + std::to_string(n));
      fs::create_directories(c);
      return "--cache dir:" + c.string() + " ";
    };
    // In the program (--no-server), then plain `cucore run` with no server running: the drop-in
    // starts the user's server (here CUCORE_SERVER_DIR's) on its first miss.
    const double in_program = run_timed(lib + cli + " run --no-server " + empty_cache(0) + "-- " +
                                        program(kernels, threads, 5 * kernels));
    cucore::stop_compile_server(dir);
    ::unsetenv("CUCORE_COMPILE_SERVER");
    ::setenv("CUCORE_SERVER_WORKERS", std::to_string(workers).c_str(), 1);
    const std::string run = lib + cli + " run ";
    const double served_threads =
        run_timed(run + empty_cache(1) + "-- " + program(kernels, threads, 2 * kernels));
    wait_for_images();
    // Another process, other kernels of the prefix: its misses start from the first's images.
    const double served_second =
        run_timed(run + empty_cache(2) + "-- " + program(kernels, threads, 3 * kernels));
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const double target = 1.3 / std::min(threads, cores);
    std::printf(
        "unmodified program, %d distinct CUB kernels, %d threads, %d workers, %d cores:\n"
        "  plain serial %.2f s; plain %d threads %.2f s (%.2fx); %d plain processes at once "
        "(the floor) %.2f s (%.3fx)\n"
        "  under cucore run --no-server %.2f s: %.2fx\n"
        "  under cucore run (no flag: the server started on the first miss) %.2f s: %.2fx of "
        "plain serial (target %.3fx)\n"
        "  a second process, other kernels of the prefix: %.2f s: %.2fx\n",
        kernels, threads, workers, cores, plain_serial, threads, plain_threads,
        plain_threads / plain_serial, kernels, floor, floor / plain_serial, in_program,
        in_program / plain_serial, served_threads, served_threads / plain_serial, target,
        served_second, served_second / plain_serial);
    std::fflush(stdout);
  }
  if (only == "dropin") {
    cucore::stop_compile_server(dir);
    std::error_code ec;
    fs::remove_all(root, ec);
    return 0;
  }

  // fresh: kernel 0 once through the server (its worker makes the prefix's image), then each
  // round a fresh process compiles another kernel of the prefix, plain and through the server.
  // One file name (kernel.cu, rewritten), as a script that compiles its kernel does.
  const std::string kernel_file = (root / "kernel.cu").string();
  auto write_kernel = [&](int i) { std::ofstream(kernel_file) << cub_kernel(100 + i); };
  const std::string compile =
      cli + " compile --arch sm_90 --cache none -o /dev/null " + kernel_file + " >/dev/null ";
  write_kernel(0);
  run_timed(compile + "--server");
  wait_for_images();  // made after kernel 0's compile, off its critical path
  std::vector<double> plain, served;
  for (int r = 1; r <= rounds; ++r) {
    write_kernel(r);
    if (r % 2) plain.push_back(run_timed(compile + "--no-server"));
    served.push_back(run_timed(compile + "--server"));
    if (!(r % 2)) plain.push_back(run_timed(compile + "--no-server"));
  }
  std::printf(
      "fresh process, CUB prefix compiled before by another process (median of %d):\n"
      "  plain %.3f s, through the server %.3f s: %.2fx\n",
      rounds, median(plain), median(served), median(served) / median(plain));
  std::fflush(stdout);

  // files: the same, a new file each round (A.cu made the image; then B1.cu, B2.cu, ...): an
  // image is shared across program names the prefix cannot see (docs/compile-server.md, "Images
  // across program names"). Each output against its plain compile's, module ids masked.
  const fs::path files = root / "files";
  fs::create_directories(files);
  const auto file_compile = [&](const std::string& name, int i, const std::string& out) {
    std::ofstream(files / name) << cub_kernel(300 + i);
    return "cd " + files.string() + " && " + cli + " compile --arch sm_90 --cache none -o " +
           (root / out).string() + " " + name + " >/dev/null ";
  };
  const auto masked_file = [&](const std::string& out) {
    std::ifstream in(root / out, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    static const std::regex internal("_INTERNAL_[A-Za-z0-9_]+");
    return std::regex_replace(bytes, internal, "_INTERNAL_");
  };
  run_timed(file_compile("A.cu", 0, "a.cubin") + "--server");
  wait_for_images();
  std::vector<double> plain_files, served_files;
  int differ = 0;
  for (int r = 1; r <= rounds; ++r) {
    const std::string name = "B" + std::to_string(r) + ".cu";
    if (r % 2)
      plain_files.push_back(run_timed(file_compile(name, r, "plain.cubin") + "--no-server"));
    served_files.push_back(run_timed(file_compile(name, r, "served.cubin") + "--server"));
    if (!(r % 2))
      plain_files.push_back(run_timed(file_compile(name, r, "plain.cubin") + "--no-server"));
    differ += masked_file("plain.cubin") != masked_file("served.cubin") ? 1 : 0;
    if (std::getenv("CUCORE_BENCH_VERBOSE") != nullptr) {
      std::printf("  %s: plain %.3f s, through the server %.3f s\n", name.c_str(),
                  plain_files.back(), served_files.back());
    }
  }
  std::printf(
      "fresh process, a new file of the CUB prefix after A.cu's image (median of %d):\n"
      "  plain %.3f s, through the server %.3f s: %.2fx (target 0.5x); outputs %s\n",
      rounds, median(plain_files), median(served_files), median(served_files) / median(plain_files),
      differ == 0 ? "equal to plain (module ids masked)" : "DIFFERENT from plain");
  std::fflush(stdout);
  if (only == "files") {
    cucore::stop_compile_server(dir);
    std::error_code ec;
    fs::remove_all(root, ec);
    return differ == 0 ? 0 : 1;
  }

  // threads: K kernels of a new prefix (a radix sort over another key type: no image yet).
  auto threads_kernel = [](int i) {
    return "#include <cub/block/block_scan.cuh>\n" + cub_kernel(200 + i, "unsigned");
  };
  cucore::clear_auto_pch();
  auto t = clock_type::now();
  for (int i = 0; i < kernels; ++i) {
    cucore::program p(threads_kernel(i), cucore::source_type::cxx,
                      options(cucore::compile_server_mode::off, i));
    p.compile(cucore::code_type::cubin);
  }
  const double serial = seconds_since(t);
  // Another prefix for the server (its workers have none of it either).
  auto server_kernel = [&](int i) {
    return "#include <cub/block/block_reduce.cuh>\n" + threads_kernel(i);
  };
  cucore::clear_auto_pch();
  t = clock_type::now();
  for (int i = 0; i < kernels; ++i) {
    cucore::program p(server_kernel(i), cucore::source_type::cxx,
                      options(cucore::compile_server_mode::off, i));
    p.compile(cucore::code_type::cubin);
  }
  const double serial2 = seconds_since(t);
  t = clock_type::now();
  std::vector<std::thread> pool;
  for (int i = 0; i < kernels; ++i) {
    pool.emplace_back([&, i] {
      cucore::program p(server_kernel(i), cucore::source_type::cxx,
                        options(cucore::compile_server_mode::on, i));
      const auto t0 = clock_type::now();
      p.compile(cucore::code_type::cubin);
      if (std::getenv("CUCORE_BENCH_VERBOSE") != nullptr) {
        std::printf("  thread %d: %.2f s, %s\n", i, seconds_since(t0),
                    std::string(cucore::to_string(p.last_auto_pch())).c_str());
      }
    });
  }
  for (auto& th : pool) th.join();
  const double threaded = seconds_since(t);
  std::printf(
      "%d distinct CUB kernels, new prefix: serial in-process %.2f s (again, the server's "
      "prefix: %.2f s); %d threads through the server (%d workers) %.2f s: %.2fx\n",
      kernels, serial, serial2, kernels, workers, threaded, threaded / serial2);

  // overhead: no #include, so no PCH anywhere; distinct kernels, interleaved.
  std::vector<double> local_small, served_small;
  for (int i = 0; i < 20; ++i) {
    const std::string code = "extern \"C\" __global__ void s" + std::to_string(i) +
                             "(int* p) { p[threadIdx.x] *= " + std::to_string(i + 2) + "; }\n";
    for (int pass = 0; pass < 2; ++pass) {
      const bool via_server = (pass + i) % 2 == 1;
      cucore::program p(
          code, cucore::source_type::cxx,
          options(via_server ? cucore::compile_server_mode::on : cucore::compile_server_mode::off,
                  1000 + i));
      const auto t0 = clock_type::now();
      p.compile(cucore::code_type::cubin);
      (via_server ? served_small : local_small).push_back(seconds_since(t0));
    }
  }
  std::printf(
      "no-PCH miss (median of 20): in-process %.2f ms, through the server %.2f ms: "
      "+%.2f ms\n",
      median(local_small) * 1e3, median(served_small) * 1e3,
      (median(served_small) - median(local_small)) * 1e3);

  if (const auto s = cucore::query_compile_server(dir)) {
    std::uint64_t total = 0;
    for (const auto& w : s->workers) {
      std::printf("worker %d: %llu requests, peak %.0f MiB, now %.0f MiB\n", w.pid,
                  static_cast<unsigned long long>(w.requests), w.peak_bytes / 1048576.0,
                  w.resident_bytes / 1048576.0);
      total += w.peak_bytes;
    }
    std::printf("workers' peaks together: %.0f MiB\n", total / 1048576.0);
  }
  cucore::stop_compile_server(dir);
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}
