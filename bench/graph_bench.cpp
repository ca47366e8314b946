// CUDA graph benchmarks: cucore's graph_definition / graph beside the same work done with the raw
// driver API in the same run:
//   BM_build_1000_kernel_nodes_cucore   a chain of 1000 kernel nodes, each with a buffer argument,
//                                       then the graph destroyed (the same buffer: the nodes
//                                       share one user object)
//     _distinct_buffers_cucore          the same, a buffer per node (a user object per node)
//     vs _raw                           cuGraphCreate + 1000 cuGraphAddKernelNode + cuGraphDestroy
//     vs _raw_user_objects              the same plus one user object per node (what cucore
//                                       asks of the driver; the rest of the gap is cucore's own)
//   BM_instantiate_cucore               instantiate a 1000-node graph, destroy the executable graph
//     vs _raw                           cuGraphInstantiateWithParams of a raw 1000-node graph
//     vs _raw_of_cucore_graph           the same call on cucore's graph (1000 user objects)
//   BM_launch_cucore/N                  launch a 10-node graph, synchronize every N launches
//     vs BM_launch_raw/N                cuGraphLaunch, cuStreamSynchronize
//     vs BM_launch_raw_of_cucore_graph/N  the raw calls on cucore's executable graph
//     vs BM_launch_raw_with_user_objects/N/U  a raw graph holding U user objects
// Times are wall-clock (UseRealTime); per_node / per_launch counters divide them per item.
// The raw calls go through dlopen("libcuda.so.1") + cuGetProcAddress (the project never links
// libcuda), with the primary context current on both sides.
//
// Needs a GPU; without one it says so and exits 0. Build it optimized (the release preset):
//   cmake --preset release && cmake --build --preset release --target graph_bench
//   build/release/bin/graph_bench --benchmark_format=console
#include <benchmark/benchmark.h>
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cucore/cucore.hpp"
#include "raw_driver.hpp"

namespace {

constexpr int kBuildNodes = 1000;
constexpr int kInstantiateNodes = 1000;
constexpr int kLaunchNodes = 10;
constexpr int kElements = 32;  // one warp: the kernel is trivial, launch overhead dominates

constexpr const char* kKernelSource = R"(
extern "C" __global__ void k(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = static_cast<float>(i);
}
)";

constexpr const char* kProgram = "graph_bench";

void check(CUresult r, const char* call) {
  cucore::bench::check_raw(kProgram, r, call);
}

// The driver entry points the raw baselines call (resolved by raw_driver.hpp).
#define GRAPH_BENCH_DRIVER_FUNCTIONS(X) \
  X(cuInit)                             \
  X(cuCtxSetCurrent)                    \
  X(cuGraphCreate)                      \
  X(cuKernelGetFunction)                \
  X(cuGraphDestroy)                     \
  X(cuGraphAddKernelNode)               \
  X(cuUserObjectCreate)                 \
  X(cuGraphRetainUserObject)            \
  X(cuGraphInstantiateWithParams)       \
  X(cuGraphExecDestroy)                 \
  X(cuGraphUpload)                      \
  X(cuGraphLaunch)                      \
  X(cuStreamSynchronize)

struct raw_driver {
  CUCORE_BENCH_RAW_DRIVER(GRAPH_BENCH_DRIVER_FUNCTIONS, kProgram)
};

// Everything the benchmarks share, made once in main() when there is a GPU.
struct fixture {
  raw_driver api;
  cucore::device dev{0};
  CUcontext ctx = dev.primary_context().handle();
  CUfunction function = nullptr;
  cucore::stream stream{dev};
  cucore::kernel k;
  cucore::buffer buf{kElements * sizeof(float), stream};
  CUdeviceptr address = buf.address();
  int n = kElements;
  cucore::launch_config config{.grid = 1, .block = kElements};

  fixture() {
    cucore::program_options options;
    options.arch = cucore::toolkit::current_device_arch();
    cucore::program program(kKernelSource, cucore::source_type::cxx, options);
    k = program.compile(cucore::code_type::cubin).get_kernel("k");
    stream.synchronize();  // the buffer's allocation is ordered on the stream
  }

  // The raw equivalent of node.launch(config, k, buf, n): the same CUDA_KERNEL_NODE_PARAMS
  // cucore fills in (the kernel's CUfunction in the primary context), with the device pointer.
  CUgraphNode add_raw_kernel_node(CUgraph g, CUgraphNode after) {
    void* params[] = {&address, &n};
    CUDA_KERNEL_NODE_PARAMS p{};
    if (function == nullptr) {  // once, with the primary context current
      check(api.cuKernelGetFunction(&function, k.handle()), "cuKernelGetFunction");
    }
    p.func = function;
    p.gridDimX = config.grid.x;
    p.gridDimY = config.grid.y;
    p.gridDimZ = config.grid.z;
    p.blockDimX = config.block.x;
    p.blockDimY = config.block.y;
    p.blockDimZ = config.block.z;
    p.kernelParams = params;
    CUgraphNode node = nullptr;
    check(api.cuGraphAddKernelNode(&node, g, after != nullptr ? &after : nullptr,
                                   after != nullptr ? 1 : 0, &p),
          "cuGraphAddKernelNode");
    return node;
  }

