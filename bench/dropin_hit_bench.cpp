// The NVRTC drop-in's cache hit (nvrtcCreateProgram + nvrtcCompileProgram + the CUBIN getters +
// nvrtcDestroyProgram through libnvrtc.so.13 of `cucore run`) against program::compile's hit for
// the same kernel, both over a directory cache, in one process; and the drop-in's miss against
// NVRTC's own compile. A driver with its own timing loop: each sample is a whole call sequence.
//
// Usage: dropin_hit_bench DROPIN_LIBNVRTC REAL_LIBNVRTC [ITERATIONS]
// Another NVRTC (the version matrix): point both sides at it, e.g. for 12.9
//   CUCORE_CUDA_HOME=ROOT CUCORE_CUDA_HOME_ONLY=1 dropin_hit_bench lib/cucore-run/libnvrtc.so.12
//   ROOT/lib/libnvrtc.so.12   (program::compile finds NVRTC and CCCL under ROOT)
#include <dlfcn.h>
#include <nvrtc.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "cucore/cache/open.hpp"
#include "cucore/program.hpp"
#include "cucore/toolkit.hpp"

namespace {

struct nvrtc_calls {
  decltype(&nvrtcCreateProgram) create;
  decltype(&nvrtcCompileProgram) compile;
  decltype(&nvrtcGetCUBINSize) cubin_size;
  decltype(&nvrtcGetCUBIN) cubin;
  decltype(&nvrtcDestroyProgram) destroy;
};

nvrtc_calls load(const char* path) {
  void* lib = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "cannot open %s: %s\n", path, ::dlerror());
    std::exit(2);
  }
  nvrtc_calls c{};
  c.create = reinterpret_cast<decltype(c.create)>(::dlsym(lib, "nvrtcCreateProgram"));
  c.compile = reinterpret_cast<decltype(c.compile)>(::dlsym(lib, "nvrtcCompileProgram"));
  c.cubin_size = reinterpret_cast<decltype(c.cubin_size)>(::dlsym(lib, "nvrtcGetCUBINSize"));
  c.cubin = reinterpret_cast<decltype(c.cubin)>(::dlsym(lib, "nvrtcGetCUBIN"));
  c.destroy = reinterpret_cast<decltype(c.destroy)>(::dlsym(lib, "nvrtcDestroyProgram"));
  return c;
}

std::size_t compile_with(const nvrtc_calls& c, const std::string& code,
                         const std::vector<const char*>& options) {
  nvrtcProgram prog = nullptr;
  c.create(&prog, code.c_str(), "bench.cu", 0, nullptr, nullptr);
  if (c.compile(prog, static_cast<int>(options.size()), options.data()) != NVRTC_SUCCESS) {
    std::fprintf(stderr, "compile failed\n");
    std::exit(1);
  }
  std::size_t size = 0;
  c.cubin_size(prog, &size);
  std::string out(size, '\0');
  c.cubin(prog, out.data());
  c.destroy(&prog);
  return size;
}

double median_us(int iterations, const std::function<void()>& fn) {
  std::vector<double> samples;
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    samples.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DROPIN_LIBNVRTC REAL_LIBNVRTC [ITERATIONS]\n", argv[0]);
    return 2;
  }
  const int iterations = argc > 3 ? std::atoi(argv[3]) : 200;
  const auto work = std::filesystem::temp_directory_path() /
                    ("cucore-dropin-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(work);
  ::setenv("CUCORE_RUN_CACHE", ("dir:" + (work / "dropin").string()).c_str(), 1);
  ::setenv("CUCORE_RUN_NVRTC", argv[2], 1);
  ::setenv("CUCORE_RUN_NVRTC12", argv[2], 1);  // the .so.12 drop-in's real library
  const nvrtc_calls dropin = load(argv[1]);
  const nvrtc_calls real = load(argv[2]);
  auto cache = cucore::open_program_cache("dir:" + (work / "program").string());

  struct kernel {
    const char* label;
    std::string code;
    std::vector<std::string> include_path;
  };
  // CCCL of the toolkit whose NVRTC is measured (the first toolkit include directory with it).
  std::string cccl = "/usr/local/cuda/include";
  for (const auto& dir : cucore::toolkit::include_directories()) {
    if (std::filesystem::exists(dir + "/cuda/std/complex")) {
      cccl = dir;
      break;
    }
  }
  const std::vector<kernel> kernels = {
      {"saxpy (no headers)",
       "extern \"C\" __global__ void saxpy(float a, const float* x, float* y, int n) {\n"
       "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }\n",
       {}},
      {"<cuda/std/complex>",
       "#include <cuda/std/complex>\n"
       "extern \"C\" __global__ void c(cuda::std::complex<float>* p) { p[0] *= p[1]; }\n",
       {cccl}},
  };
  std::printf("per call, median of %d (one process, directory caches)\n", iterations);
  for (const auto& k : kernels) {
    std::vector<std::string> flags = {"-arch=sm_90", "-std=c++17"};
    for (const auto& dir : k.include_path) flags.push_back("-I" + dir);
    std::vector<const char*> options;
    for (const auto& f : flags) options.push_back(f.c_str());

    cucore::program_options po;
    po.name = "bench.cu";
    po.arch = "sm_90";
    po.std = "c++17";
    po.include_path = k.include_path;
    po.toolkit_include_path = false;
    auto program_hit = [&] {
      cucore::program p(k.code, cucore::source_type::cxx, po);
      (void)p.compile(cucore::code_type::cubin, *cache);
    };
    program_hit();                          // miss: stores
    compile_with(dropin, k.code, options);  // miss: stores
    const double program_us = median_us(iterations, program_hit);
    const double dropin_us = median_us(iterations, [&] { compile_with(dropin, k.code, options); });
    // Misses: each sample a source never compiled before (a comment makes a new key), NVRTC's
    // own compile of such a source interleaved with it, so that load falls on both alike.
    const int slow = std::max(5, iterations / 20);
    std::vector<double> real_samples, miss_samples;
    for (int i = 0; i < slow; ++i) {
      const std::string suffix = "// " + std::to_string(i) + "\n";
      real_samples.push_back(
          median_us(1, [&] { compile_with(real, k.code + "// real " + suffix, options); }));
      miss_samples.push_back(
          median_us(1, [&] { compile_with(dropin, k.code + "// miss " + suffix, options); }));
    }
    std::sort(real_samples.begin(), real_samples.end());
    std::sort(miss_samples.begin(), miss_samples.end());
    const double real_us = real_samples[real_samples.size() / 2];
    const double miss_us = miss_samples[miss_samples.size() / 2];
    std::printf("%s:\n", k.label);
    std::printf("  program::compile hit  %10.1f us\n", program_us);
    std::printf("  drop-in hit           %10.1f us  (%.2fx program::compile's)\n", dropin_us,
                dropin_us / program_us);
    std::printf("  NVRTC compile         %10.1f us\n", real_us);
    std::printf("  drop-in miss          %10.1f us  (%+.1f %% over NVRTC)\n", miss_us,
                (miss_us / real_us - 1) * 100);
  }
  std::filesystem::remove_all(work);
  return 0;
}
