// The explicit graph API (graph_definition, graph_node, graph): structure and identity, node
// creation and the errors cucore or the driver raise, instantiation and execution of every node
// kind (checked on fresh random data), conditional nodes, topology mutation, instantiate options,
// DOT output and clones (label gpu; each test skips without a device). Adapted from cuda.core's
// test_graph_definition*.py and test_options.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>
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
#include "graph_test_support.hpp"

namespace cucore {
namespace {

using namespace gpu_testing;  // gpu_test_support.hpp, graph_test_support.hpp

// A fresh seed for every test, named in every failure's trace.
class GraphDefinition : public gpu_testing::gpu_test {
 protected:
  const std::uint64_t seed = fresh_seed();

 private:
  const ::testing::ScopedTrace seed_trace_{__FILE__, __LINE__, "seed " + std::to_string(seed)};
};

// One thread: the condition setters and counters.
const launch_config kOne{.grid = 1, .block = 1};

// Elements that differ from the expectation by more than a float rounding or two (the device
// contracts a * x + y into an FMA).
int far_off(const std::vector<float>& got, const std::vector<float>& want) {
  int bad = got.size() == want.size() ? 0 : 1;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const float tol = 1e-5f * std::max(1.0f, std::fabs(want[i]));
    bad += !(std::fabs(got[i] - want[i]) <= tol);
  }
  return bad;
}

// Random x and y of n elements, uploaded on `s`, and a random a: the inputs of axpy (y = a * x +
// y).
struct axpy_problem {
  std::vector<float> x0;
  std::vector<float> y0;
  float a;
  buffer x;
  buffer y;

  axpy_problem(int n, std::uint64_t seed, const stream& s)
      : x0(random_values<float>(n, seed)),
        y0(random_values<float>(n, seed + 1)),
        a(random_values<float>(1, seed + 2)[0]),
        x(upload(x0, s)),
        y(upload(y0, s)) {}

  // y after `runs` axpy runs (each a * x0[i] + the previous y[i]).
  std::vector<float> y_after(int runs) const {
    std::vector<float> want = y0;
    for (int r = 0; r < runs; ++r) {
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = a * x0[i] + want[i];
    }
    return want;
  }
};

// Random y and z of n elements, uploaded on `s`.
struct y_and_z {
  std::vector<float> y0;
  std::vector<float> z0;
  buffer y;
  buffer z;

  y_and_z(int n, std::uint64_t seed, const stream& s)
      : y0(random_values<float>(n, seed)),
        z0(random_values<float>(n, seed + 1)),
        y(upload(y0, s)),
        z(upload(z0, s)) {}

  // y once both were incremented and z was added to y: (z0 + 1) + (y0 + 1).
  std::vector<float> incremented_sum() const {
    std::vector<float> want(y0.size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = (z0[i] + 1.0f) + (y0[i] + 1.0f);
    return want;
  }
};

// A graph of one add_one kernel node over random y (n elements, uploaded on `s`).
struct add_one_graph {
  std::vector<float> y0;
  buffer y;
  graph_definition def;
  graph_node node;

  add_one_graph(const device& dev, const stream& s, int n, std::uint64_t seed)
      : y0(random_values<float>(n, seed)), y(upload(y0, s)), def(dev) {
    node = def.launch(cover(n), graph_kernel("add_one"), y, n);
  }
};

std::unordered_set<graph_node> as_set(const std::vector<graph_node>& v) {
  return {v.begin(), v.end()};
}

bool has_edge(const std::vector<std::pair<graph_node, graph_node>>& edges, const graph_node& from,
              const graph_node& to) {
  return std::find(edges.begin(), edges.end(), std::make_pair(from, to)) != edges.end();
}

int read_int(const buffer& b, const stream& s) {
  return b.to_vector<int>(s).at(0);
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A nonzero value from the generator, different from every value in `taken`.
std::uint32_t fresh_nonzero(std::mt19937_64& gen, const std::vector<std::uint32_t>& taken) {
  std::uniform_int_distribution<std::uint32_t> dist(1, 0xffffffffu);
  for (;;) {
    const std::uint32_t v = dist(gen);
    if (std::find(taken.begin(), taken.end(), v) == taken.end()) return v;
  }
}

// ---- structure and identity --------------------------------------------------------------------

TEST_F(GraphDefinition, EmptyGraphHasNoNodesAndInstantiates) {
  device dev(0);
  stream s(dev);
  graph_definition def(dev);
  EXPECT_TRUE(def.valid());
  EXPECT_TRUE(static_cast<bool>(def));
  EXPECT_NE(def.handle(), nullptr);
  EXPECT_EQ(def.device(), dev);
  EXPECT_EQ(def.node_count(), 0u);
  EXPECT_TRUE(def.nodes().empty());
  EXPECT_TRUE(def.edges().empty());
  graph g = def.instantiate();
  ASSERT_TRUE(g.valid());
  EXPECT_NE(g.handle(), nullptr);
  EXPECT_EQ(g.device(), dev);
  g.launch(s);
  s.synchronize();
  g.close();
  EXPECT_FALSE(g.valid());
  g.close();  // idempotent
  EXPECT_THROW(g.launch(s), invalid_argument);
}

TEST_F(GraphDefinition, NodesEdgesPredecessorsAndSuccessorsMatchWhatWasAdded) {
  device dev(0);
  graph_definition def(dev);
  // A diamond: a -> b, a -> c, (b, c) -> d.
  graph_node a = def.empty();
  graph_node b = a.empty();
  graph_node c = a.empty();
  graph_node d = b.join({c});
  EXPECT_EQ(def.node_count(), 4u);
  EXPECT_TRUE(as_set(def.nodes()) == (std::unordered_set<graph_node>{a, b, c, d}));

  const auto edges = def.edges();
  EXPECT_EQ(edges.size(), 4u);
  EXPECT_TRUE(has_edge(edges, a, b));
  EXPECT_TRUE(has_edge(edges, a, c));
  EXPECT_TRUE(has_edge(edges, b, d));
  EXPECT_TRUE(has_edge(edges, c, d));
  EXPECT_FALSE(has_edge(edges, d, a));

  EXPECT_TRUE(a.predecessors().empty());
  EXPECT_TRUE(as_set(a.successors()) == (std::unordered_set<graph_node>{b, c}));
  EXPECT_TRUE(as_set(b.predecessors()) == (std::unordered_set<graph_node>{a}));
  EXPECT_TRUE(as_set(b.successors()) == (std::unordered_set<graph_node>{d}));
  EXPECT_TRUE(as_set(d.predecessors()) == (std::unordered_set<graph_node>{b, c}));
  EXPECT_TRUE(d.successors().empty());
}

TEST_F(GraphDefinition, NodesKnowTheirGraph) {
  device dev(0);
  graph_definition def(dev);
  graph_definition other(dev);
  graph_node a = def.empty();
  graph_node b = other.empty();
  EXPECT_TRUE(a.graph() == def);
  EXPECT_TRUE(b.graph() == other);
  EXPECT_FALSE(a.graph() == other);
  graph_definition view = def;  // a copy is a view of the same graph
  EXPECT_TRUE(view == def);
  EXPECT_EQ(view.handle(), def.handle());
  for (const graph_node& n : def.nodes()) EXPECT_TRUE(n.graph() == def);

  // A node of a conditional body belongs to the body, not to the parent.
  graph_condition cond = def.create_condition(0u);
  graph_node branch_node = def.if_then(cond);
  graph_definition body = branch_node.branch(0);
  graph_node inner = body.empty();
  EXPECT_TRUE(inner.graph() == body);
  EXPECT_FALSE(inner.graph() == def);
  EXPECT_TRUE(branch_node.branch(0) == body);
}

TEST_F(GraphDefinition, NodeIdentityIsPreservedAndHashable) {
  device dev(0);
  graph_definition def(dev);
  graph_node a = def.empty();
  graph_node b = a.empty();
  graph_node copy = a;
  EXPECT_TRUE(copy == a);
  EXPECT_FALSE(a == b);
  EXPECT_EQ(std::hash<graph_node>()(copy), std::hash<graph_node>()(a));
  EXPECT_EQ(a.handle(), copy.handle());

  // nodes(), predecessors() and successors() return the nodes held.
  const auto listed = def.nodes();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_TRUE(as_set(listed) == (std::unordered_set<graph_node>{a, b}));
  for (const graph_node& n : listed) {
    if (n.handle() == a.handle()) {
      EXPECT_TRUE(n == a);
      EXPECT_EQ(std::hash<graph_node>()(n), std::hash<graph_node>()(a));
    }
  }
  EXPECT_TRUE(b.predecessors().at(0) == a);
  EXPECT_TRUE(a.successors().at(0) == b);

  std::unordered_set<graph_node> set{a, b, copy};
  EXPECT_EQ(set.size(), 2u);

  graph_node none;
  EXPECT_FALSE(none.valid());
  EXPECT_FALSE(static_cast<bool>(none));
  EXPECT_FALSE(none == a);
  EXPECT_THROW(none.kind(), invalid_argument);
  EXPECT_THROW(none.handle(), invalid_argument);
}

void host_noop(void*) {}

TEST_F(GraphDefinition, EveryNodeKindIsReportedAndPreservedByNodes) {
  device dev(0);
  stream s(dev);
  buffer a(1024, s);
  buffer b(1024, s);
  event e(dev);
  graph_definition child(dev);
  child.empty();

  graph_definition def(dev);
  graph_node kernel_node = def.launch(cover(256), graph_kernel("add_one"), a, 256);
  graph_node memcpy_node = def.memcpy(a, b, 1024);
  graph_node memset_node = def.memset(a, std::uint32_t{7}, 256);
  graph_node lambda_node = def.callback([] {});
  graph_node cfunc_node = def.callback(&host_noop, nullptr);
  graph_node child_node = def.embed(child);
  graph_node empty_node = def.empty();
  graph_node wait_node = def.wait(e);
  graph_node record_node = def.record(e);
  graph_node alloc_node = def.allocate(4096);
  graph_node free_node = alloc_node.deallocate(alloc_node.alloc_params().address);
  graph_node cond_node = def.if_then(def.create_condition(0u));

  const std::vector<std::pair<graph_node, graph_node_kind>> expected = {
      {kernel_node, graph_node_kind::kernel},       {memcpy_node, graph_node_kind::memcpy},
      {memset_node, graph_node_kind::memset},       {lambda_node, graph_node_kind::host_callback},
      {cfunc_node, graph_node_kind::host_callback}, {child_node, graph_node_kind::child_graph},
      {empty_node, graph_node_kind::empty},         {wait_node, graph_node_kind::event_wait},
      {record_node, graph_node_kind::event_record}, {alloc_node, graph_node_kind::mem_alloc},
      {free_node, graph_node_kind::mem_free},       {cond_node, graph_node_kind::conditional},
  };
  for (const auto& [node, kind] : expected) {
    EXPECT_EQ(node.kind(), kind) << to_string(kind);
  }
  EXPECT_EQ(def.node_count(), expected.size());
  // The same kinds through nodes() (found by handle).
  for (const graph_node& n : def.nodes()) {
    auto it = std::find_if(expected.begin(), expected.end(),
                           [&](const auto& p) { return p.first.handle() == n.handle(); });
    ASSERT_NE(it, expected.end());
    EXPECT_TRUE(n == it->first);
    EXPECT_EQ(n.kind(), it->second) << to_string(it->second);
  }
  EXPECT_STREQ(to_string(graph_node_kind::kernel), "kernel");
  EXPECT_STREQ(to_string(graph_node_kind::mem_alloc), "mem_alloc");
  EXPECT_STREQ(to_string(graph_node_kind::conditional), "conditional");
  EXPECT_STREQ(to_string(conditional_kind::while_loop), "while_loop");
  EXPECT_STREQ(to_string(conditional_kind::switch_), "switch_");
}

TEST_F(GraphDefinition, KernelNodeParametersReadBack) {
  device dev(0);
  stream s(dev);
  buffer y(4096, s);
  graph_definition def(dev);
  launch_config config;
  config.grid = dim3(3, 2, 1);
  config.block = dim3(64, 2, 1);
  config.shared_memory_bytes = 256;
  graph_node k = def.launch(config, graph_kernel("add_one"), y, 16);
  const kernel_node_params p = k.kernel_params();
  EXPECT_EQ(p.grid, dim3(3, 2, 1));
  EXPECT_EQ(p.block, dim3(64, 2, 1));
  EXPECT_EQ(p.shared_memory_bytes, 256u);
  EXPECT_NE(p.function, nullptr);

  // The same through nodes().
  const auto listed = def.nodes();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].kernel_params().grid, dim3(3, 2, 1));
  EXPECT_EQ(listed[0].kernel_params().shared_memory_bytes, 256u);

