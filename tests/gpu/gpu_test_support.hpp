// Shared helpers of the GPU tests: a fixture that skips cleanly without a device, the test kernels
// compiled once per process through a real program cache, fresh random inputs and poison.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "cucore/cache/file_stream.hpp"
#include "cucore/object_code.hpp"
#include "cucore/program.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "cucore/toolkit.hpp"

namespace cucore::gpu_testing {

// Every GPU test derives from this: without a device it skips with a message saying why.
class gpu_test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (toolkit::device_count() == 0) {
      GTEST_SKIP() << "no CUDA device (or no driver): the GPU tests run on a machine with a GPU";
    }
  }
};

// Under compute-sanitizer (or another tool injected through CUDA_INJECTION64_PATH) kernel launches
// may complete before the launch call returns: checks that a launch is *still running* are skipped
// there, the results are still checked.
inline bool launches_may_block() {
  if (std::getenv("CUDA_INJECTION64_PATH") != nullptr) return true;
  // compute-sanitizer may inject itself without that variable: look for its libraries.
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("sanitizer-collection") != std::string::npos ||
        line.find("TreeLauncherTargetInjection") != std::string::npos) {
      return true;
    }
  }
  return false;
}

// The kernels the tests launch. C++ templates are found through name expressions.
inline constexpr const char* kKernels = R"(
template <class T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Spins for `cycles` clock cycles, then out = 2 * in: a launch that is still running when the
// host goes on.
extern "C" __global__ void spin_scale(const float* in, float* out, int n, long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * in[i];
}

extern "C" __global__ void add_one(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + 1.0f;
}

extern "C" __global__ void reverse_static_shared(const float* in, float* out) {
  __shared__ float tile[256];
  tile[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = tile[255 - threadIdx.x];
}

extern "C" __global__ void sum_dynamic_shared(const float* in, float* out, int n) {
  extern __shared__ float staged[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) staged[i] = in[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += staged[i];
    out[0] = static_cast<float>(sum);
  }
}

struct mixed {
  int i;
  double d;
  float f;
};

extern "C" __global__ void struct_argument(mixed m, char c, short s, double* out) {
  out[0] = m.i + m.d + m.f + c + s;
}

extern "C" __global__ void cluster_rank(unsigned* out) {
#if __CUDA_ARCH__ >= 900
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  out[blockIdx.x] = rank;
#else
  out[blockIdx.x] = 0xffffffffu;
#endif
}
)";

// Host-side copy of the kernels' `mixed` parameter.
struct mixed {
  int i;
  double d;
  float f;
};

inline const std::vector<std::string>& kernel_names() {
  static const std::vector<std::string> names = {"saxpy<float>", "saxpy<double>"};
  return names;
}

// A program cache of this process's own (a fresh directory, removed at exit).
class scratch_cache {
 public:
  scratch_cache() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "cucore-gpu-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    root_ = pattern;
    cache_ = std::make_unique<file_stream_program_cache>(root_);
  }
  scratch_cache(const scratch_cache&) = delete;
  scratch_cache& operator=(const scratch_cache&) = delete;
  ~scratch_cache() {
    cache_.reset();
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  file_stream_program_cache& cache() { return *cache_; }

 private:
  std::filesystem::path root_;
  std::unique_ptr<file_stream_program_cache> cache_;
};

inline program_options kernel_options() {
  program_options o;
  o.name = "gpu_test_kernels.cu";
  o.std = "c++17";
  o.arch = toolkit::current_device_arch();  // the GPU's own
  return o;
}

// The test kernels as a cubin for this GPU, compiled once per process through the cache.
inline const object_code& test_kernels() {
  static scratch_cache* cache = new scratch_cache;  // leaked: outlives every test
  static const object_code code = [] {
    program p(kKernels, source_type::cxx, kernel_options());
    return p.compile(code_type::cubin, kernel_names(), &cache->cache());
  }();
  return code;
}

// A seed of its own for each call, printed by the tests on failure.
inline std::uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed, T lo = T(-4), T hi = T(4)) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<T> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) {
    do {
      x = dist(gen);
    } while (x == T(0));  // never zeros
  }
  return v;
}

// A float that no kernel here computes.
inline constexpr float kPoison = -1.0e30f;

// How many elements of `got` differ from `want` (a size mismatch counts as one more).
template <class T>
int mismatches(const std::vector<T>& got, const std::vector<T>& want) {
  int bad = got.size() == want.size() ? 0 : 1;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) bad += got[i] != want[i];
  return bad;
}

// out[i] = 2 * v[i]: what the `twice` and `spin_scale` kernels compute.
inline std::vector<float> doubled(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = 2.0f * v[i];
  return out;
}

// A kernel's input and output on a stream: `host`, n random floats (from a fresh `seed`, for the
// failure messages), uploaded to `in`; `out`, n floats of kPoison.
struct kernel_io {
  kernel_io(int n, const stream& s)
      : seed(fresh_seed()),
        host(random_values<float>(static_cast<std::size_t>(n), seed)),
        in(n * sizeof(float), s),
        out(n * sizeof(float), s) {
    in.copy_from(host, s);
    out.fill(kPoison, s);
  }
  std::uint64_t seed;
  std::vector<float> host;
  buffer in;
  buffer out;
};

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace cucore::gpu_testing
