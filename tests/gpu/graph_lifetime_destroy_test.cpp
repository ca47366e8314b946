// Lifetimes of what graph nodes keep alive when nodes are destroyed (label gpu; each test skips
// without a device): destroying a node releases that node's owners in its own graph only, never
// those a clone, an embed or an executable graph still runs; and nodes with the same owners share
// one user object, one reference per node, so the owners go with the last node that uses them.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/memory.hpp"
#include "graph_lifetime_support.hpp"

namespace cucore {
namespace {

using namespace graph_lifetime_testing;  // graph_lifetime_support.hpp

// Destroys every host callback node of `g`.
void destroy_callbacks(const graph_definition& g) {
  for (graph_node& n : g.nodes()) {
    if (n.kind() == graph_node_kind::host_callback) n.destroy();
  }
}

// ---- destroying nodes

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
  std::optional<graph_definition> g;
  sample smp = new_sample(g);
  std::optional<graph_definition> copy(g->clone());
  destroy_callbacks(*g);
  EXPECT_EQ(g->node_count(), 3u);
  EXPECT_TRUE(still_alive_after(smp.token)) << "the clone holds its own reference";
  run(*copy, smp);  // the clone's callback still runs
  copy.reset();
  EXPECT_TRUE(expires_within(smp.token));
  EXPECT_FALSE(smp.x.expired()) << "the source's other nodes still hold theirs";
  g.reset();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, DestroyingANodeInACloneLeavesTheSourcesOwners) {
  std::optional<graph_definition> g;
  sample smp = new_sample(g);
  std::optional<graph_definition> copy(g->clone());
  destroy_callbacks(*copy);
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
  std::optional<graph_definition> child;
  sample smp = new_sample(child);
  graph_definition parent(dev());
  const graph_definition view = parent.embed(*child).child_graph();
  destroy_callbacks(view);
  EXPECT_TRUE(still_alive_after(smp.token)) << "the child definition holds its own";
  child.reset();
  EXPECT_TRUE(expires_within(smp.token)) << "the parent's copy released it on destroy";
  EXPECT_TRUE(still_alive_after(smp.x)) << "the parent's copy still holds the other nodes'";
  EXPECT_FALSE(smp.kernel.expired());
}

// cuda.core's test_destroying_child_node_recursively_releases_subgraph_attachments.
TEST_F(GraphLifetime, DestroyingAChildGraphNodeReleasesItsEmbeddedOwners) {
  std::optional<graph_definition> child;
  sample smp = new_sample(child);
  std::optional<graph_definition> parent(std::in_place, dev());
  graph_node embedded = parent->empty().embed(*child);
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
    expect_doubles(exec);
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

// ---- nodes with the same owners share one user object (one more reference per node)

// Three kernel nodes with the same owners (kernel, z, out): each keeps them while it exists, a
// clone keeps them for its copies, and they go with the last reference.
TEST_F(GraphLifetimeWatched, NodesWithTheSameOwnersKeepThemUntilTheLastIsDestroyed) {
  std::optional<graph_definition> g(std::in_place, dev());
  graph_node copy_in = g->memcpy(*z, *in, kBytes);
  graph_node first = copy_in.launch(cover(kN), k, *z, *out, kN);
  graph_node second = first.launch(cover(kN), k, *z, *out, kN);
  graph_node third = second.launch(cover(kN), k, *z, *out, kN);
  z.reset();
  first.destroy();
  EXPECT_TRUE(still_alive_after(wz)) << "two nodes with the same owners remain";
  second.destroy();
  copy_in.destroy();
  EXPECT_TRUE(still_alive_after(wz)) << "the third node still holds them";
  std::optional<graph_definition> copy(g->clone());
  third.destroy();
  EXPECT_EQ(g->node_count(), 0u);
  EXPECT_TRUE(still_alive_after(wz)) << "the clone holds its own reference";
  copy.reset();
  EXPECT_TRUE(expires_within(wz)) << "no graph can run a node that uses it";
}

// The last node holding a shared attachment is destroyed (its user object goes); a new node with
// the same owners must get a user object of its own, which keeps them alive and runs correctly.
TEST_F(GraphLifetimeWatched, ANewNodeDoesNotShareAnAttachmentWhoseNodesAreAllDestroyed) {
  std::optional<graph_definition> g(std::in_place, dev());
  g->launch(cover(kN), k, *z, *out, kN).destroy();
  g->launch(cover(kN), k, *z, *out, kN).destroy();
  // No graph_node of it is kept, so g.reset() destroys the graph.
  g->memcpy(*z, *in, kBytes).launch(cover(kN), k, *z, *out, kN);
  z.reset();
  EXPECT_TRUE(still_alive_after(wz));
  {
    graph exec = g->instantiate();
    expect_doubles(exec);
    g.reset();
    EXPECT_TRUE(still_alive_after(wz)) << "the executable graph holds them";
  }
  EXPECT_TRUE(expires_within(wz));
}

// A node of a conditional body and a node of the top graph with the same owners share one user
// object, whose references the top graph holds: destroying the conditional node releases only
// its body's.
TEST_F(GraphLifetimeWatched, ABodyNodeSharingATopNodesOwnersReleasesOnlyItsReference) {
  graph_definition g(dev());
  graph_node top_node = g.launch(cover(kN), k, *z, *out, kN);
  graph_node cond = g.if_then(g.create_condition(1u));
  cond.branch(0).launch(cover(kN), k, *z, *out, kN);
  z.reset();
  top_node.destroy();
  EXPECT_TRUE(still_alive_after(wz)) << "the body's node still holds them";
  cond.destroy();
  EXPECT_TRUE(expires_within(wz)) << "the body's reference was released with its node";
  EXPECT_EQ(g.node_count(), 0u);
}

// More distinct owner sets than the graph remembers, in rotation, two nodes of a set in a row
// (the second shares the first's user object; a set's later nodes get new ones): every set goes
// exactly when the last node using it is destroyed.
TEST_F(GraphLifetime, ManyOwnerSetsInRotationEachLiveAsLongAsTheirNodes) {
  constexpr int kSets = 7;
  constexpr int kRepeats = 4;
  buffer out(kBytes, s());
  std::vector<std::optional<buffer>> inputs;
  std::vector<std::weak_ptr<const void>> watched;
  for (int i = 0; i < kSets; ++i) {
    inputs.emplace_back(std::in_place, kBytes, s());
    watched.push_back(inputs.back()->owner());
  }
  const kernel k = graph_kernel("twice");
  graph_definition g(dev());
  std::vector<std::vector<graph_node>> nodes(kSets);
  for (int r = 0; r < kRepeats; ++r) {
    for (int i = 0; i < kSets; ++i) {
      for (int twice = 0; twice < 2; ++twice) {
        nodes[i].push_back(g.launch(cover(kN), k, *inputs[i], out, kN));
      }
    }
  }
  inputs.clear();
  for (int i = 0; i < kSets; ++i) {
    SCOPED_TRACE("owner set " + std::to_string(i));
    for (std::size_t n = 0; n + 1 < nodes[i].size(); ++n) nodes[i][n].destroy();
    EXPECT_TRUE(still_alive_after(watched[i])) << "one node still uses it";
    nodes[i].back().destroy();
    EXPECT_TRUE(expires_within(watched[i]));
    for (int j = i + 1; j < kSets; ++j) EXPECT_FALSE(watched[j].expired());
  }
}

}  // namespace
}  // namespace cucore