  // Other kinds' parameters are refused.
  EXPECT_THROW(k.memcpy_params(), invalid_argument);
  EXPECT_THROW(k.memset_params(), invalid_argument);
  EXPECT_THROW(k.alloc_params(), invalid_argument);
  EXPECT_THROW(k.free_address(), invalid_argument);
  EXPECT_THROW(k.event_handle(), invalid_argument);
  EXPECT_THROW(k.child_graph(), invalid_argument);
  EXPECT_THROW(k.conditional_type(), invalid_argument);
  EXPECT_THROW(k.condition(), invalid_argument);
  EXPECT_THROW(k.branches(), invalid_argument);
  EXPECT_THROW(def.empty().kernel_params(), invalid_argument);
}

TEST_F(GraphDefinition, MemcpyAndMemsetParametersReadBack) {
  device dev(0);
  stream s(dev);
  buffer dst(256, s);
  buffer src(256, s);
  pinned_buffer host(256);
  graph_definition def(dev);

  graph_node copy = def.memcpy(dst, memory_operand(src, 16), 64);
  memcpy_node_params c = copy.memcpy_params();
  EXPECT_EQ(c.dst, dst.address());
  EXPECT_EQ(c.src, src.address() + 16);
  EXPECT_EQ(c.bytes, 64u);

  graph_node from_host = def.memcpy(memory_operand(dst, 128), host, 32);
  c = from_host.memcpy_params();
  EXPECT_EQ(c.dst, dst.address() + 128);
  EXPECT_EQ(c.src, static_cast<device_address>(reinterpret_cast<std::uintptr_t>(host.data())));
  EXPECT_EQ(c.bytes, 32u);

  graph_node fill = def.memset(memory_operand(dst, 8), std::uint16_t{0xbeef}, 10);
  memset_node_params m = fill.memset_params();
  EXPECT_EQ(m.dst, dst.address() + 8);
  EXPECT_EQ(m.value, 0xbeefu);
  EXPECT_EQ(m.element_size, 2u);
  EXPECT_EQ(m.width, 10u);
  EXPECT_EQ(m.height, 1u);

  graph_node rows = def.memset_bits(src, 0x01020304u, 4, 4, 3, 32);
  m = rows.memset_params();
  EXPECT_EQ(m.dst, src.address());
  EXPECT_EQ(m.value, 0x01020304u);
  EXPECT_EQ(m.element_size, 4u);
  EXPECT_EQ(m.width, 4u);
  EXPECT_EQ(m.height, 3u);
  EXPECT_EQ(m.pitch, 32u);

  EXPECT_THROW(copy.memset_params(), invalid_argument);
  EXPECT_THROW(fill.memcpy_params(), invalid_argument);
}

TEST_F(GraphDefinition, AllocFreeAndEventParametersReadBack) {
  device dev(0);
  event e(dev);
  graph_definition def(dev);
  graph_node alloc = def.allocate(1 << 20);
  const mem_alloc_node_params p = alloc.alloc_params();
  EXPECT_NE(p.address, 0u);
  EXPECT_EQ(p.bytes, std::size_t{1} << 20);
  EXPECT_EQ(p.device, dev.ordinal());
  graph_node freed = alloc.deallocate(p.address);
  EXPECT_EQ(freed.free_address(), p.address);
  EXPECT_TRUE(as_set(freed.predecessors()) == (std::unordered_set<graph_node>{alloc}));
  EXPECT_THROW(alloc.free_address(), invalid_argument);
  EXPECT_THROW(freed.alloc_params(), invalid_argument);

  graph_node record = def.record(e);
  graph_node wait = record.wait(e);
  EXPECT_EQ(record.event_handle(), e.handle());
  EXPECT_EQ(wait.event_handle(), e.handle());
  EXPECT_THROW(alloc.event_handle(), invalid_argument);
}

TEST_F(GraphDefinition, ChildGraphNodeShowsAnIndependentCopyOfTheChild) {
  device dev(0);
  stream s(dev);
  buffer y(1024, s);
  graph_definition child(dev);
  graph_node first = child.launch(cover(256), graph_kernel("add_one"), y, 256);
  first.empty();

  graph_definition def(dev);
  graph_node node = def.embed(child);
  graph_definition view = node.child_graph();
  EXPECT_TRUE(view.valid());
  EXPECT_FALSE(view == child);
  EXPECT_TRUE(node.child_graph() == view);
  EXPECT_EQ(view.node_count(), 2u);
  EXPECT_EQ(view.edges().size(), 1u);
  std::vector<graph_node_kind> kinds;
  for (const graph_node& n : view.nodes()) kinds.push_back(n.kind());
  std::sort(kinds.begin(), kinds.end());
  EXPECT_EQ(kinds, (std::vector<graph_node_kind>{graph_node_kind::kernel, graph_node_kind::empty}));

  // The node embedded a copy: the child changes on its own.
  child.empty();
  EXPECT_EQ(child.node_count(), 3u);
  EXPECT_EQ(node.child_graph().node_count(), 2u);
  EXPECT_THROW(def.embed(def), invalid_argument);
}

TEST_F(GraphDefinition, ConditionalNodeParametersReadBack) {
  device dev(0);
  graph_definition def(dev);
  graph_condition c1 = def.create_condition();
  graph_condition c2 = def.create_condition(1u);
  graph_condition c3 = def.create_condition(0u);
  graph_condition c4 = def.create_condition();
  EXPECT_FALSE(c1 == c2);
  EXPECT_EQ(c1.graph_handle(), def.handle());

  graph_node if_node = def.if_then(c1);
  graph_node if_else_node = def.if_else(c2);
  graph_node while_node = def.while_loop(c3);
  graph_node switch_node = def.switch_(c4, 3);

  EXPECT_EQ(if_node.conditional_type(), conditional_kind::if_then);
  EXPECT_EQ(if_else_node.conditional_type(), conditional_kind::if_else);
  EXPECT_EQ(while_node.conditional_type(), conditional_kind::while_loop);
  EXPECT_EQ(switch_node.conditional_type(), conditional_kind::switch_);
  EXPECT_TRUE(if_node.condition() == c1);
  EXPECT_TRUE(if_else_node.condition() == c2);
  EXPECT_TRUE(while_node.condition() == c3);
  EXPECT_TRUE(switch_node.condition() == c4);
  EXPECT_EQ(if_node.branches().size(), 1u);
  EXPECT_EQ(if_else_node.branches().size(), 2u);
  EXPECT_EQ(while_node.branches().size(), 1u);
  const auto cases = switch_node.branches();
  ASSERT_EQ(cases.size(), 3u);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_TRUE(switch_node.branch(i) == cases[i]);
    EXPECT_EQ(cases[i].node_count(), 0u);
    for (std::size_t j = 0; j < i; ++j) EXPECT_NE(cases[i].handle(), cases[j].handle());
  }
  EXPECT_THROW(switch_node.branch(3), invalid_argument);
  EXPECT_THROW(if_else_node.branch(2), invalid_argument);

