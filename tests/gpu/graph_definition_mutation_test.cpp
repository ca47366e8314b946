// The explicit graph API: topology mutation (destroyed nodes, edges added and removed), and copies
// of child graph and conditional body views (clone, embed, instantiate, update), with the owners
// they keep (label gpu; each test skips without a device). Adapted from cuda.core's
// test_graph_definition*.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "graph_definition_support.hpp"

namespace cucore {
namespace {

using namespace graph_definition_testing;  // graph_definition_support.hpp

// ---- mutation ----------------------------------------------------------------------------------

// A Y: two arms (a1: y += 1, a2: x += 1) meeting at the joint (y += x).
struct y_rig : axpy_problem {
  static constexpr int size = 4096;
  graph_definition def;
  graph_node a1, a2, joint;

  y_rig(const device& dev, const stream& s, std::uint64_t seed)
      : axpy_problem(size, seed, s), def(dev) {
    a1 = increment_y(def);
    a2 = increment_x(def);
    joint = add_x_to_y(a1);
    joint.add_predecessor(a2);
  }

  // Runs the graph once and checks y and x against want(y0, x0) -> (y, x).
  template <class F>
  void run_and_check(const stream& s, F want) {
    graph g = def.instantiate();
    g.launch(s);
    std::vector<float> wy(size), wx(size);
    for (int i = 0; i < size; ++i) std::tie(wy[i], wx[i]) = want(y0[i], x0[i]);
    EXPECT_EQ(far_off(y.to_vector<float>(s), wy), 0);
    EXPECT_EQ(far_off(x.to_vector<float>(s), wx), 0);
  }
};

// One row per change to the Y: what it does (with its checks of the new topology), and what y and x
// hold after one launch of the changed graph.
struct y_rig_change {
  const char* name;  // the test's name
  void (*change)(y_rig& rig);
  std::pair<float, float> (*want)(float y, float x);
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
     [](float y, float x) {
       return std::pair{(y + 1) + (x + 1), x + 1};
     }},
    {"DestroyFirstArm",
     [](y_rig& rig) {
       rig.a1.destroy();
       EXPECT_EQ(rig.def.node_count(), 2u);
       EXPECT_EQ(rig.def.edges().size(), 1u);
       EXPECT_TRUE(as_set(rig.joint.predecessors()) == (std::unordered_set<graph_node>{rig.a2}));
     },
     [](float y, float x) {
       return std::pair{y + (x + 1), x + 1};
     }},
    {"DestroySecondArm",
     [](y_rig& rig) {
       rig.a2.destroy();
       EXPECT_EQ(rig.def.node_count(), 2u);
       EXPECT_TRUE(as_set(rig.joint.predecessors()) == (std::unordered_set<graph_node>{rig.a1}));
     },
     [](float y, float x) {
       return std::pair{(y + 1) + x, x};
     }},
    {"DestroyJoint",
     [](y_rig& rig) {
       rig.joint.destroy();
       EXPECT_EQ(rig.def.node_count(), 2u);
       EXPECT_TRUE(rig.def.edges().empty());
       EXPECT_TRUE(rig.a1.successors().empty());
     },
     [](float y, float x) {
       return std::pair{y + 1, x + 1};
     }},
    {"InsertNodeBetweenArmAndJoint",
     [](y_rig& rig) {
       // b: y = 2 * y, between a1 and the joint.
       graph_node b =
           rig.def.launch(cover(y_rig::size), graph_kernel("twice"), rig.y, rig.y, y_rig::size);
       b.set_predecessors(std::vector<graph_node>{rig.a1});
       b.add_successor(rig.joint);
       rig.a1.remove_successor(rig.joint);
       EXPECT_TRUE(as_set(rig.a1.successors()) == (std::unordered_set<graph_node>{b}));
       EXPECT_TRUE(as_set(rig.joint.predecessors()) == (std::unordered_set<graph_node>{b, rig.a2}));
       EXPECT_EQ(rig.def.edges().size(), 3u);
     },
     [](float y, float x) {
       return std::pair{2 * (y + 1) + (x + 1), x + 1};
     }},
};

class GraphDefinitionYRig : public GraphDefinition,
                            public ::testing::WithParamInterface<y_rig_change> {};

TEST_P(GraphDefinitionYRig, RunsAsChanged) {
  y_rig rig(dev(), s, seed);
  GetParam().change(rig);
  rig.run_and_check(s, GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(Changes, GraphDefinitionYRig, ::testing::ValuesIn(kYRigChanges),
                         [](const ::testing::TestParamInfo<y_rig_change>& info) {
                           return std::string(info.param.name);
                         });

TEST_F(GraphDefinition, SetPredecessorsAndSuccessorsReplaceEdges) {
  axpy_problem v(2048, seed, s);
  graph_definition def(dev());
  // A line a -> b -> c, rewired into a fan-in (a, b) -> c.
  graph_node a = v.increment_y(def);
  graph_node b = v.increment_x(a);
  graph_node c = v.add_x_to_y(b);
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

  graph g = launched(def);
  EXPECT_EQ(far_off(v.y.to_vector<float>(s), v.incremented_sum()), 0);
}

TEST_F(GraphDefinition, DestroyedNodeIsInvalidForEveryCopy) {
  graph_definition def(dev());
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
  expect_each_refused(copy, &graph_node::kind, &graph_node::handle, &graph_node::graph,
                      &graph_node::predecessors, &graph_node::successors, &graph_node::empty);
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
  graph_definition def(dev());
  graph_condition c = def.create_condition(0u);
  graph_node node = def.if_else(c);
  graph_definition then_branch = node.branch(0);
  graph_definition else_branch = node.branch(1);
  graph_node inner = then_branch.empty();
  graph_definition child(dev());
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
  static constexpr const char* kNames[] = {"clone", "embed", "instantiate", "update"};
  return kNames[static_cast<int>(how)];
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
  for (const view_copy how : kViewCopies) {
    SCOPED_TRACE(to_string(how));
    std::atomic<int> runs{0};
    auto embedded_token = std::make_shared<int>(1);  // owned by a node of the embedded child
    auto added_token = std::make_shared<int>(2);     // owned by a node added through the view
    const std::weak_ptr<int> embedded_alive = embedded_token;
    const std::weak_ptr<int> added_alive = added_token;
    std::optional<graph_definition> def(std::in_place, dev());
    graph_definition view;
    {
      graph_definition child(dev());
      child.callback([t = std::move(embedded_token), &runs] { runs += *t; });
      view = def->embed(child).child_graph();
    }
    view.callback([t = std::move(added_token), &runs] { runs += *t; });

    std::optional<graph_definition> copy;
    std::optional<graph> exec;
    ASSERT_NO_THROW(copy_view(dev(), how, view, copy, exec));
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
  const int n = 1000;
  // Bodies run kernels (CUDA refuses host callbacks in them).
  buffer y = upload(std::vector<float>(n, 1.0f), s);
  graph_definition def(dev());
  graph_definition body = def.if_then(def.create_condition(1u)).branch(0);
  body.launch(cover(n), graph_kernel("add_one"), y, n);
  for (const view_copy how : kViewCopies) {
    SCOPED_TRACE(to_string(how));
    std::optional<graph_definition> copy;
    std::optional<graph> exec;
    try {
      copy_view(dev(), how, body, copy, exec);
      ADD_FAILURE() << "a copy of a conditional body was made";
    } catch (const cuda_error& e) {
      EXPECT_EQ(e.result_name(), "CUDA_ERROR_NOT_SUPPORTED") << e.what();
      EXPECT_TRUE(contains(e.what(), "body graph on its own")) << e.what();
    }
  }
  EXPECT_EQ(body.node_count(), 1u);
  graph exec = launched(def);
  const std::vector<float> got = y.to_vector<float>(s);
  EXPECT_EQ(std::count(got.begin(), got.end(), 2.0f), n) << "the top graph still runs the body";
}

// A view of a destroyed node's child graph is refused by every copy, with the reason.
TEST_F(GraphDefinition, CopiesOfADestroyedViewAreRefused) {
  graph_definition child(dev());
  child.empty();
  graph_definition def(dev());
  graph_node node = def.embed(child);
  graph_definition view = node.child_graph();
  graph exec = def.instantiate();
  node.destroy();
  graph_definition other(dev());
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
    graph_definition def(dev());
    const graph_condition c = def.create_condition(0u);
    graph_node node = kind == conditional_kind::if_then      ? def.if_then(c)
                      : kind == conditional_kind::while_loop ? def.while_loop(c)
                                                             : def.switch_(c, 3);
    node.branch(0).empty();
    std::string msg = cuda_error_message([&] { (void)def.clone(); });
    EXPECT_TRUE(contains(msg, "does not clone")) << msg;
    graph_definition outer(dev());
    msg = cuda_error_message([&] { (void)outer.embed(def); });
    EXPECT_TRUE(contains(msg, "does not clone")) << msg;
    EXPECT_EQ(outer.node_count(), 0u) << "a refused embed adds nothing";
    {
      graph exec = def.instantiate();
      msg = cuda_error_message([&] { (void)def.instantiate(); });
      EXPECT_TRUE(contains(msg, "one executable graph at a time")) << msg;
      EXPECT_TRUE(contains(msg, "destroy the cucore::graph")) << msg;
      exec.launch(s);
      s.synchronize();
    }
    // Once the executable graph is gone, another can be made.
    graph again = def.instantiate();
  }
  // Without conditional nodes: any number of executable graphs, and clones at any time.
  graph_definition plain(dev());
  plain.empty();
  graph a = plain.instantiate();
  graph b = plain.instantiate();
  EXPECT_NO_THROW((void)plain.clone());
}

TEST_F(GraphDefinition, DestroyingAChildNodeInvalidatesItsView) {
  graph_definition child(dev());
  child.empty().empty();
  graph_definition def(dev());
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

}  // namespace
}  // namespace cucore
