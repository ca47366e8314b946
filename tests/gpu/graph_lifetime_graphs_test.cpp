// Graph lifetimes (label gpu) across definitions, clones, embeds and executable graphs, and when
// nodes are destroyed (graph_lifetime_test_support.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/graph/builder.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/object_code.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/event.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "graph_lifetime_test_support.hpp"
#include "graph_test_support.hpp"

namespace cucore {
namespace {

using namespace gpu_testing;             // gpu_test_support.hpp, graph_test_support.hpp
using namespace graph_lifetime_testing;  // graph_lifetime_test_support.hpp

// ---- lifetimes across definitions, clones, embeds and executable graphs
// --------------------------

TEST_F(GraphLifetime, DefinitionAloneKeepsOwnersUntilDestroyed) {
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  EXPECT_TRUE(smp.all_alive());
  EXPECT_EQ(g->node_count(), 4u);
  g.reset();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, ExecutableKeepsOwnersAfterItsDefinitionIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  graph exec = g->instantiate();
  g.reset();
  EXPECT_TRUE(smp.all_alive()) << "the executable graph still runs every node";
  run_sample(exec, smp, s(), seed);
  EXPECT_TRUE(smp.all_alive());
  exec.close();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, OwnersLiveUntilTheLastOfSeveralExecutablesIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  graph first = g->instantiate();
  graph second = g->instantiate();
  g.reset();
  first.close();
  EXPECT_TRUE(smp.all_alive()) << "the second executable graph still holds them";
  run_sample(second, smp, s(), seed);
  second.close();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, CloneKeepsOwnersAfterTheSourceIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  std::optional<graph_definition> copy(g->clone());
  g.reset();
  EXPECT_TRUE(smp.all_alive());
  run_new_executable(*copy, smp, s(), seed);
  EXPECT_TRUE(smp.all_alive());
  copy.reset();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, SourceKeepsOwnersAfterItsCloneIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  std::optional<graph_definition> copy(g->clone());
  {
    graph exec = copy->instantiate();
    copy.reset();
    run_sample(exec, smp, s(), seed);
  }
  EXPECT_TRUE(smp.all_alive()) << "the source still holds them";
  run_new_executable(*g, smp, s(), seed);
  g.reset();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, EmbeddedChildKeepsOwnersAfterTheChildDefinitionIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> child(std::in_place, dev());
  sample smp = add_sample(*child, s());
  std::optional<graph_definition> parent(std::in_place, dev());
  parent->empty().embed(*child).empty();
  child.reset();
  EXPECT_TRUE(smp.all_alive()) << "the parent's embedded copy holds them";
  run_new_executable(*parent, smp, s(), seed);
  EXPECT_TRUE(smp.all_alive());
  parent.reset();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, ChildDefinitionKeepsOwnersAfterTheParentIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> child(std::in_place, dev());
  sample smp = add_sample(*child, s());
  std::optional<graph_definition> parent(std::in_place, dev());
  parent->embed(*child);
  {
    graph exec = parent->instantiate();
    parent.reset();
    run_sample(exec, smp, s(), seed);
  }
  EXPECT_TRUE(smp.all_alive()) << "the child definition still holds them";
  child.reset();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, NestedEmbedsKeepOwnersUntilTheOutermostIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> inner(std::in_place, dev());
  sample smp = add_sample(*inner, s());
  std::optional<graph_definition> middle(std::in_place, dev());
  middle->embed(*inner);
  std::optional<graph_definition> outer(std::in_place, dev());
  outer->embed(*middle).empty();
  inner.reset();
  middle.reset();
  EXPECT_TRUE(smp.all_alive()) << "the outermost graph's nested copy holds them";
  graph exec = outer->instantiate();
  outer.reset();
  EXPECT_TRUE(smp.all_alive());
  run_sample(exec, smp, s(), seed);
  exec.close();
  EXPECT_TRUE(smp.all_expire());
}

// The definition and the executable graph are destroyed right after the launch: the owners must
// stay alive until the stream has run it.
TEST_F(GraphLifetime, InFlightLaunchKeepsOwnersUntilItFinishes) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const auto data = round_data(seed, 0);
  buffer in(kBytes, s());
  buffer out(kBytes, s());
  in.copy_from(data, s());
  out.fill(kPoison, s());
  s().synchronize();
  std::optional<buffer> x(std::in_place, kBytes, s());
  std::optional<buffer> y(std::in_place, kBytes, s());
  auto token = std::make_shared<int>(1);
  std::atomic<int> calls{0};
  const std::weak_ptr<const void> wx = x->owner();
  const std::weak_ptr<const void> wy = y->owner();
  const std::weak_ptr<int> wt = token;
  std::optional<graph_definition> g(std::in_place, dev());
  g->memcpy(*x, in, kBytes)
      .launch(cover(kN), test_kernels().get_kernel("spin_scale"), *x, *y, kN, 200'000'000LL)
      .memcpy(out, *y, kBytes)
      .callback([token, &calls] { calls.fetch_add(*token); });
  std::optional<graph> exec(g->instantiate());
  x.reset();
  y.reset();
  token.reset();
  g.reset();

