// Lifetimes of what graph nodes keep alive across the graphs that hold them (label gpu; each test
// skips without a device): the owners of a node must outlive every definition, clone, embed,
// executable graph, update and in-flight launch that can still run the node, and must be released
// once the last of them is gone — not before, and not never. The tests drop every host-side owner
// and then check, on fresh random data, that the graphs still compute the right results, and watch
// the owners through weak references. The other graph_lifetime_*_test.cpp files cover the node
// kinds, destroyed nodes, operands, and when and where owners are released.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "cucore/error.hpp"
#include "cucore/graph/builder.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "graph_lifetime_support.hpp"

namespace cucore {
namespace {

using namespace graph_lifetime_testing;  // graph_lifetime_support.hpp

// ---- one graph, many views: a sample whose owners the test drops

TEST_F(GraphLifetime, ChildDefinitionKeepsOwnersAfterTheParentIsDestroyed) {
  std::optional<graph_definition> child;
  sample smp = new_sample(child);
  std::optional<graph_definition> parent(std::in_place, dev());
  parent->embed(*child);
  run_without(parent, smp);
  expect_last_holder(smp, "the child definition still holds them", child);
}

TEST_F(GraphLifetime, DefinitionAloneKeepsOwnersUntilDestroyed) {
  std::optional<graph_definition> g;
  sample smp = new_sample(g);
  EXPECT_EQ(g->node_count(), 4u);
  expect_last_holder(smp, "the definition holds them", g);
}

TEST_F(GraphLifetime, CloneKeepsOwnersAfterTheSourceIsDestroyed) {
  std::optional<graph_definition> g;
  sample smp = new_sample(g);
  std::optional<graph_definition> copy(g->clone());
  g.reset();
  expect_last_holder(smp, "the clone holds them", copy);
}

TEST_F(GraphLifetime, ExecutableKeepsOwnersAfterItsDefinitionIsDestroyed) {
  std::optional<graph_definition> g;
  sample smp = new_sample(g);
  graph exec = executable_without(g);
  expect_last_holder(smp, "the executable graph still runs every node", exec);
}

TEST_F(GraphLifetime, OwnersLiveUntilTheLastOfSeveralExecutablesIsDestroyed) {
  std::optional<graph_definition> g;
  sample smp = new_sample(g);
  graph first = g->instantiate();
  graph second = executable_without(g);
  first.close();
  expect_last_holder(smp, "the second executable graph still holds them", second);
}

TEST_F(GraphLifetime, SourceKeepsOwnersAfterItsCloneIsDestroyed) {
  std::optional<graph_definition> g;
  sample smp = new_sample(g);
  std::optional<graph_definition> copy(g->clone());
  run_without(copy, smp);
  expect_last_holder(smp, "the source still holds them", g);
}

TEST_F(GraphLifetime, NestedEmbedsKeepOwnersUntilTheOutermostIsDestroyed) {
  std::optional<graph_definition> inner;
  sample smp = new_sample(inner);
  std::optional<graph_definition> middle(std::in_place, dev());
  middle->embed(*inner);
  std::optional<graph_definition> outer(std::in_place, dev());
  outer->embed(*middle).empty();
  inner.reset();
  middle.reset();
  EXPECT_TRUE(smp.all_alive()) << "the outermost graph's nested copy holds them";
  graph exec = executable_without(outer);
  expect_last_holder(smp, "the executable graph of the outermost holds them", exec);
}

TEST_F(GraphLifetime, EmbeddedChildKeepsOwnersAfterTheChildDefinitionIsDestroyed) {
  std::optional<graph_definition> child;
  sample smp = new_sample(child);
  std::optional<graph_definition> parent(std::in_place, dev());
  parent->empty().embed(*child).empty();
  child.reset();
  expect_last_holder(smp, "the parent's embedded copy holds them", parent);
}

// The definition and the executable graph are destroyed right after the launch: the owners must
// stay alive until the stream has run it.
TEST_F(GraphLifetime, InFlightLaunchKeepsOwnersUntilItFinishes) {
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

// ---- executable graph update

// cuda.core's test_graph_update_replaces_attachment_user_objects: the executable graph takes the
// new definition's owners and lets go of the old ones.
TEST_F(GraphLifetime, UpdateTakesTheNewOwnersAndReleasesTheOld) {
  std::optional<graph_definition> old_def;
  sample before = new_sample(old_def);
  graph exec = executable_without(old_def);
  run(exec, before);

  std::optional<graph_definition> new_def;
  sample after = new_sample(new_def);  // same topology, other buffers and callback
  exec.update(*new_def);
  new_def.reset();
  EXPECT_TRUE(after.all_alive()) << "the executable graph holds the new owners";
  EXPECT_TRUE(before.all_expire()) << "the replaced owners were never released";
  const int old_calls = before.calls->load();
  run(exec, after, 1);
  EXPECT_EQ(before.calls->load(), old_calls) << "the old callback ran after the update";
  exec.close();
  EXPECT_TRUE(after.all_expire());
}

// cuda.core's test_failed_graph_update_does_not_adopt_attachments and
// test_failed_graph_update_preserves_active_attachment_ownership.
TEST_F(GraphLifetime, FailedUpdateKeepsTheOwnersTheExecutableHad) {
  std::optional<graph_definition> old_def;
  sample active = new_sample(old_def);
  graph exec = executable_without(old_def);

  std::optional<graph_definition> other;
  sample refused = new_sample(other);
  other->empty();  // another topology
  EXPECT_THROW(exec.update(*other), cuda_error);
  other.reset();
  EXPECT_TRUE(refused.all_expire()) << "a failed update adopted the new owners";
  expect_last_holder(active, "a failed update released the active owners", exec);
  EXPECT_EQ(refused.calls->load(), 0);
}

// ---- capture

TEST_F(GraphLifetime, CapturedCallbackLivesAsLongAsTheCapturedGraph) {
  auto token = std::make_shared<int>(5);
  const std::weak_ptr<int> wt = token;
  std::atomic<int> calls{0};
  std::optional<graph> exec;
  {
    graph_builder b(dev());
    b.begin_building();
    b.callback([token, &calls] { calls.fetch_add(*token); });
    token.reset();
    b.end_building();
    EXPECT_TRUE(still_alive_after(wt)) << "the captured graph holds the callable";
    exec.emplace(b.complete());
  }  // the builder and its graph are gone
  EXPECT_TRUE(still_alive_after(wt)) << "the executable graph holds the callable";
  exec->launch(s());
  exec->launch(s());
  s().synchronize();
  EXPECT_EQ(calls.load(), 10);
  exec.reset();
  EXPECT_TRUE(expires_within(wt));
}

}  // namespace
}  // namespace cucore
