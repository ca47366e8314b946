// Shared helpers of the graph tests: fixtures with a fresh seed, the graph kernels (including ones
// that set a conditional node's condition), and waiting on weak references to owners, which the
// release thread drops asynchronously after CUDA destroys the last graph that holds them.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/graph/builder.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/event.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "gpu_test_support.hpp"
#include "loader/libraries.hpp"  // the driver table, for fault injection

namespace cucore::gpu_testing {

inline constexpr const char* kGraphKernels = R"(
// NVRTC knows the condition type; the setter is a device-runtime builtin (no cudadevrt needed).
extern "C" __device__ __cudart_builtin__ void CUDARTAPI
cudaGraphSetConditional(cudaGraphConditionalHandle handle, unsigned int value);

// y = a * x + y
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// y = y + 1
extern "C" __global__ void add_one(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] + 1.0f;
}

// out = 2 * in
extern "C" __global__ void twice(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * in[i];
}

// Sets the condition to *value (one thread).
extern "C" __global__ void set_condition_from(cudaGraphConditionalHandle h, const unsigned* value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) cudaGraphSetConditional(h, *value);
}

// Sets the condition to a constant (one thread).
extern "C" __global__ void set_condition(cudaGraphConditionalHandle h, unsigned value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) cudaGraphSetConditional(h, value);
}

// A loop body step: ++*counter, and keep looping while it is below `limit`.
extern "C" __global__ void count_up(cudaGraphConditionalHandle h, int* counter, int limit) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    int c = ++*counter;
    cudaGraphSetConditional(h, c < limit ? 1u : 0u);
  }
}

// *counter += 1 (one thread): counts how often a body ran.
extern "C" __global__ void bump(int* counter) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *counter += 1;
}
)";

// The graph kernels as a cubin for this GPU, compiled once per process (through the cache).
inline const object_code& graph_kernels() {
  static scratch_cache* cache = new scratch_cache;  // leaked: outlives every test
  static const object_code code = [] {
    program_options o = kernel_options();
    o.name = "graph_test_kernels.cu";
    program p(kGraphKernels, source_type::cxx, o);
    return p.compile(code_type::cubin, {}, &cache->cache());
  }();
  return code;
}

inline kernel graph_kernel(const std::string& name) {
  return graph_kernels().get_kernel(name);
}

// A graph test with a fresh seed, named in every failure's trace.
class seeded_gpu_test : public gpu_test {
 protected:
  const std::uint64_t seed = fresh_seed();

 private:
  const ::testing::ScopedTrace seed_trace_{__FILE__, __LINE__, "seed " + std::to_string(seed)};
};

// A graph test with a stream on device 0 (for allocations, uploads and launches) and a fresh seed.
class seeded_stream_test : public seeded_gpu_test {
 protected:
  void SetUp() override {
    seeded_gpu_test::SetUp();
    if (IsSkipped()) return;
    s = stream(device(0));
  }
  // (Not a member of type device: constructing one needs the driver, before SetUp can skip.)
  device dev() const { return s.device(); }
  stream s;
};

// A C host function that counts its calls in the std::atomic<int> it is given.
inline void count_call(void* data) {
  static_cast<std::atomic<int>*>(data)->fetch_add(1);
}

// The whole text of a file ("" if it cannot be read).
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A 1-D launch covering n elements.
inline launch_config cover(int n, unsigned block = 128) {
  return launch_config{dim3((static_cast<unsigned>(n) + block - 1) / block), dim3(block)};
}