  // A chain of `nodes` kernel nodes.
  cucore::graph_definition cucore_chain(int nodes) {
    cucore::graph_definition g(dev);
    cucore::graph_node last = g.launch(config, k, buf, n);
    for (int i = 1; i < nodes; ++i) last = last.launch(config, k, buf, n);
    return g;
  }
  // The same chain, each node's buffer argument a different buffer (no two nodes have the same
  // owners, so none shares another's user object).
  cucore::graph_definition cucore_chain_distinct_buffers(int nodes) {
    while (distinct.size() < static_cast<std::size_t>(nodes)) {
      distinct.emplace_back(kElements * sizeof(float), stream);
    }
    cucore::graph_definition g(dev);
    cucore::graph_node last = g.launch(config, k, distinct[0], n);
    for (int i = 1; i < nodes; ++i) last = last.launch(config, k, distinct[i], n);
    return g;
  }
  std::vector<cucore::buffer> distinct;

  CUgraph raw_chain(int nodes) {
    CUgraph g = nullptr;
    check(api.cuGraphCreate(&g, 0), "cuGraphCreate");
    CUgraphNode last = nullptr;
    for (int i = 0; i < nodes; ++i) last = add_raw_kernel_node(g, last);
    return g;
  }
  CUgraphExec raw_instantiate(CUgraph g) {
    CUDA_GRAPH_INSTANTIATE_PARAMS p{};
    CUgraphExec exec = nullptr;
    check(api.cuGraphInstantiateWithParams(&exec, g, &p), "cuGraphInstantiateWithParams");
    if (p.result_out != CUDA_GRAPH_INSTANTIATE_SUCCESS)
      check(CUDA_ERROR_INVALID_VALUE, "instantiate");
    return exec;
  }
};

fixture* f = nullptr;