  // Preserved through nodes().
  for (const graph_node& n : def.nodes()) {
    ASSERT_EQ(n.kind(), graph_node_kind::conditional);
    if (n == switch_node) {
      EXPECT_EQ(n.conditional_type(), conditional_kind::switch_);
      EXPECT_EQ(n.branches().size(), 3u);
    }
  }
}

// ---- node creation and errors ------------------------------------------------------------------

TEST_F(GraphDefinition, LaunchChainRunsInDependencyOrder) {
  device dev(0);
  stream s(dev);
  const int n = 5000;
  add_one_graph chain(dev, s, n, seed);
  graph_node n1 = chain.node;
  graph_node n2 = n1.launch(cover(n), graph_kernel("twice"), chain.y, chain.y, n);
  graph_node n3 = n2.launch(cover(n), graph_kernel("add_one"), chain.y, n);
  EXPECT_TRUE(n1.predecessors().empty());
  EXPECT_TRUE(as_set(n2.predecessors()) == (std::unordered_set<graph_node>{n1}));
  EXPECT_TRUE(as_set(n3.predecessors()) == (std::unordered_set<graph_node>{n2}));
  EXPECT_TRUE(as_set(n1.successors()) == (std::unordered_set<graph_node>{n2}));
  EXPECT_EQ(chain.def.edges().size(), 2u);

  graph g = chain.def.instantiate();
  g.launch(s);
  std::vector<float> want(n);
  for (int i = 0; i < n; ++i) want[i] = 2.0f * (chain.y0[i] + 1.0f) + 1.0f;
  EXPECT_EQ(far_off(chain.y.to_vector<float>(s), want), 0);
}

TEST_F(GraphDefinition, JoinMergesBranches) {
  device dev(0);
  stream s(dev);
  const int n = 4099;
  y_and_z v(n, seed, s);
  graph_definition def(dev);
  graph_node b1 = def.launch(cover(n), graph_kernel("add_one"), v.y, n);
  graph_node b2 = def.launch(cover(n), graph_kernel("add_one"), v.z, n);
  graph_node j = b1.join({b2});
  EXPECT_EQ(j.kind(), graph_node_kind::empty);
  EXPECT_TRUE(as_set(j.predecessors()) == (std::unordered_set<graph_node>{b1, b2}));
  // A join of nothing more is an empty node after its one predecessor.
  graph_node single = b2.join({});
  EXPECT_EQ(single.kind(), graph_node_kind::empty);
  EXPECT_TRUE(as_set(single.predecessors()) == (std::unordered_set<graph_node>{b2}));
  // A join from the graph is an empty node after the listed ones.
  graph_node from_def = def.join({b1, b2});
  EXPECT_TRUE(as_set(from_def.predecessors()) == (std::unordered_set<graph_node>{b1, b2}));
  graph_node tail = j.launch(cover(n), graph_kernel("axpy"), 1.0f, v.z, v.y, n);
  EXPECT_TRUE(as_set(tail.predecessors()) == (std::unordered_set<graph_node>{j}));

  graph g = def.instantiate();
  g.launch(s);
  EXPECT_EQ(far_off(v.y.to_vector<float>(s), v.incremented_sum()), 0);
}

TEST_F(GraphDefinition, AllocateAndDeallocateRefuseZero) {
  device dev(0);
  graph_definition def(dev);
  EXPECT_THROW(def.allocate(0), invalid_argument);
  EXPECT_THROW(def.deallocate(0), invalid_argument);
  graph_node e = def.empty();
  EXPECT_THROW(e.allocate(0), invalid_argument);
  EXPECT_THROW(e.deallocate(0), invalid_argument);
  EXPECT_EQ(def.node_count(), 1u);
}

TEST_F(GraphDefinition, MemsetRefusesBadInput) {
  device dev(0);
  stream s(dev);
  buffer b(64, s);
  graph_definition def(dev);
  // The value does not fit in the element.
  EXPECT_THROW(def.memset_bits(b, 0x100u, 1, 4), invalid_argument);
  EXPECT_THROW(def.memset_bits(b, 0x10000u, 2, 4), invalid_argument);
  // Element sizes other than 1, 2 and 4 bytes.
  EXPECT_THROW(def.memset_bits(b, 1u, 3, 4), invalid_argument);
  EXPECT_THROW(def.memset_bits(b, 1u, 8, 4), invalid_argument);
  // Nothing to fill.
  EXPECT_THROW(def.memset(b, std::uint32_t{1}, 0), invalid_argument);
  EXPECT_THROW(def.memset(b, std::uint32_t{1}, 4, 0, 16), invalid_argument);
  // Host memory.
  std::vector<std::uint32_t> host(16);
  EXPECT_THROW(def.memset(memory_operand::host(host.data()), std::uint32_t{1}, 16),
               invalid_argument);
  // Rows closer than a row, and more bytes than the buffer has.
  EXPECT_THROW(def.memset(b, std::uint32_t{1}, 4, 2, 8), invalid_argument);
  EXPECT_THROW(def.memset(b, std::uint32_t{1}, 17), invalid_argument);
  EXPECT_THROW(def.memset(memory_operand(b, 60), std::uint16_t{1}, 3), invalid_argument);
  EXPECT_THROW(def.memset(memory_operand(device_address{0}), std::uint8_t{1}, 1), invalid_argument);
  EXPECT_EQ(def.node_count(), 0u);
  // The largest values of each size are accepted.
  def.memset_bits(b, 0xffu, 1, 64);
  def.memset_bits(b, 0xffffu, 2, 32);
  def.memset_bits(b, 0xffffffffu, 4, 16);
  EXPECT_EQ(def.node_count(), 3u);
}

