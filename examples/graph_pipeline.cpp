// A small CUDA graph pipeline whose graph keeps its own resources alive.
//
// build_pipeline() makes everything the pipeline needs (a compiled program, device buffers,
// pinned staging memory, a host callback with state of its own), wires it into a
// graph_definition and returns only that definition and the output buffer. Every other object it
// made is destroyed when it returns: the graph's nodes hold what they use, so the pipeline stays
// runnable. main() instantiates it, drops the definition too, launches the executable graph a few
// times and checks each result against the same computation on the host.
//
// The graph, for n inputs x and a constant a (launch number s = 1, 2, ...):
//
//   memcpy x (pinned) -> dx     memset acc = 1     host callback: step = ++s (in pinned memory)
//            \                       |                  |
//             \                      |             memcpy step (pinned) -> d_step
//              \                     |                  /
//               +------------------ join --------------+
//                                    |
//                     kernel affine: acc[i] = a * dx[i] + acc[i] + *d_step
//                                    |
//                     kernel square: out[i] = acc[i] * acc[i]
//
// so after launch s, out[i] = (a * x[i] + 1 + s)^2. Without a GPU it says so and exits 0.
#include <cucore/cucore.hpp>

#include "report_failure.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace {

constexpr const char* kSource = R"(
extern "C" __global__ void affine(const float* x, float* acc, const float* step, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) acc[i] = a * x[i] + acc[i] + *step;
}
extern "C" __global__ void square(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * in[i];
}
)";

struct pipeline {
  cucore::graph_definition graph;
  cucore::buffer out;  // n floats, rewritten by every launch
};

// Builds the pipeline for inputs `x` and constant `a`. Its buffers are allocated in stream order
// on `stream`, so launch the graph on that stream (or order the launch stream after it).
pipeline build_pipeline(const cucore::stream& stream, std::span<const float> x, float a) {
  const cucore::device dev = stream.device();
  const int n = static_cast<int>(x.size());
  const std::size_t bytes = x.size() * sizeof(float);

  // The kernels, compiled through the default program cache ($CUCORE_CACHE_DIR, else
  // $XDG_CACHE_HOME/cucore, else ~/.cache/cucore): a second run loads them from there.
  std::unique_ptr<cucore::program_cache> cache = cucore::open_program_cache("");
  cucore::program_options options;
  options.name = "graph_pipeline.cu";
  options.arch = dev.arch();
  cucore::program program(kSource, cucore::source_type::cxx, options);
  cucore::object_code cubin = program.compile(cucore::code_type::cubin, {}, cache.get());
  cucore::kernel affine = cubin.get_kernel("affine");
  cucore::kernel square = cubin.get_kernel("square");

  // Device memory, and pinned host memory the graph copies from.
  cucore::buffer dx(bytes, stream);
  cucore::buffer acc(bytes, stream);
  cucore::buffer d_step(sizeof(float), stream);
  cucore::buffer out(bytes, stream);
  cucore::pinned_buffer x_staging(bytes);
  std::ranges::copy(x, x_staging.span<float>().begin());
  cucore::pinned_buffer step_staging(sizeof(float));

  cucore::graph_definition graph(dev);

  // Three independent branches at the graph's entry...
  cucore::graph_node upload_x = graph.memcpy(dx, x_staging, bytes);
  cucore::graph_node reset_acc = graph.memset(acc, 1.0f, x.size());
  // The callback owns its state (a launch counter) and, through `keep`, the pinned memory it
  // writes; it runs on a CUDA thread, so it only touches host memory.
  cucore::graph_node count_launch =
      graph.callback([step = step_staging.span<float>().data(), keep = step_staging.owner(),
                      launches = 0]() mutable { *step = static_cast<float>(++launches); });
  cucore::graph_node upload_step = count_launch.memcpy(d_step, step_staging, sizeof(float));

  // ...joined before the two kernels. A buffer argument passes its device address and the node
  // keeps its allocation alive.
  const cucore::launch_config config{.grid = static_cast<unsigned>((n + 255) / 256), .block = 256};
  cucore::graph_node inputs_ready = upload_x.join({reset_acc, upload_step});
  cucore::graph_node scaled = inputs_ready.launch(config, affine, dx, acc, d_step, a, n);
  scaled.launch(config, square, acc, out, n);

  // On return the cache, program, object code, kernels, dx, acc, d_step and both pinned buffers
  // are destroyed here; the graph's nodes still hold everything they use.
  return {graph, std::move(out)};
}

// Compares `result` with (a x + 1 + s)^2 computed in double precision; prints the first mismatch.
bool matches(std::span<const float> result, std::span<const float> x, float a, int s) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double base = double(a) * x[i] + 1.0 + s;
    const double want = base * base;
    if (!(std::abs(result[i] - want) <= 1e-5 * (1.0 + std::abs(want)))) {
      std::printf("launch %d: out[%zu] = %.9g, expected %.9g\n", s, i, result[i], want);
      return false;
    }
  }
  return true;
}

}  // namespace

int main() try {
  if (cucore::device::count() == 0) {
    std::cout << "no GPU: skipped (graph_pipeline needs a CUDA device)\n";
    return 0;
  }
  cucore::device dev(0);
  cucore::stream stream(dev);

  const int n = 1 << 20;
  std::random_device seed_source;
  const unsigned seed = seed_source();
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(gen);
  const float a = 1.0f + dist(gen);

  cucore::graph exec;
  cucore::buffer out;
  {
    pipeline p = build_pipeline(stream, x, a);
    std::printf("built a graph of %zu nodes on %s\n", p.graph.node_count(), dev.name().c_str());
    exec = p.graph.instantiate();
    out = std::move(p.out);
  }  // The definition is gone as well: the executable graph holds every node's resources.

  const int launches = 3;
  for (int s = 1; s <= launches; ++s) {
    exec.launch(stream);
    std::vector<float> result = out.to_vector<float>(stream);  // ordered after the launch
    if (!matches(result, x, a, s)) {
      std::printf("graph_pipeline: FAILED (seed %u)\n", seed);
      return 1;
    }
  }
  std::printf("%d launches of the pipeline on n = %d inputs checked, seed %u\n", launches, n, seed);
  std::printf("graph_pipeline: OK\n");
  return 0;
} catch (...) {
  return report_failure();
}