// True once done() holds, polling every millisecond up to `timeout`.
template <class Done>
bool holds_within(Done&& done, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// True once `w` expired, polling up to `timeout`: owners are dropped by the release thread after
// CUDA runs the user object's destructor, which it may do asynchronously.
template <class T>
bool expires_within(const std::weak_ptr<T>& w,
                    std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  return holds_within([&w] { return w.expired(); }, timeout);
}

// True if `w` is still alive after `settle` (the release thread had time to drop it if it was
// going to): the check for "not released before its time".
template <class T>
bool still_alive_after(const std::weak_ptr<T>& w,
                       std::chrono::milliseconds settle = std::chrono::milliseconds(200)) {
  std::this_thread::sleep_for(settle);
  return !w.expired();
}

// Weak references to owners a test dropped, each with a name for the failure message: the checks
// that the graphs keep them all alive, and that they are all released in the end.
class watched_owners {
 public:
  watched_owners() = default;
  watched_owners(std::initializer_list<std::pair<std::string, std::weak_ptr<const void>>> owners)
      : owners_(owners) {}

  // Every one still alive after `settle` (one wait for all: the release thread had time to drop
  // any of them that it was going to).
  ::testing::AssertionResult alive_after(
      std::chrono::milliseconds settle = std::chrono::milliseconds(200)) const {
    std::this_thread::sleep_for(settle);
    std::string gone;
    for (const auto& [name, w] : owners_) {
      if (w.expired()) gone += (gone.empty() ? "" : ", ") + name;
    }
    if (!gone.empty()) return ::testing::AssertionFailure() << "released too early: " << gone;
    return ::testing::AssertionSuccess();
  }

  // Every one released within `timeout` (each waited for in turn, as expires_within does).
  ::testing::AssertionResult expire_within(
      std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    std::string late;
    for (const auto& [name, w] : owners_) {
      if (!expires_within(w, timeout)) late += (late.empty() ? "" : ", ") + name;
    }
    if (!late.empty()) return ::testing::AssertionFailure() << "never released: " << late;
    return ::testing::AssertionSuccess();
  }

 private:
  std::vector<std::pair<std::string, std::weak_ptr<const void>>> owners_;
};

// A device buffer holding `host` (uploaded on `s`).
template <class T>
buffer upload(const std::vector<T>& host, const stream& s) {
  buffer b(host.size() * sizeof(T), s);
  b.copy_from(host, s);
  return b;
}

// n random floats from `seed`, and a device buffer holding them (uploaded on `s`).
inline std::pair<std::vector<float>, buffer> random_on_device(int n, std::uint64_t seed,
                                                              const stream& s) {
  std::vector<float> host = random_values<float>(static_cast<std::size_t>(n), seed);
  buffer b = upload(host, s);
  return {std::move(host), std::move(b)};
}

// Calling each of `calls`, member functions of `obj` that take no arguments, throws
// invalid_argument (a trace names a failing one by its position).
template <class T, class... Calls>
void expect_each_refused(T& obj, Calls... calls) {
  int position = 0;
  const auto check = [&obj, &position](auto call) {
    SCOPED_TRACE("call " + std::to_string(position++));
    EXPECT_THROW((void)(obj.*call)(), invalid_argument);
  };
  (check(calls), ...);
}

// A device buffer of n floats, filled with kPoison on `s`.
inline buffer poisoned(std::size_t n, const stream& s) {
  buffer b(n * sizeof(float), s);
  b.fill(kPoison, s);
  return b;
}

// The message of the invalid_argument `f` throws (or a text saying it threw none).
template <class F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "<no invalid_argument was thrown>";
}

// Makes the driver table's entry `Member` fail its `n`th call from now (CUDA_ERROR_OUT_OF_MEMORY),
// for the scope: a failure the driver gives only under resource exhaustion, on demand.
template <auto Member>
class fail_nth_call;

template <class... Args, CUresult (*detail::driver_api::*Member)(Args...)>
class fail_nth_call<Member> {
 public:
  explicit fail_nth_call(int n) {
    left_.store(n);
    real_ = api().*Member;
    api().*Member = &stub;
  }
  fail_nth_call(const fail_nth_call&) = delete;
  fail_nth_call& operator=(const fail_nth_call&) = delete;
  ~fail_nth_call() { api().*Member = real_; }
  // Whether the failure was given.
  static bool fired() { return left_.load() <= 0; }

 private:
  static detail::driver_api& api() { return *detail::driver_table().api; }
  static CUresult stub(Args... args) {
    if (left_.fetch_sub(1) == 1) return CUDA_ERROR_OUT_OF_MEMORY;
    return real_(args...);
  }
  static inline CUresult (*real_)(Args...) = nullptr;
  static inline std::atomic<int> left_{0};
};

}  // namespace cucore::gpu_testing