TEST_F(GraphDefinition, MemcpyRefusesBadInput) {
  device dev(0);
  stream s(dev);
  buffer small(16, s);
  buffer big(64, s);
  graph_definition def(dev);
  EXPECT_THROW(def.memcpy(big, small, 0), invalid_argument);
  EXPECT_THROW(def.memcpy(small, big, 32), invalid_argument);  // past the destination
  EXPECT_THROW(def.memcpy(big, small, 32), invalid_argument);  // past the source
  EXPECT_THROW(def.memcpy(memory_operand(big, 48), big, 32), invalid_argument);
  EXPECT_THROW(def.memcpy(big, memory_operand(big, 40), 32), invalid_argument);
  EXPECT_THROW((void)memory_operand(big, 65), invalid_argument);  // offset past the end
  EXPECT_THROW(def.memcpy(memory_operand(device_address{0}), big, 16), invalid_argument);
  EXPECT_THROW(def.memcpy(big, memory_operand(device_address{0}), 16), invalid_argument);
  buffer closed(16, s);
  closed.close();
  EXPECT_THROW(def.memcpy(big, closed, 16), invalid_argument);
  EXPECT_EQ(def.node_count(), 0u);
  def.memcpy(memory_operand(big, 48), small, 16);  // exactly fits
  EXPECT_EQ(def.node_count(), 1u);
}

TEST_F(GraphDefinition, ConditionalsRefuseBadConditions) {
  device dev(0);
  graph_definition def(dev);
  graph_definition other(dev);
  graph_condition mine = def.create_condition(0u);
  graph_condition theirs = other.create_condition(0u);
  EXPECT_THROW(def.switch_(mine, 0), invalid_argument);
  EXPECT_THROW(def.if_then(theirs), invalid_argument);
  EXPECT_THROW(def.if_else(theirs), invalid_argument);
  EXPECT_THROW(def.while_loop(theirs), invalid_argument);
  EXPECT_THROW(def.switch_(theirs, 2), invalid_argument);
  EXPECT_THROW(def.if_then(graph_condition{}), invalid_argument);
  graph_node e = def.empty();
  EXPECT_THROW(e.if_then(theirs), invalid_argument);
  EXPECT_EQ(def.node_count(), 1u);
  // A condition of the graph works from a node of it, too.
  graph_node ok = e.switch_(mine, 1);
  EXPECT_EQ(ok.branches().size(), 1u);
  EXPECT_EQ(def.node_count(), 2u);
}

TEST_F(GraphDefinition, EdgesAcrossGraphsAreRefused) {
  device dev(0);
  graph_definition def(dev);
  graph_definition other(dev);
  graph_node a = def.empty();
  graph_node b = other.empty();
  EXPECT_THROW(a.add_successor(b), invalid_argument);
  EXPECT_THROW(a.add_predecessor(b), invalid_argument);
  EXPECT_THROW(a.remove_successor(b), invalid_argument);
  EXPECT_THROW(a.set_successors(std::vector<graph_node>{b}), invalid_argument);
  EXPECT_THROW(a.set_predecessors(std::vector<graph_node>{b}), invalid_argument);
  EXPECT_THROW(a.join({b}), invalid_argument);
  EXPECT_THROW(def.join({a, b}), invalid_argument);
  EXPECT_THROW(b.launch(kOne, graph_kernel("bump"), device_address{0}).add_predecessor(a),
               invalid_argument);
  EXPECT_TRUE(def.edges().empty());
  EXPECT_EQ(def.node_count(), 1u);
  EXPECT_TRUE(a.successors().empty());
}

TEST_F(GraphDefinition, SelfEdgeIsRefusedByTheDriver) {
  device dev(0);
  graph_definition def(dev);
  graph_node a = def.empty();
  EXPECT_THROW(a.add_successor(a), cuda_error);
  EXPECT_THROW(a.add_predecessor(a), cuda_error);
  EXPECT_TRUE(def.edges().empty());
  EXPECT_TRUE(a.successors().empty());
}

// ---- instantiate and execute -------------------------------------------------------------------

TEST_F(GraphDefinition, KernelNodeRunsAxpy) {
  device dev(0);
  stream s(dev);
  const int n = (1 << 16) + 5;
  axpy_problem p(n, seed, s);
  buffer y2 = upload(p.y0, s);
  graph_definition def(dev);
  def.launch(cover(n), graph_kernel("axpy"), p.a, p.x, p.y, n);
  // The kernel_arguments overload.
  kernel_arguments args(p.a, p.x, y2, n);
  def.launch(cover(n), graph_kernel("axpy"), args);
  graph g = def.instantiate();
  g.launch(s);
  const std::vector<float> want = p.y_after(1);
  EXPECT_EQ(far_off(p.y.to_vector<float>(s), want), 0);
  EXPECT_EQ(far_off(y2.to_vector<float>(s), want), 0);
}

TEST_F(GraphDefinition, MemsetNodesFillDeviceMemory) {
  device dev(0);
  stream s(dev);
  std::mt19937_64 gen(seed);
  const std::uint32_t v32 = fresh_nonzero(gen, {});
  const auto v16 = static_cast<std::uint16_t>(1 + v32 % 0xfffe);
  const auto v8 = static_cast<std::uint8_t>(1 + v32 % 0xfe);
  const std::size_t n = 10000 + gen() % 1000;
  const std::size_t off = 1 + gen() % 100;
  const std::size_t count = n / 2;

  buffer b32(n * 4, s);
  buffer b16(n * 2, s);
  buffer b8(n, s);
  const std::size_t pitch = 64, width = 5, rows = 7;  // 4-byte elements: 20 of 64 bytes per row
  buffer b2d(pitch * rows, s);
  b32.fill(std::uint32_t{0}, s);
  b16.fill(std::uint16_t{0}, s);
  b8.fill(std::uint8_t{0}, s);
  b2d.fill(std::uint32_t{0}, s);

  graph_definition def(dev);
  def.memset(b32, v32, n);
  def.memset(memory_operand(b16, off * 2), v16, count);
  def.memset(b8, v8, n);
  def.memset(b2d, v32, width, rows, pitch);
  graph g = def.instantiate();
  g.launch(s);

  EXPECT_EQ(mismatches(b32.to_vector<std::uint32_t>(s), std::vector<std::uint32_t>(n, v32)), 0);
  std::vector<std::uint16_t> want16(n, 0);
  std::fill_n(want16.begin() + static_cast<std::ptrdiff_t>(off), count, v16);
  EXPECT_EQ(mismatches(b16.to_vector<std::uint16_t>(s), want16), 0);
  EXPECT_EQ(mismatches(b8.to_vector<std::uint8_t>(s), std::vector<std::uint8_t>(n, v8)), 0);
  std::vector<std::uint32_t> want2d(pitch * rows / 4, 0);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < width; ++c) want2d[r * pitch / 4 + c] = v32;
  }
  EXPECT_EQ(mismatches(b2d.to_vector<std::uint32_t>(s), want2d), 0);
}

TEST_F(GraphDefinition, MemcpyNodeCopiesDeviceToDevice) {
  device dev(0);
  stream s(dev);
  const std::size_t n = 30000;
  auto src0 = random_values<float>(n, seed);
  buffer src = upload(src0, s);
  buffer dst(n * sizeof(float), s);
  buffer part(n * sizeof(float), s);
  dst.fill(kPoison, s);
  part.fill(kPoison, s);
  const std::size_t from = 100, to = 7, count = 1000;
  graph_definition def(dev);
  def.memcpy(dst, src, n * sizeof(float));
  def.memcpy(memory_operand(part, to * sizeof(float)), memory_operand(src, from * sizeof(float)),
             count * sizeof(float));
  graph g = def.instantiate();
  g.launch(s);
  EXPECT_EQ(mismatches(dst.to_vector<float>(s), src0), 0);
  std::vector<float> want(n, kPoison);
  std::copy_n(src0.begin() + from, count, want.begin() + to);
  EXPECT_EQ(mismatches(part.to_vector<float>(s), want), 0);
}