  exec->launch(s());
  exec.reset();  // destroyed with the launch in flight
  // While the stream is still busy with the launch, nothing it uses may have been released. (The
  // owners are read before the stream is asked, so a busy answer means they were read in flight.)
  int busy_polls = 0;
  for (;;) {
    const bool alive = !wx.expired() && !wy.expired() && !wt.expired();
    if (s().query()) break;
    ++busy_polls;
    ASSERT_TRUE(alive) << "an owner was released while the launch still ran";
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (busy_polls == 0 && !launches_may_block()) {
    std::fprintf(stderr, "note: the launch had finished before the first poll\n");
  }
  s().synchronize();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(all_match(out.to_vector<float>(s()), doubled(data)));
  EXPECT_TRUE(expires_within(wx));
  EXPECT_TRUE(expires_within(wy));
  EXPECT_TRUE(expires_within(wt));
}

// One row per event node kind: a graph of that node alone holds the event.
struct event_node_kind {
  const char* name;                                        // the test's name
  void (*prepare)(event& e, const stream& s);              // before the node is added
  void (*add)(const graph_definition& g, const event& e);  // adds the node
  int launches;
};

void PrintTo(const event_node_kind& k, std::ostream* os) {
  *os << k.name;
}

const event_node_kind kEventNodeKinds[] = {
    {"EventRecordNode", [](event&, const stream&) {},
     [](const graph_definition& g, const event& e) { g.record(e); }, 2},
    {"EventWaitNode", [](event& e, const stream& s) { e.record(s); },
     [](const graph_definition& g, const event& e) { g.wait(e).empty(); }, 1},
};

class GraphLifetimeEventNode : public GraphLifetime,
                               public ::testing::WithParamInterface<event_node_kind> {};

TEST_P(GraphLifetimeEventNode, AloneKeepsTheEventAlive) {
  const event_node_kind& kind = GetParam();
  std::optional<event> e(std::in_place, dev());
  kind.prepare(*e, s());
  const std::weak_ptr<const void> we = e->owner();
  std::optional<graph_definition> g(std::in_place, dev());
  kind.add(*g, *e);
  e.reset();
  EXPECT_TRUE(still_alive_after(we));
  graph exec = g->instantiate();
  g.reset();
  for (int i = 0; i < kind.launches; ++i) exec.launch(s());
  s().synchronize();
  EXPECT_TRUE(still_alive_after(we));
  exec.close();
  EXPECT_TRUE(expires_within(we));
}

INSTANTIATE_TEST_SUITE_P(Events, GraphLifetimeEventNode, ::testing::ValuesIn(kEventNodeKinds),
                         [](const ::testing::TestParamInfo<event_node_kind>& info) {
                           return std::string(info.param.name);
                         });

// ---- destroying nodes
// ----------------------------------------------------------------------------

TEST_F(GraphLifetime, DestroyingANodeReleasesOnlyThatNodesOwners) {
  std::optional<buffer> target(std::in_place, kBytes, s());
  const std::weak_ptr<const void> wb = target->owner();
  auto kept_token = std::make_shared<int>(1);
  auto gone_token = std::make_shared<int>(2);
  const std::weak_ptr<int> w_kept = kept_token;
  const std::weak_ptr<int> w_gone = gone_token;
  graph_definition g(dev());
  graph_node fill = g.memset(*target, 0u, kN);
  graph_node doomed = fill.callback([gone_token] { (void)*gone_token; });
  fill.callback([kept_token] { (void)*kept_token; });
  target.reset();
  gone_token.reset();
  kept_token.reset();
  EXPECT_TRUE(still_alive_after(w_gone));
  doomed.destroy();
  EXPECT_FALSE(doomed.valid());
  EXPECT_TRUE(expires_within(w_gone)) << "no clone or executable graph holds the destroyed node";
  EXPECT_TRUE(still_alive_after(w_kept)) << "another node's owners must stay";
  EXPECT_FALSE(wb.expired());
  fill.destroy();
  EXPECT_TRUE(expires_within(wb));
  EXPECT_FALSE(w_kept.expired());
  EXPECT_EQ(g.node_count(), 1u);
}

TEST_F(GraphLifetime, CloneTakenBeforeANodeIsDestroyedKeepsItsOwners) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  std::optional<graph_definition> copy(g->clone());
  for (graph_node& n : g->nodes()) {
    if (n.kind() == graph_node_kind::host_callback) n.destroy();
  }
  EXPECT_EQ(g->node_count(), 3u);
  EXPECT_TRUE(still_alive_after(smp.token)) << "the clone holds its own reference";
  run_new_executable(*copy, smp, s(), seed);  // the clone's callback still runs
  copy.reset();
  EXPECT_TRUE(expires_within(smp.token));
  EXPECT_FALSE(smp.x.expired()) << "the source's other nodes still hold theirs";
  g.reset();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, DestroyingANodeInACloneLeavesTheSourcesOwners) {
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  std::optional<graph_definition> copy(g->clone());
  for (graph_node& n : copy->nodes()) {
    if (n.kind() == graph_node_kind::host_callback) n.destroy();
  }
  EXPECT_TRUE(still_alive_after(smp.token)) << "the source holds its own reference";
  g.reset();
  EXPECT_TRUE(expires_within(smp.token)) << "the clone released its reference on destroy";
  EXPECT_FALSE(smp.x.expired());
  copy.reset();
  EXPECT_TRUE(smp.all_expire());
}

// cuda.core's test_deleted_memcpy_bundle_survives_in_existing_exec, with a callback besides: the
// definition no longer holds the copies' buffer, the executable graph still does.
TEST_F(GraphLifetime, DestroyedNodesOwnersSurviveInAnExistingExecutable) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  buffer in(kBytes, s());
  buffer out(kBytes, s());
  std::optional<buffer> a(std::in_place, kBytes, s());
  auto token = std::make_shared<int>(1);
  std::atomic<int> calls{0};
  const std::weak_ptr<const void> wa = a->owner();
  const std::weak_ptr<int> wt = token;
  graph_definition g(dev());
  g.empty().memcpy(*a, in, kBytes).memcpy(out, *a, kBytes).callback([token, &calls] {
    calls.fetch_add(*token);
  });
  a.reset();
  token.reset();
  graph exec = g.instantiate();
  for (graph_node& n : g.nodes()) {
    if (n.kind() != graph_node_kind::empty) n.destroy();
  }
  ASSERT_EQ(g.node_count(), 1u);
  EXPECT_TRUE(still_alive_after(wa)) << "the executable graph still runs the copies";
  EXPECT_FALSE(wt.expired());
  each_round(seed, [&](const std::vector<float>& data, int round) {
    EXPECT_TRUE(all_match(launch_with(exec, in, out, data, s()), data));
    EXPECT_EQ(calls.load(), round + 1);
  });
  exec.close();
  EXPECT_TRUE(expires_within(wa)) << "the definition (still alive) kept a destroyed node's owners";
  EXPECT_TRUE(expires_within(wt));
}