// Seconds per node (or per launch): the benchmark's real time divided by `items`.
void per_item(benchmark::State& state, const char* name, int items) {
  state.counters[name] = benchmark::Counter(
      items, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// ---- build: 1000 kernel nodes, each with a buffer argument; the graph is destroyed each time --

void BM_build_1000_kernel_nodes_cucore(benchmark::State& state) {
  for (auto _ : state) {
    cucore::graph_definition g = f->cucore_chain(kBuildNodes);
    CUgraph h = g.handle();
    benchmark::DoNotOptimize(h);
  }  // ~graph_definition: cuGraphDestroy, which drops the nodes' owners on this thread
  per_item(state, "per_node", kBuildNodes);
}
BENCHMARK(BM_build_1000_kernel_nodes_cucore)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The same split in two: building only, then destroying only (the other half untimed, followed
// by a 5 ms sleep: time for work left on other threads to finish).

// Times build() only; destroy(what build returned) and the sleep are untimed. Every build-only
// row, cucore's and raw, runs through here.
template <class Build, class Destroy>
void time_build_only(benchmark::State& state, Build&& build, Destroy&& destroy) {
  for (auto _ : state) {
    auto built = build();
    state.PauseTiming();
    destroy(built);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    state.ResumeTiming();
  }
  per_item(state, "per_node", kBuildNodes);
}

void destroy_definition(cucore::graph_definition& g) {
  g = cucore::graph_definition();
}
void destroy_raw(CUgraph g) {
  check(f->api.cuGraphDestroy(g), "cuGraphDestroy");
}

void BM_build_only_1000_kernel_nodes_cucore(benchmark::State& state) {
  time_build_only(
      state, [] { return f->cucore_chain(kBuildNodes); }, destroy_definition);
}
BENCHMARK(BM_build_only_1000_kernel_nodes_cucore)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The two rows above with a different buffer per node: every node gets a user object of its own,
// as in the raw + user objects floor.
void BM_build_1000_kernel_nodes_distinct_buffers_cucore(benchmark::State& state) {
  f->cucore_chain_distinct_buffers(kBuildNodes);  // the buffers, allocated untimed
  f->stream.synchronize();
  for (auto _ : state) {
    cucore::graph_definition g = f->cucore_chain_distinct_buffers(kBuildNodes);
    CUgraph h = g.handle();
    benchmark::DoNotOptimize(h);
  }
  per_item(state, "per_node", kBuildNodes);
}
BENCHMARK(BM_build_1000_kernel_nodes_distinct_buffers_cucore)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_build_only_1000_kernel_nodes_distinct_buffers_cucore(benchmark::State& state) {
  f->cucore_chain_distinct_buffers(kBuildNodes);
  f->stream.synchronize();
  time_build_only(
      state, [] { return f->cucore_chain_distinct_buffers(kBuildNodes); }, destroy_definition);
}
BENCHMARK(BM_build_only_1000_kernel_nodes_distinct_buffers_cucore)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_build_only_1000_kernel_nodes_raw(benchmark::State& state) {
  time_build_only(
      state, [] { return f->raw_chain(kBuildNodes); }, destroy_raw);
}
BENCHMARK(BM_build_only_1000_kernel_nodes_raw)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_destroy_only_1000_kernel_nodes_cucore(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    cucore::graph_definition g = f->cucore_chain(kBuildNodes);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    state.ResumeTiming();
    g = cucore::graph_definition();
  }
  per_item(state, "per_node", kBuildNodes);
}
BENCHMARK(BM_destroy_only_1000_kernel_nodes_cucore)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_build_1000_kernel_nodes_raw(benchmark::State& state) {
  for (auto _ : state) {
    CUgraph g = f->raw_chain(kBuildNodes);
    benchmark::DoNotOptimize(g);
    check(f->api.cuGraphDestroy(g), "cuGraphDestroy");
  }
  per_item(state, "per_node", kBuildNodes);
}
BENCHMARK(BM_build_1000_kernel_nodes_raw)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The raw chain plus what cucore adds at the CUDA level: one user object per node, moved into
// the graph (its destructor does nothing here). Separates the driver's price of ownership from
// cucore's own bookkeeping.
void CUDA_CB ignore(void*) {}

// A user object with no destructor work, its reference moved to `g` (what cucore does for each
// owner a node holds).
void retain_raw_user_object(CUgraph g) {
  static int payload = 0;
  CUuserObject object = nullptr;
  check(f->api.cuUserObjectCreate(&object, &payload, &ignore, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC),
        "cuUserObjectCreate");
  check(f->api.cuGraphRetainUserObject(g, object, 1, CU_GRAPH_USER_OBJECT_MOVE),
        "cuGraphRetainUserObject");
}

// The raw chain, each node with its user object retained by the graph.
CUgraph raw_chain_with_user_objects() {
  CUgraph g = nullptr;
  check(f->api.cuGraphCreate(&g, 0), "cuGraphCreate");
  CUgraphNode last = nullptr;
  for (int i = 0; i < kBuildNodes; ++i) {
    retain_raw_user_object(g);
    last = f->add_raw_kernel_node(g, last);
  }
  return g;
}

void BM_build_1000_kernel_nodes_raw_user_objects(benchmark::State& state) {
  for (auto _ : state) {
    CUgraph g = raw_chain_with_user_objects();
    benchmark::DoNotOptimize(g);
    check(f->api.cuGraphDestroy(g), "cuGraphDestroy");
  }
  per_item(state, "per_node", kBuildNodes);
}
BENCHMARK(BM_build_1000_kernel_nodes_raw_user_objects)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Build only, raw with one user object per node (destroy untimed): the floor of build only.
void BM_build_only_1000_kernel_nodes_raw_user_objects(benchmark::State& state) {
  time_build_only(state, raw_chain_with_user_objects, destroy_raw);
}
BENCHMARK(BM_build_only_1000_kernel_nodes_raw_user_objects)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// ---- instantiate a prebuilt 1000-node graph (the executable graph is destroyed each time) -----

void BM_instantiate_cucore(benchmark::State& state) {
  const cucore::graph_definition g = f->cucore_chain(kInstantiateNodes);
  for (auto _ : state) {
    cucore::graph exec = g.instantiate();
    CUgraphExec h = exec.handle();
    benchmark::DoNotOptimize(h);
  }
  per_item(state, "per_node", kInstantiateNodes);
}
BENCHMARK(BM_instantiate_cucore)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_instantiate_raw(benchmark::State& state) {
  CUgraph g = f->raw_chain(kInstantiateNodes);
  for (auto _ : state) {
    CUgraphExec exec = f->raw_instantiate(g);
    benchmark::DoNotOptimize(exec);
    check(f->api.cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  }
  check(f->api.cuGraphDestroy(g), "cuGraphDestroy");
  per_item(state, "per_node", kInstantiateNodes);
}
BENCHMARK(BM_instantiate_raw)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The raw calls on cucore's graph: separates the driver's cost of copying 1000 user-object
// references into the executable graph from cucore's own overhead.
void BM_instantiate_raw_of_cucore_graph(benchmark::State& state) {
  const cucore::graph_definition g = f->cucore_chain(kInstantiateNodes);
  for (auto _ : state) {
    CUgraphExec exec = f->raw_instantiate(g.handle());
    benchmark::DoNotOptimize(exec);
    check(f->api.cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  }
  per_item(state, "per_node", kInstantiateNodes);
}
BENCHMARK(BM_instantiate_raw_of_cucore_graph)->Unit(benchmark::kMicrosecond)->UseRealTime();

// ---- launch a 10-node graph; the stream is synchronized every range(0) launches ---------------

void BM_launch_cucore(benchmark::State& state) {
  const int sync_every = static_cast<int>(state.range(0));
  const cucore::graph exec = f->cucore_chain(kLaunchNodes).instantiate();
  exec.upload(f->stream);
  exec.launch(f->stream);  // warm-up
  f->stream.synchronize();
  int pending = 0;
  for (auto _ : state) {
    exec.launch(f->stream);
    if (++pending == sync_every) {
      f->stream.synchronize();
      pending = 0;
    }
  }
  f->stream.synchronize();
  per_item(state, "per_launch", 1);
}
BENCHMARK(BM_launch_cucore)->Arg(1)->Arg(100)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The raw launch benchmarks' loop: upload, warm up, then launch, synchronizing every
// `sync_every` launches (and once at the end).
void raw_launch_loop(benchmark::State& state, CUgraphExec exec, CUstream s, int sync_every) {
  check(f->api.cuGraphUpload(exec, s), "cuGraphUpload");
  check(f->api.cuGraphLaunch(exec, s), "cuGraphLaunch");  // warm-up
  check(f->api.cuStreamSynchronize(s), "cuStreamSynchronize");
  int pending = 0;
  for (auto _ : state) {
    check(f->api.cuGraphLaunch(exec, s), "cuGraphLaunch");
    if (++pending == sync_every) {
      check(f->api.cuStreamSynchronize(s), "cuStreamSynchronize");
      pending = 0;
    }
  }
  check(f->api.cuStreamSynchronize(s), "cuStreamSynchronize");
}

void BM_launch_raw(benchmark::State& state) {
  const int sync_every = static_cast<int>(state.range(0));
  CUstream s = f->stream.handle();
  CUgraph g = f->raw_chain(kLaunchNodes);
  CUgraphExec exec = f->raw_instantiate(g);
  raw_launch_loop(state, exec, s, sync_every);
  check(f->api.cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  check(f->api.cuGraphDestroy(g), "cuGraphDestroy");
  per_item(state, "per_launch", 1);
}
BENCHMARK(BM_launch_raw)->Arg(1)->Arg(100)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Raw cuGraphLaunch of cucore's executable graph: separates the driver's price of launching a
// graph that holds user objects from cucore's own launch overhead.
void BM_launch_raw_of_cucore_graph(benchmark::State& state) {
  const int sync_every = static_cast<int>(state.range(0));
  CUstream s = f->stream.handle();
  const cucore::graph graph = f->cucore_chain(kLaunchNodes).instantiate();
  CUgraphExec exec = graph.handle();
  raw_launch_loop(state, exec, s, sync_every);
  per_item(state, "per_launch", 1);
}
BENCHMARK(BM_launch_raw_of_cucore_graph)
    ->Arg(1)
    ->Arg(100)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Raw: a raw graph that holds one user object per node (as cucore's does), launched raw. Shows
// whether a launch's extra cost comes from the user objects themselves.
void BM_launch_raw_with_user_objects(benchmark::State& state) {
  const int sync_every = static_cast<int>(state.range(0));
  const int objects = static_cast<int>(state.range(1));
  CUstream s = f->stream.handle();
  CUgraph g = f->raw_chain(kLaunchNodes);
  for (int i = 0; i < objects; ++i) retain_raw_user_object(g);
  CUgraphExec exec = f->raw_instantiate(g);
  raw_launch_loop(state, exec, s, sync_every);
  check(f->api.cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  check(f->api.cuGraphDestroy(g), "cuGraphDestroy");
  per_item(state, "per_launch", 1);
}
BENCHMARK(BM_launch_raw_with_user_objects)
    ->Args({1, kLaunchNodes})
    ->Args({100, kLaunchNodes})
    ->Args({100, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (cucore::device::count() == 0) {
    std::printf("graph_bench: no GPU, nothing to measure\n");
    return 0;
  }
  std::unique_ptr<fixture> shared;
  try {
    shared = std::make_unique<fixture>();
  } catch (const cucore::compile_error& e) {
    std::fprintf(stderr, "graph_bench: %s\n%s\n", e.what(), e.log().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "graph_bench: %s\n", e.what());
    return 1;
  }
  // Both sides run with the primary context current, so cucore pushes nothing.
  check(shared->api.cuCtxSetCurrent(shared->ctx), "cuCtxSetCurrent");
  f = shared.get();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  f = nullptr;
  shared->stream.synchronize();
  return 0;
}
