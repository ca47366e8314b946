// The explicit graph API (graph_definition, graph_node): structure and identity, the parameters of
// every node kind read back, and node creation with the errors cucore or the driver raise (label
// gpu; each test skips without a device). Adapted from cuda.core's test_graph_definition*.py. The
// other graph_definition_*_test.cpp files run the graphs and change them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/event.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "graph_definition_support.hpp"

namespace cucore {
namespace {

using namespace graph_definition_testing;  // graph_definition_support.hpp

// ---- structure and identity --------------------------------------------------------------------

TEST_F(GraphDefinition, NodesEdgesPredecessorsAndSuccessorsMatchWhatWasAdded) {
  graph_definition def(dev());
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

TEST_F(GraphDefinition, EmptyGraphHasNoNodesAndInstantiates) {
  graph_definition def(dev());
  EXPECT_TRUE(def.valid());
  EXPECT_TRUE(static_cast<bool>(def));
  EXPECT_NE(def.handle(), nullptr);
  EXPECT_EQ(def.device(), dev());
  EXPECT_EQ(def.node_count(), 0u);
  EXPECT_TRUE(def.nodes().empty());
  EXPECT_TRUE(def.edges().empty());
  graph g = def.instantiate();
  ASSERT_TRUE(g.valid());
  EXPECT_NE(g.handle(), nullptr);
  EXPECT_EQ(g.device(), dev());
  g.launch(s);
  s.synchronize();
  g.close();
  EXPECT_FALSE(g.valid());
  g.close();  // idempotent
  EXPECT_THROW(g.launch(s), invalid_argument);
}

TEST_F(GraphDefinition, NodesKnowTheirGraph) {
  graph_definition def(dev());
  graph_definition other(dev());
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
  graph_definition def(dev());
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
  buffer a(1024, s);
  buffer b(1024, s);
  event e(dev());
  graph_definition child(dev());
  child.empty();

  graph_definition def(dev());
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
  buffer y(4096, s);
  graph_definition def(dev());
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
  expect_each_refused(k, &graph_node::memcpy_params, &graph_node::memset_params,
                      &graph_node::alloc_params, &graph_node::free_address,
                      &graph_node::event_handle, &graph_node::child_graph,
                      &graph_node::conditional_type, &graph_node::condition, &graph_node::branches);
  EXPECT_THROW(def.empty().kernel_params(), invalid_argument);
}

TEST_F(GraphDefinition, MemcpyAndMemsetParametersReadBack) {
  buffer dst(256, s);
  buffer src(256, s);
  pinned_buffer host(256);
  graph_definition def(dev());

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
  event e(dev());
  graph_definition def(dev());
  graph_node alloc = def.allocate(1 << 20);
  const mem_alloc_node_params p = alloc.alloc_params();
  EXPECT_NE(p.address, 0u);
  EXPECT_EQ(p.bytes, std::size_t{1} << 20);
  EXPECT_EQ(p.device, dev().ordinal());
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
  buffer y(1024, s);
  graph_definition child(dev());
  graph_node first = child.launch(cover(256), graph_kernel("add_one"), y, 256);
  first.empty();

  graph_definition def(dev());
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
  graph_definition def(dev());
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
  const int n = 5000;
  add_one_graph chain(dev(), s, n, seed);
  graph_node n1 = chain.node;
  graph_node n2 = n1.launch(cover(n), graph_kernel("twice"), chain.y, chain.y, n);
  graph_node n3 = n2.launch(cover(n), graph_kernel("add_one"), chain.y, n);
  EXPECT_TRUE(n1.predecessors().empty());
  EXPECT_TRUE(as_set(n2.predecessors()) == (std::unordered_set<graph_node>{n1}));
  EXPECT_TRUE(as_set(n3.predecessors()) == (std::unordered_set<graph_node>{n2}));
  EXPECT_TRUE(as_set(n1.successors()) == (std::unordered_set<graph_node>{n2}));
  EXPECT_EQ(chain.def.edges().size(), 2u);

  graph g = launched(chain.def);
  EXPECT_EQ(chain.y_far_off(s, [](float y) { return 2.0f * (y + 1.0f) + 1.0f; }), 0);
}

TEST_F(GraphDefinition, JoinMergesBranches) {
  axpy_problem v(4099, seed, s);
  graph_definition def(dev());
  graph_node b1 = v.increment_y(def);
  graph_node b2 = v.increment_x(def);
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
  graph_node tail = v.add_x_to_y(j);
  EXPECT_TRUE(as_set(tail.predecessors()) == (std::unordered_set<graph_node>{j}));

  graph g = launched(def);
  EXPECT_EQ(far_off(v.y.to_vector<float>(s), v.incremented_sum()), 0);
}

TEST_F(GraphDefinition, AllocateAndDeallocateRefuseZero) {
  graph_definition def(dev());
  EXPECT_THROW(def.allocate(0), invalid_argument);
  EXPECT_THROW(def.deallocate(0), invalid_argument);
  graph_node e = def.empty();
  EXPECT_THROW(e.allocate(0), invalid_argument);
  EXPECT_THROW(e.deallocate(0), invalid_argument);
  EXPECT_EQ(def.node_count(), 1u);
}

TEST_F(GraphDefinition, MemsetRefusesBadInput) {
  buffer b(64, s);
  graph_definition def(dev());
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
  buffer small(16, s);
  buffer big(64, s);
  graph_definition def(dev());
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
  graph_definition def(dev());
  graph_definition other(dev());
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
  graph_definition def(dev());
  graph_definition other(dev());
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
  graph_definition def(dev());
  graph_node a = def.empty();
  EXPECT_THROW(a.add_successor(a), cuda_error);
  EXPECT_THROW(a.add_predecessor(a), cuda_error);
  EXPECT_TRUE(def.edges().empty());
  EXPECT_TRUE(a.successors().empty());
}

}  // namespace
}  // namespace cucore