// cuda.core's test_new_node_attachment_does_not_replace_deleted_node_exec_attachment.
TEST_F(GraphLifetime, NewNodeDoesNotTakeOverADestroyedNodesOwnersInAnExecutable) {
  std::atomic<int> calls_a{0};
  std::atomic<int> calls_b{0};
  auto token_a = std::make_shared<int>(1);
  auto token_b = std::make_shared<int>(1);
  const std::weak_ptr<int> wa = token_a;
  const std::weak_ptr<int> wb = token_b;
  std::optional<graph_definition> g(std::in_place, dev());
  graph_node a = g->callback([token_a, &calls_a] { calls_a.fetch_add(*token_a); });
  token_a.reset();
  graph exec = g->instantiate();
  a.destroy();
  a = graph_node();  // a destroyed node's handle still shares the graph
  g->callback([token_b, &calls_b] { calls_b.fetch_add(*token_b); });
  token_b.reset();
  EXPECT_TRUE(still_alive_after(wa)) << "the executable graph runs the destroyed node";
  EXPECT_FALSE(wb.expired());
  for (int i = 0; i < kRounds; ++i) exec.launch(s());
  s().synchronize();
  EXPECT_EQ(calls_a.load(), kRounds);
  EXPECT_EQ(calls_b.load(), 0);
  g.reset();
  EXPECT_TRUE(expires_within(wb)) << "the new node lived in the definition only";
  EXPECT_TRUE(still_alive_after(wa));
  exec.close();
  EXPECT_TRUE(expires_within(wa));
}