TEST_F(GraphDefinition, MemcpyNodesCopyThroughPinnedHostMemory) {
  device dev(0);
  stream s(dev);
  const int n = 20000;
  const std::size_t bytes = n * sizeof(float);
  pinned_buffer up(bytes);
  pinned_buffer down(bytes);
  buffer d(bytes, s);
  auto first = random_values<float>(n, seed);
  std::copy(first.begin(), first.end(), up.span<float>().begin());

  graph_definition def(dev);
  graph_node h2d = def.memcpy(d, up, bytes);
  graph_node k = h2d.launch(cover(n), graph_kernel("add_one"), d, n);
  k.memcpy(down, d, bytes);
  graph g = def.instantiate();

  g.launch(s);
  s.synchronize();
  std::vector<float> got(down.span<float>().begin(), down.span<float>().end());
  std::vector<float> want(n);
  for (int i = 0; i < n; ++i) want[i] = first[i] + 1.0f;
  EXPECT_EQ(mismatches(got, want), 0);

  // The node reads the pinned memory when it runs: new input, new output.
  auto second = random_values<float>(n, seed + 1);
  std::copy(second.begin(), second.end(), up.span<float>().begin());
  g.launch(s);
  s.synchronize();
  got.assign(down.span<float>().begin(), down.span<float>().end());
  for (int i = 0; i < n; ++i) want[i] = second[i] + 1.0f;
  EXPECT_EQ(mismatches(got, want), 0);
}

TEST_F(GraphDefinition, ChildGraphNodesRunTheChild) {
  device dev(0);
  stream s(dev);
  const int n = 7777;
  axpy_problem p(n, seed, s);
  graph_definition child(dev);
  child.launch(cover(n), graph_kernel("axpy"), p.a, p.x, p.y, n);

  graph_definition def(dev);
  graph_node first = def.embed(child);
  graph_node second = first.embed(child);
  second.launch(cover(n), graph_kernel("add_one"), p.y, n);
  graph g = def.instantiate();
  g.launch(s);
  std::vector<float> want = p.y_after(2);
  for (float& w : want) w = w + 1.0f;
  EXPECT_EQ(far_off(p.y.to_vector<float>(s), want), 0);
}

TEST_F(GraphDefinition, HostCallbackLambdaRunsAfterTheWorkBeforeIt) {
  device dev(0);
  stream s(dev);
  const int n = 3000;
  axpy_problem p(n, seed, s);
  pinned_buffer staged(n * sizeof(float));
  std::atomic<int> calls{0};
  std::vector<float> seen;

  graph_definition def(dev);
  graph_node k = def.launch(cover(n), graph_kernel("axpy"), p.a, p.x, p.y, n);
  graph_node copy = k.memcpy(staged, p.y, n * sizeof(float));
  // The callback reads what the copy before it wrote.
  float* staged_data = staged.span<float>().data();
  graph_node cb = copy.callback([&calls, &seen, staged_data, n] {
    seen.assign(staged_data, staged_data + n);
    calls.fetch_add(1);
  });
  EXPECT_EQ(cb.kind(), graph_node_kind::host_callback);
  graph g = def.instantiate();
  const int launches = 3;
  for (int l = 0; l < launches; ++l) g.launch(s);
  s.synchronize();
  EXPECT_EQ(calls.load(), launches);
  EXPECT_EQ(far_off(seen, p.y_after(launches)), 0);
}

struct callback_payload {
  std::atomic<int>* target;
  int add;
};

void add_payload(void* data) {
  callback_payload p{};
  std::memcpy(&p, data, sizeof p);  // the copy need not be aligned for the struct
  p.target->fetch_add(p.add);
}

void count_call(void* data) {
  static_cast<std::atomic<int>*>(data)->fetch_add(1);
}

std::atomic<int> g_null_user_data_calls{0};
void count_null_user_data(void* data) {
  if (data == nullptr) g_null_user_data_calls.fetch_add(1);
}

TEST_F(GraphDefinition, HostCallbackFunctionWithCopiedUserData) {
  device dev(0);
  stream s(dev);
  std::atomic<int> total{0};
  callback_payload payload{&total, static_cast<int>(1 + seed % 1000)};
  const int add = payload.add;
  graph_definition def(dev);
  graph_node cb = def.callback(&add_payload, std::as_bytes(std::span(&payload, 1)));
  EXPECT_EQ(cb.kind(), graph_node_kind::host_callback);
  // The node holds a copy: changing the original afterwards changes nothing.
  payload.add = -12345;
  payload.target = nullptr;
  // Empty user data passes a null pointer.
  g_null_user_data_calls.store(0);
  cb.callback(&count_null_user_data, std::span<const std::byte>{});
  graph g = def.instantiate();
  g.launch(s);
  g.launch(s);
  s.synchronize();
  EXPECT_EQ(total.load(), 2 * add);
  EXPECT_EQ(g_null_user_data_calls.load(), 2);
  EXPECT_THROW(def.callback(host_function{nullptr}, nullptr), invalid_argument);
}

TEST_F(GraphDefinition, HostCallbackFunctionWithRawPointer) {
  device dev(0);
  stream s(dev);
  std::atomic<int> counter{0};
  graph_definition def(dev);
  def.callback(&count_call, &counter).callback(&count_call, &counter);
  graph g = def.instantiate();
  const int launches = 2 + static_cast<int>(fresh_seed() % 4);
  for (int i = 0; i < launches; ++i) g.launch(s);
  s.synchronize();
  EXPECT_EQ(counter.load(), 2 * launches);
}

TEST_F(GraphDefinition, EventRecordAndWaitNodesOrderGraphsOnTwoStreams) {
  // The producer graph runs a slow kernel that writes `mid` and records the event; the consumer
  // graph waits on it and reads `mid`. Without the wait it would read the poison.
  device dev(0);
  stream s1(dev);
  stream s2(dev);
  stream s3(dev);
  const int n = 1 << 16;
  auto in0 = random_values<float>(n, seed);
  buffer in = upload(in0, s1);
  buffer mid(n * sizeof(float), s1);
  buffer out(n * sizeof(float), s1);
  mid.fill(kPoison, s1);
  out.fill(kPoison, s1);
  s1.synchronize();

  event e(dev, {.timing = false});
  const long long cycles = 20'000'000;  // ~10 ms
  graph_definition producer(dev);
  graph_node record = producer
                          .launch(cover(n), gpu_testing::test_kernels().get_kernel("spin_scale"),
                                  in, mid, n, cycles)
                          .record(e);
  graph_definition consumer(dev);
  graph_node wait = consumer.wait(e);
  wait.launch(cover(n), graph_kernel("twice"), mid, out, n);
  EXPECT_EQ(record.kind(), graph_node_kind::event_record);
  EXPECT_EQ(wait.kind(), graph_node_kind::event_wait);
  EXPECT_EQ(record.event_handle(), e.handle());
  EXPECT_EQ(wait.event_handle(), e.handle());
  graph gp = producer.instantiate();
  graph gc = consumer.instantiate();

  gp.launch(s1);
  gc.launch(s2);
  auto result = out.to_vector<float>(s2);
  std::vector<float> want(n);
  for (int i = 0; i < n; ++i) want[i] = 4.0f * in0[i];
  EXPECT_EQ(mismatches(result, want), 0);
  EXPECT_TRUE(e.query());

  // The host waits on the event the graph records.
  mid.fill(kPoison, s1);
  s1.synchronize();
  gp.launch(s1);
  e.synchronize();
  auto m = mid.to_vector<float>(s3);
  for (int i = 0; i < n; ++i) want[i] = 2.0f * in0[i];
  EXPECT_EQ(mismatches(m, want), 0);
  s1.synchronize();
}

