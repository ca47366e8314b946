// Executable graphs from explicit definitions (label gpu): instantiation options, uploads,
// device launches, DOT output and clones (graph_definition_test_support.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/linker.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/event.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "cucore/toolkit.hpp"
#include "graph_definition_test_support.hpp"
#include "graph_test_support.hpp"

namespace cucore {
namespace {

using namespace gpu_testing;               // gpu_test_support.hpp, graph_test_support.hpp
using namespace graph_definition_testing;  // graph_definition_test_support.hpp

// ---- executables, options, DOT and clones ------------------------------------------------------

TEST_F(GraphDefinition, MultipleInstantiationsAreIndependent) {
  device dev(0);
  stream s(dev);
  const int n = 3333;
  add_one_graph one(dev, s, n, seed);
  graph g1 = one.def.instantiate();
  graph g2 = one.def.instantiate();
  EXPECT_NE(g1.handle(), g2.handle());
  g1.launch(s);
  g2.launch(s);
  g1.launch(s);
  // Changing the definition changes neither executable; a new one sees the change.
  one.node.launch(cover(n), graph_kernel("add_one"), one.y, n);
  g1.launch(s);
  graph g3 = one.def.instantiate();
  g3.launch(s);
  std::vector<float> want(n);
  for (int i = 0; i < n; ++i) want[i] = one.y0[i] + 6.0f;
  EXPECT_EQ(far_off(one.y.to_vector<float>(s), want), 0);
}

TEST_F(GraphDefinition, UploadedGraphRelaunchesAccumulate) {
  device dev(0);
  stream s(dev);
  const int n = 1000;
  add_one_graph one(dev, s, n, seed);
  graph g = one.def.instantiate();
  g.upload(s);
  const int launches = 3;
  for (int i = 0; i < launches; ++i) g.launch(s);
  std::vector<float> want(n);
  for (int i = 0; i < n; ++i) want[i] = one.y0[i] + 1.0f + 1.0f + 1.0f;
  EXPECT_EQ(far_off(one.y.to_vector<float>(s), want), 0);
}

TEST_F(GraphDefinition, InstantiateWithUploadStreamAndNodePriority) {
  device dev(0);
  stream s(dev);
  stream other(dev);
  const int n = 1000;
  add_one_graph one(dev, s, n, seed);
  s.synchronize();  // the upload of y
  graph_instantiate_options options;
  options.upload_stream = stream_ref(other);
  options.use_node_priority = true;
  graph g = one.def.instantiate(options);
  other.synchronize();
  g.launch(s);
  g.launch(s);
  std::vector<float> want(n);
  for (int i = 0; i < n; ++i) want[i] = one.y0[i] + 2.0f;
  EXPECT_EQ(far_off(one.y.to_vector<float>(s), want), 0);
}

TEST_F(GraphDefinition, DeviceLaunchableGraphRunsFromTheHost) {
  device dev(0);
  stream s(dev);
  const int n = 1000;
  add_one_graph one(dev, s, n, seed);
  graph_instantiate_options options;
  options.device_launch = true;
  graph g = one.def.instantiate(options);
  g.upload(s);
  g.launch(s);
  std::vector<float> want(n);
  for (int i = 0; i < n; ++i) want[i] = one.y0[i] + 1.0f;
  EXPECT_EQ(far_off(one.y.to_vector<float>(s), want), 0);
}

TEST_F(GraphDefinition, AutoFreeOnLaunchRelaunchesAnUnfreedAllocation) {
  device dev(0);
  stream s(dev);
  const int n = 5000;
  const std::size_t bytes = n * sizeof(float);
  axpy_problem p(n, seed, s);
  graph_definition def(dev);
  graph_node alloc = def.allocate(bytes);
  const device_address tmp = alloc.alloc_params().address;
  alloc.memcpy(tmp, p.x, bytes)
      .launch(cover(n), graph_kernel("axpy"), p.a, tmp, p.y, n);  // no free
  graph_instantiate_options options;
  options.auto_free_on_launch = true;
  graph g = def.instantiate(options);
  g.launch(s);
  g.launch(s);  // frees the first launch's allocation first
  EXPECT_EQ(far_off(p.y.to_vector<float>(s), p.y_after(2)), 0);
  // The last launch's allocation stays allocated until something frees it (destroying the graph
  // does not): a graph of one free node does, so the test leaks nothing (memcheck --leak-check).
  graph_definition release(dev);
  release.deallocate(tmp);
  release.instantiate().launch(s);
  s.synchronize();
}

TEST_F(GraphDefinition, DebugDotPrintWritesAGraph) {
  device dev(0);
  stream s(dev);
  const auto seed = fresh_seed();
  buffer y(4096, s);
  graph_definition def(dev);
  def.launch(cover(1024), graph_kernel("add_one"), y, 1024)
      .memset(y, std::uint32_t{3}, 1024)
      .if_then(def.create_condition(1u));
  const auto dir = std::filesystem::temp_directory_path();
  const auto plain = dir / ("cucore-graph-def-" + std::to_string(seed) + ".dot");
  const auto detailed = dir / ("cucore-graph-def-" + std::to_string(seed) + "-verbose.dot");
  def.debug_dot_print(plain);
  graph_dot_options options;
  options.verbose = true;
  options.kernel_node_params = true;
  options.memset_node_params = true;
  options.conditional_node_params = true;
  options.handles = true;
  def.debug_dot_print(detailed, options);
  const std::string a = read_file(plain);
  const std::string b = read_file(detailed);
  std::filesystem::remove(plain);
  std::filesystem::remove(detailed);
  EXPECT_NE(a.find("digraph"), std::string::npos) << a;
  EXPECT_NE(b.find("digraph"), std::string::npos) << b;
  EXPECT_GT(b.size(), a.size()) << "the options add detail";
  EXPECT_THROW(def.debug_dot_print(dir / "no-such-directory-cucore" / "x.dot"), error);
}

TEST_F(GraphDefinition, CloneIsIndependent) {
  device dev(0);
  stream s(dev);
  const int n = 2000;
  auto y0 = random_values<float>(n, seed);
  buffer y = upload(y0, s);
  graph_definition def(dev);
  graph_node last = def.launch(cover(n), graph_kernel("add_one"), y, n)
                        .launch(cover(n), graph_kernel("add_one"), y, n)
                        .launch(cover(n), graph_kernel("add_one"), y, n);
  graph_definition copy = def.clone();
  EXPECT_FALSE(copy == def);
  EXPECT_NE(copy.handle(), def.handle());
  EXPECT_EQ(copy.node_count(), 3u);
  EXPECT_EQ(copy.edges().size(), 2u);
  for (const graph_node& node : copy.nodes()) {
    EXPECT_TRUE(node.graph() == copy);
    EXPECT_EQ(node.kind(), graph_node_kind::kernel);
  }

  // Destroy the clone's last node: the original keeps all three.
  auto nodes = copy.nodes();
  auto tail = std::find_if(nodes.begin(), nodes.end(),
                           [](const graph_node& node) { return node.successors().empty(); });
  ASSERT_NE(tail, nodes.end());
  tail->destroy();
  EXPECT_EQ(copy.node_count(), 2u);
  EXPECT_EQ(def.node_count(), 3u);
  EXPECT_TRUE(last.valid());

  graph original = def.instantiate();
  graph cloned = copy.instantiate();
  original.launch(s);
  std::vector<float> want(n);
  for (int i = 0; i < n; ++i) want[i] = y0[i] + 3.0f;
  EXPECT_EQ(far_off(y.to_vector<float>(s), want), 0);
  cloned.launch(s);
  for (int i = 0; i < n; ++i) want[i] = y0[i] + 5.0f;
  EXPECT_EQ(far_off(y.to_vector<float>(s), want), 0);

  // And the other way round.
  last.destroy();
  EXPECT_EQ(def.node_count(), 2u);
  EXPECT_EQ(copy.node_count(), 2u);
}

}  // namespace
}  // namespace cucore