// Destroying a node inside a parent's embedded copy releases that copy's reference only.
TEST_F(GraphLifetime, DestroyingANodeInsideAnEmbedReleasesTheEmbedsReference) {
  std::optional<graph_definition> child(std::in_place, dev());
  sample smp = add_sample(*child, s());
  graph_definition parent(dev());
  graph_definition view = parent.embed(*child).child_graph();
  for (graph_node& n : view.nodes()) {
    if (n.kind() == graph_node_kind::host_callback) n.destroy();
  }
  EXPECT_TRUE(still_alive_after(smp.token)) << "the child definition holds its own";
  child.reset();
  EXPECT_TRUE(expires_within(smp.token)) << "the parent's copy released it on destroy";
  EXPECT_TRUE(still_alive_after(smp.x)) << "the parent's copy still holds the other nodes'";
  EXPECT_FALSE(smp.kernel.expired());
}

// cuda.core's test_destroying_child_node_recursively_releases_subgraph_attachments.
TEST_F(GraphLifetime, DestroyingAChildGraphNodeReleasesItsEmbeddedOwners) {
  std::optional<graph_definition> child(std::in_place, dev());
  sample smp = add_sample(*child, s());
  std::optional<graph_definition> parent(std::in_place, dev());
  graph_node outer = parent->empty();
  graph_node embedded = outer.embed(*child);
  child.reset();
  EXPECT_TRUE(smp.all_alive());
  embedded.destroy();
  EXPECT_TRUE(smp.all_expire()) << "the parent (still alive) must not keep the child's owners";
  EXPECT_EQ(parent->node_count(), 1u);
}

TEST_F(GraphLifetimeWatched, ConditionalBodyKeepsItsOwnersAndNodeDestroyReleasesThem) {
  graph_definition g(dev());
  graph_node cond = g.if_then(g.create_condition(1u));
  cond.branch(0).memcpy(*z, *in, kBytes).launch(cover(kN), k, *z, *out, kN);
  z.reset();
  EXPECT_TRUE(still_alive_after(wz)) << "the body's nodes hold it";
  {
    graph exec = g.instantiate();
    each_round(seed, [&](const std::vector<float>& data, int) {
      EXPECT_TRUE(all_match(launch_with(exec, *in, *out, data, s()), doubled(data)));
    });
    cond.destroy();
    EXPECT_TRUE(still_alive_after(wz)) << "the executable graph still runs the body";
    const auto data = round_data(seed, kRounds);
    in->copy_from(data, s());
    exec.launch(s());
    EXPECT_TRUE(all_match(out->to_vector<float>(s()), doubled(data)));
  }
  EXPECT_TRUE(expires_within(wz)) << "destroying the conditional node released its body's owners";
  EXPECT_EQ(g.node_count(), 0u);
}

}  // namespace
}  // namespace cucore