TEST_F(GraphDefinition, AllocatedMemoryIsUsableUntilItsFreeNode) {
  device dev(0);
  stream s(dev);
  const int n = 12345;
  const std::size_t bytes = n * sizeof(float);
  axpy_problem p(n, seed, s);

  graph_definition def(dev);
  graph_node alloc = def.allocate(bytes);
  const device_address tmp = alloc.alloc_params().address;
  graph_node copy = alloc.memcpy(tmp, p.x, bytes);
  graph_node k = copy.launch(cover(n), graph_kernel("axpy"), p.a, tmp, p.y, n);
  graph_node freed = k.deallocate(tmp);
  EXPECT_EQ(freed.free_address(), tmp);
  EXPECT_TRUE(as_set(freed.predecessors()) == (std::unordered_set<graph_node>{k}));

  graph g = def.instantiate();
  g.launch(s);
  EXPECT_EQ(far_off(p.y.to_vector<float>(s), p.y_after(1)), 0);
  // Freed by its node: the graph runs again.
  g.launch(s);
  EXPECT_EQ(far_off(p.y.to_vector<float>(s), p.y_after(2)), 0);
}

TEST_F(GraphDefinition, IfThenRunsItsBodyOnlyWhenTheConditionIsTrue) {
  device dev(0);
  stream s(dev);
  buffer flag(sizeof(unsigned), s);
  buffer body_count = upload(std::vector<int>{0}, s);
  buffer after_count = upload(std::vector<int>{0}, s);
  graph_definition def(dev);
  graph_condition c = def.create_condition();
  graph_node cond = def.launch(kOne, graph_kernel("set_condition_from"), c, flag).if_then(c);
  cond.branch(0).launch(kOne, graph_kernel("bump"), body_count);
  cond.launch(kOne, graph_kernel("bump"), after_count);
  graph g = def.instantiate();

  const unsigned values[] = {1u, 0u, 2u + static_cast<unsigned>(seed % 1000), 0u};
  int want_body = 0;
  int want_after = 0;
  for (unsigned v : values) {
    flag.copy_from(std::vector<unsigned>{v}, s);
    g.launch(s);
    want_body += v != 0 ? 1 : 0;
    ++want_after;
    EXPECT_EQ(read_int(body_count, s), want_body) << "condition " << v;
    EXPECT_EQ(read_int(after_count, s), want_after) << "condition " << v;
  }
}

TEST_F(GraphDefinition, IfElseRunsOneOfItsBranches) {
  device dev(0);
  stream s(dev);
  std::mt19937_64 gen(seed);
  const std::uint32_t then_value = fresh_nonzero(gen, {});
  const std::uint32_t else_value = fresh_nonzero(gen, {then_value});
  buffer out(sizeof(std::uint32_t), s);
  for (unsigned v : {1u, 0u}) {
    SCOPED_TRACE("condition " + std::to_string(v));
    graph_definition def(dev);
    graph_condition c = def.create_condition();
    // The condition is set by a kernel that takes it as an argument.
    graph_node node = def.launch(kOne, graph_kernel("set_condition"), c, v).if_else(c);
    node.branch(0).memset(out, then_value, 1);
    node.branch(1).memset(out, else_value, 1);
    graph g = def.instantiate();
    out.fill(std::uint32_t{0}, s);
    g.launch(s);
    EXPECT_EQ(out.to_vector<std::uint32_t>(s).at(0), v != 0 ? then_value : else_value);
  }
}

TEST_F(GraphDefinition, WhileLoopRunsUntilTheBodyClearsTheCondition) {
  device dev(0);
  stream s(dev);
  const int limit = 1 + static_cast<int>(seed % 50);
  buffer counter = upload(std::vector<int>{0}, s);
  buffer after = upload(std::vector<int>{0}, s);
  graph_definition def(dev);
  graph_condition c = def.create_condition(1u);  // every launch enters the loop
  graph_node loop = def.while_loop(c);
  loop.branch(0).launch(kOne, graph_kernel("count_up"), c, counter, limit);
  loop.launch(kOne, graph_kernel("bump"), after);
  graph g = def.instantiate();
  g.launch(s);
  EXPECT_EQ(read_int(counter, s), limit);
  EXPECT_EQ(read_int(after, s), 1);
  // The default is set again at the next launch: one more pass, which clears it.
  g.launch(s);
  EXPECT_EQ(read_int(counter, s), limit + 1);
  EXPECT_EQ(read_int(after, s), 2);
}

TEST_F(GraphDefinition, WhileLoopWithAFalseDefaultRunsZeroTimes) {
  device dev(0);
  stream s(dev);
  buffer counter = upload(std::vector<int>{0}, s);
  buffer after = upload(std::vector<int>{0}, s);
  graph_definition def(dev);
  graph_condition c = def.create_condition(0u);
  graph_node loop = def.while_loop(c);
  loop.branch(0).launch(kOne, graph_kernel("bump"), counter);
  loop.launch(kOne, graph_kernel("bump"), after);
  graph g = def.instantiate();
  g.launch(s);
  g.launch(s);
  EXPECT_EQ(read_int(counter, s), 0);
  EXPECT_EQ(read_int(after, s), 2);  // the graph did run
}

TEST_F(GraphDefinition, SwitchRunsTheSelectedBranchAndSkipsAllOutOfRange) {
  device dev(0);
  stream s(dev);
  std::mt19937_64 gen(seed);
  const unsigned count = 4;
  std::vector<std::uint32_t> values;
  for (unsigned i = 0; i < count; ++i) values.push_back(fresh_nonzero(gen, values));
  buffer selector(sizeof(unsigned), s);
  buffer out(sizeof(std::uint32_t), s);

  graph_definition def(dev);
  graph_condition c = def.create_condition();
  // The condition through an explicit kernel_arguments.
  kernel_arguments args;
  args.push(c);
  args.push(selector);
  graph_node sw = def.launch(kOne, graph_kernel("set_condition_from"), args).switch_(c, count);
  for (unsigned i = 0; i < count; ++i) sw.branch(i).memset(out, values[i], 1);
  graph g = def.instantiate();

  std::vector<unsigned> order(count);
  for (unsigned i = 0; i < count; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), gen);
  for (unsigned pick : order) {
    selector.copy_from(std::vector<unsigned>{pick}, s);
    out.fill(std::uint32_t{0}, s);
    g.launch(s);
    EXPECT_EQ(out.to_vector<std::uint32_t>(s).at(0), values[pick]) << "branch " << pick;
  }
  const unsigned out_of_range = count + static_cast<unsigned>(gen() % 1000);
  selector.copy_from(std::vector<unsigned>{out_of_range}, s);
  out.fill(std::uint32_t{0}, s);
  g.launch(s);
  EXPECT_EQ(out.to_vector<std::uint32_t>(s).at(0), 0u) << "value " << out_of_range;
}

// ---- mutation ----------------------------------------------------------------------------------

// A Y: two arms (a1: y += 1, a2: z += 1) meeting at the joint (y += z).
struct y_rig {
  static constexpr int n = 4096;
  std::vector<float> y0, z0;
  buffer y, z;
  graph_definition def;
  graph_node a1, a2, joint;

  y_rig(const device& dev, const stream& s, std::uint64_t seed)
      : y0(random_values<float>(n, seed)),
        z0(random_values<float>(n, seed + 1)),
        y(upload(y0, s)),
        z(upload(z0, s)),
        def(dev) {
    a1 = def.launch(cover(n), graph_kernel("add_one"), y, n);
    a2 = def.launch(cover(n), graph_kernel("add_one"), z, n);
    joint = a1.launch(cover(n), graph_kernel("axpy"), 1.0f, z, y, n);
    joint.add_predecessor(a2);
  }

  // Runs the graph once and checks y and z against want(y0, z0) -> (y, z).
  template <class F>
  void run_and_check(const stream& s, F want) {
    graph g = def.instantiate();
    g.launch(s);
    std::vector<float> wy(n), wz(n);
    for (int i = 0; i < n; ++i) std::tie(wy[i], wz[i]) = want(y0[i], z0[i]);
    EXPECT_EQ(far_off(y.to_vector<float>(s), wy), 0);
    EXPECT_EQ(far_off(z.to_vector<float>(s), wz), 0);
  }
};

// One row per change to the Y: what it does (with its checks of the new topology), and what y and z
// hold after one launch of the changed graph.
struct y_rig_change {
  const char* name;  // the test's name
  void (*change)(y_rig& rig);
  std::pair<float, float> (*want)(float y, float z);
};

void PrintTo(const y_rig_change& c, std::ostream* os) {
  *os << c.name;
}

const y_rig_change kYRigChanges[] = {
    {"Baseline",
     [](y_rig& rig) {
       EXPECT_EQ(rig.def.node_count(), 3u);
       EXPECT_TRUE(as_set(rig.joint.predecessors()) ==
                   (std::unordered_set<graph_node>{rig.a1, rig.a2}));
     },
     [](float y, float z) {
       return std::pair{(y + 1) + (z + 1), z + 1};
     }},
    {"DestroyFirstArm",
     [](y_rig& rig) {
       rig.a1.destroy();
       EXPECT_EQ(rig.def.node_count(), 2u);
       EXPECT_EQ(rig.def.edges().size(), 1u);
       EXPECT_TRUE(as_set(rig.joint.predecessors()) == (std::unordered_set<graph_node>{rig.a2}));
     },
     [](float y, float z) {
       return std::pair{y + (z + 1), z + 1};
     }},
    {"DestroySecondArm",
     [](y_rig& rig) {
       rig.a2.destroy();
       EXPECT_EQ(rig.def.node_count(), 2u);
       EXPECT_TRUE(as_set(rig.joint.predecessors()) == (std::unordered_set<graph_node>{rig.a1}));
     },
     [](float y, float z) {
       return std::pair{(y + 1) + z, z};
     }},
    {"DestroyJoint",
     [](y_rig& rig) {
       rig.joint.destroy();
       EXPECT_EQ(rig.def.node_count(), 2u);
       EXPECT_TRUE(rig.def.edges().empty());
       EXPECT_TRUE(rig.a1.successors().empty());
     },
     [](float y, float z) {
       return std::pair{y + 1, z + 1};
     }},
    {"InsertNodeBetweenArmAndJoint",
     [](y_rig& rig) {
       // b: y = 2 * y, between a1 and the joint.
       graph_node b =
           rig.def.launch(cover(y_rig::n), graph_kernel("twice"), rig.y, rig.y, y_rig::n);
       b.set_predecessors(std::vector<graph_node>{rig.a1});
       b.add_successor(rig.joint);
       rig.a1.remove_successor(rig.joint);
       EXPECT_TRUE(as_set(rig.a1.successors()) == (std::unordered_set<graph_node>{b}));
       EXPECT_TRUE(as_set(rig.joint.predecessors()) == (std::unordered_set<graph_node>{b, rig.a2}));
       EXPECT_EQ(rig.def.edges().size(), 3u);
     },
     [](float y, float z) {
       return std::pair{2 * (y + 1) + (z + 1), z + 1};
     }},
};

class GraphDefinitionYRig : public GraphDefinition,
                            public ::testing::WithParamInterface<y_rig_change> {};

TEST_P(GraphDefinitionYRig, RunsAsChanged) {
  device dev(0);
  stream s(dev);
  y_rig rig(dev, s, seed);
  GetParam().change(rig);
  rig.run_and_check(s, GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(Changes, GraphDefinitionYRig, ::testing::ValuesIn(kYRigChanges),
                         [](const ::testing::TestParamInfo<y_rig_change>& info) {
                           return std::string(info.param.name);
                         });

TEST_F(GraphDefinition, SetPredecessorsAndSuccessorsReplaceEdges) {
  device dev(0);
  stream s(dev);
  const int n = 2048;
  y_and_z v(n, seed, s);
  graph_definition def(dev);
  // A line a -> b -> c, rewired into a fan-in (a, b) -> c.
  graph_node a = def.launch(cover(n), graph_kernel("add_one"), v.y, n);
  graph_node b = a.launch(cover(n), graph_kernel("add_one"), v.z, n);
  graph_node c = b.launch(cover(n), graph_kernel("axpy"), 1.0f, v.z, v.y, n);
  c.set_predecessors(std::vector<graph_node>{a, b});
  b.remove_predecessor(a);
  auto edges = def.edges();
  EXPECT_EQ(edges.size(), 2u);
  EXPECT_TRUE(has_edge(edges, a, c));
  EXPECT_TRUE(has_edge(edges, b, c));
  EXPECT_TRUE(b.predecessors().empty());

  // add_predecessor points the edge into the node it is called on.
  graph_node d = def.empty();
  d.add_predecessor(c);
  EXPECT_TRUE(has_edge(def.edges(), c, d));
  EXPECT_FALSE(has_edge(def.edges(), d, c));
  // set_successors replaces every outgoing edge.
  graph_node e = def.empty();
  c.set_successors(std::vector<graph_node>{e});
  EXPECT_TRUE(as_set(c.successors()) == (std::unordered_set<graph_node>{e}));
  EXPECT_TRUE(d.predecessors().empty());
  c.set_successors(std::vector<graph_node>{});
  EXPECT_TRUE(c.successors().empty());
  EXPECT_EQ(def.edges().size(), 2u);

  graph g = def.instantiate();
  g.launch(s);
  EXPECT_EQ(far_off(v.y.to_vector<float>(s), v.incremented_sum()), 0);
}

TEST_F(GraphDefinition, DestroyedNodeIsInvalidForEveryCopy) {
  device dev(0);
  graph_definition def(dev);
  graph_node a = def.empty();
  graph_node b = a.empty();
  graph_node copy = b;
  b.destroy();
  EXPECT_FALSE(b.valid());
  EXPECT_FALSE(copy.valid());
  EXPECT_FALSE(static_cast<bool>(copy));
  EXPECT_EQ(def.node_count(), 1u);
  EXPECT_TRUE(a.successors().empty());
  EXPECT_TRUE(def.nodes().at(0) == a);
  EXPECT_THROW(copy.kind(), invalid_argument);
  EXPECT_THROW(copy.handle(), invalid_argument);
  EXPECT_THROW(copy.graph(), invalid_argument);
  EXPECT_THROW(copy.predecessors(), invalid_argument);
  EXPECT_THROW(copy.successors(), invalid_argument);
  EXPECT_THROW(copy.empty(), invalid_argument);
  EXPECT_THROW(copy.launch(kOne, graph_kernel("bump"), device_address{0}), invalid_argument);
  EXPECT_THROW(copy.destroy(), invalid_argument);
  EXPECT_THROW(a.add_successor(copy), invalid_argument);
  EXPECT_THROW(def.join({a, copy}), invalid_argument);
  EXPECT_EQ(def.node_count(), 1u);
  // The graph itself stays usable.
  graph_node c = a.empty();
  EXPECT_EQ(def.node_count(), 2u);
  EXPECT_TRUE(as_set(a.successors()) == (std::unordered_set<graph_node>{c}));
}

TEST_F(GraphDefinition, DestroyingAConditionalNodeInvalidatesItsBranches) {
  device dev(0);
  graph_definition def(dev);
  graph_condition c = def.create_condition(0u);
  graph_node node = def.if_else(c);
  graph_definition then_branch = node.branch(0);
  graph_definition else_branch = node.branch(1);
  graph_node inner = then_branch.empty();
  graph_definition child(dev);
  child.empty();
  graph_node nested = else_branch.embed(child);  // a child graph inside a body
  graph_definition nested_body = nested.child_graph();
  node.destroy();
  EXPECT_EQ(def.node_count(), 0u);
  for (const graph_definition& view : {then_branch, else_branch, nested_body}) {
    EXPECT_FALSE(view.valid());
    EXPECT_FALSE(static_cast<bool>(view));
    EXPECT_THROW(view.node_count(), invalid_argument);
    EXPECT_THROW(view.nodes(), invalid_argument);
    EXPECT_THROW(view.handle(), invalid_argument);
    EXPECT_THROW(view.empty(), invalid_argument);
    EXPECT_THROW(view.instantiate(), invalid_argument);
  }
  EXPECT_FALSE(inner.valid());
  EXPECT_FALSE(nested.valid());
  EXPECT_THROW(inner.kind(), invalid_argument);
  EXPECT_TRUE(def.valid());
  def.empty();
  EXPECT_EQ(def.node_count(), 1u);
}

enum class view_copy { clone, embed, instantiate, update };

const char* to_string(view_copy how) {
  switch (how) {
    case view_copy::clone:
      return "clone";
    case view_copy::embed:
      return "embed";
    case view_copy::instantiate:
      return "instantiate";
    case view_copy::update:
      return "update";
  }
  return "?";
}

// Makes the executable graph that runs a copy of `view` the way `how` says; a copy that is a
// definition goes into `copy` (instantiated later), the others straight into `exec`.
void copy_view(const device& dev, view_copy how, const graph_definition& view,
               std::optional<graph_definition>& copy, std::optional<graph>& exec) {
  switch (how) {
    case view_copy::clone:
      copy = view.clone();
      break;
    case view_copy::embed:
      copy.emplace(dev);
      copy->embed(view);
      break;
    case view_copy::instantiate:
      exec = view.instantiate();
      break;
    case view_copy::update: {
      graph_definition same_shape(dev);
      for (std::size_t i = 0; i < view.node_count(); ++i) same_shape.callback([] {});
      exec = same_shape.instantiate();
      exec->update(view);
      break;
    }
  }
}

constexpr view_copy kViewCopies[] = {view_copy::clone, view_copy::embed, view_copy::instantiate,
                                     view_copy::update};

// Copies of a child graph's view (clone, embed, instantiate, update) hold every owner of the
// view's nodes: the references CUDA copies (held by the view's own graph: the embedded child's
// nodes) and those the view's ancestors hold (nodes added through the view), which cucore retains
// on the copy. Before, the four operations refused views.
TEST_F(GraphDefinition, CopiesOfChildGraphViewsKeepTheirOwners) {
  device dev(0);
  for (const view_copy how : kViewCopies) {
    SCOPED_TRACE(to_string(how));
    std::atomic<int> runs{0};
    auto embedded_token = std::make_shared<int>(1);  // owned by a node of the embedded child
    auto added_token = std::make_shared<int>(2);     // owned by a node added through the view
    const std::weak_ptr<int> embedded_alive = embedded_token;
    const std::weak_ptr<int> added_alive = added_token;
    std::optional<graph_definition> def(std::in_place, dev);
    graph_definition view;
    {
      graph_definition child(dev);
      child.callback([t = std::move(embedded_token), &runs] { runs += *t; });
      view = def->embed(child).child_graph();
    }
    view.callback([t = std::move(added_token), &runs] { runs += *t; });

    std::optional<graph_definition> copy;
    std::optional<graph> exec;
    ASSERT_NO_THROW(copy_view(dev, how, view, copy, exec));
    // The top graph and every view of it go: the copy alone holds the owners.
    view = graph_definition();
    def.reset();
    EXPECT_TRUE(still_alive_after(added_alive)) << "a node added through the view";
    EXPECT_TRUE(still_alive_after(embedded_alive)) << "a node of the embedded child";
    if (copy) {
      exec = copy->instantiate();
      copy.reset();
      EXPECT_TRUE(still_alive_after(added_alive));
    }
    stream s(dev);
    exec->launch(s);
    s.synchronize();
    EXPECT_EQ(runs.load(), 3) << "the copy runs the view's nodes, with their owners";
    exec.reset();
    EXPECT_TRUE(expires_within(added_alive)) << "released once the last copy is gone";
    EXPECT_TRUE(expires_within(embedded_alive));
  }
}

// CUDA does not clone a conditional node's body graph on its own (CUDA_ERROR_NOT_SUPPORTED, driver
// 580), and every copy of a view goes through a clone: each is refused with the rule, and nothing
// changes (the owners stay with the top graph, which still runs the body).
TEST_F(GraphDefinition, CopiesOfConditionalBodyViewsAreRefusedWithTheRule) {
  device dev(0);
  stream s(dev);
  const int n = 1000;
  // Bodies run kernels (CUDA refuses host callbacks in them).
  buffer y = upload(std::vector<float>(n, 1.0f), s);
  graph_definition def(dev);
  graph_definition body = def.if_then(def.create_condition(1u)).branch(0);
  body.launch(cover(n), graph_kernel("add_one"), y, n);
  for (const view_copy how : kViewCopies) {
    SCOPED_TRACE(to_string(how));
    std::optional<graph_definition> copy;
    std::optional<graph> exec;
    try {
      copy_view(dev, how, body, copy, exec);
      ADD_FAILURE() << "a copy of a conditional body was made";
    } catch (const cuda_error& e) {
      EXPECT_EQ(e.result_name(), "CUDA_ERROR_NOT_SUPPORTED") << e.what();
      EXPECT_TRUE(contains(e.what(), "body graph on its own")) << e.what();
    }
  }
  EXPECT_EQ(body.node_count(), 1u);
  graph exec = def.instantiate();
  exec.launch(s);
  const std::vector<float> got = y.to_vector<float>(s);
  EXPECT_EQ(std::count(got.begin(), got.end(), 2.0f), n) << "the top graph still runs the body";
}

// A view of a destroyed node's child graph is refused by every copy, with the reason.
TEST_F(GraphDefinition, CopiesOfADestroyedViewAreRefused) {
  device dev(0);
  graph_definition child(dev);
  child.empty();
  graph_definition def(dev);
  graph_node node = def.embed(child);
  graph_definition view = node.child_graph();
  graph exec = def.instantiate();
  node.destroy();
  graph_definition other(dev);
  EXPECT_TRUE(contains(invalid_argument_message([&] { (void)view.clone(); }), "destroyed"));
  EXPECT_TRUE(contains(invalid_argument_message([&] { (void)view.instantiate(); }), "destroyed"));
  EXPECT_TRUE(contains(invalid_argument_message([&] { (void)other.embed(view); }), "destroyed"));
  EXPECT_TRUE(contains(invalid_argument_message([&] { exec.update(view); }), "destroyed"));
  EXPECT_EQ(other.node_count(), 0u) << "a refused embed adds nothing";
}

// The driver's rules for graphs with conditional nodes (measured, driver 580 / CUDA 13.0): one
// executable graph at a time, and no clone (CUDA_ERROR_NOT_SUPPORTED). cucore's errors name the
// rule and what to do.
TEST_F(GraphDefinition, AGraphWithConditionalNodesHasOneExecutableGraphAtATime) {
  device dev(0);
  const auto cuda_error_message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const cuda_error& e) {
      EXPECT_EQ(e.result_name(), "CUDA_ERROR_NOT_SUPPORTED") << e.what();
      return e.what();
    }
    return "<no cuda_error was thrown>";
  };
  for (const conditional_kind kind :
       {conditional_kind::if_then, conditional_kind::while_loop, conditional_kind::switch_}) {
    SCOPED_TRACE(static_cast<int>(kind));
    graph_definition def(dev);
    const graph_condition c = def.create_condition(0u);
    graph_node node = kind == conditional_kind::if_then      ? def.if_then(c)
                      : kind == conditional_kind::while_loop ? def.while_loop(c)
                                                             : def.switch_(c, 3);
    node.branch(0).empty();
    std::string msg = cuda_error_message([&] { (void)def.clone(); });
    EXPECT_TRUE(contains(msg, "does not clone")) << msg;
    graph_definition outer(dev);
    msg = cuda_error_message([&] { (void)outer.embed(def); });
    EXPECT_TRUE(contains(msg, "does not clone")) << msg;
    EXPECT_EQ(outer.node_count(), 0u) << "a refused embed adds nothing";
    {
      graph exec = def.instantiate();
      msg = cuda_error_message([&] { (void)def.instantiate(); });
      EXPECT_TRUE(contains(msg, "one executable graph at a time")) << msg;
      EXPECT_TRUE(contains(msg, "destroy the cucore::graph")) << msg;
      stream s(dev);
      exec.launch(s);
      s.synchronize();
    }
    // Once the executable graph is gone, another can be made.
    graph again = def.instantiate();
  }
  // Without conditional nodes: any number of executable graphs, and clones at any time.
  graph_definition plain(dev);
  plain.empty();
  graph a = plain.instantiate();
  graph b = plain.instantiate();
  EXPECT_NO_THROW((void)plain.clone());
}

TEST_F(GraphDefinition, DestroyingAChildNodeInvalidatesItsView) {
  device dev(0);
  graph_definition child(dev);
  child.empty().empty();
  graph_definition def(dev);
  graph_node node = def.embed(child);
  graph_definition view = node.child_graph();
  graph_node inner = view.nodes().at(0);
  EXPECT_TRUE(inner.valid());
  node.destroy();
  EXPECT_FALSE(view.valid());
  EXPECT_THROW(view.node_count(), invalid_argument);
  EXPECT_THROW(view.edges(), invalid_argument);
  EXPECT_THROW(view.empty(), invalid_argument);
  EXPECT_FALSE(inner.valid());
  EXPECT_THROW(inner.successors(), invalid_argument);
  // The embedded graph was a copy: the child itself is untouched.
  EXPECT_TRUE(child.valid());
  EXPECT_EQ(child.node_count(), 2u);
}

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
