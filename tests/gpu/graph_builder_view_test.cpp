// graph_builder (label gpu): graph_definition() views of a builder, and builders embedded in
// others (graph_builder_test_support.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/graph/builder.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "graph_builder_test_support.hpp"
#include "graph_test_support.hpp"

namespace cucore {
namespace {

using namespace gpu_testing;            // gpu_test_support.hpp, graph_test_support.hpp
using namespace graph_builder_testing;  // graph_builder_test_support.hpp

// ---- graph_definition() views -------------------------------------------------------------------

TEST_F(BuilderView, RefusedBeforeBeginBuildingOnAPrimaryBuilder) {
  graph_builder b(dev());
  const std::string msg = invalid_argument_message([&] { b.graph_definition(); });
  EXPECT_TRUE(contains(msg, "before begin_building")) << msg;
}

TEST_F(BuilderView, RefusedWhileCaptureIsInProgress) {
  graph_builder b(dev());
  b.begin_building();
  std::string msg = invalid_argument_message([&] { b.graph_definition(); });
  EXPECT_TRUE(contains(msg, "capture is in progress")) << msg;
  // Conditional bodies too.
  const graph_condition cond = b.create_condition(1u);
  graph_builder body = b.if_then(cond);
  body.begin_building();
  msg = invalid_argument_message([&] { body.graph_definition(); });
  EXPECT_TRUE(contains(msg, "capture is in progress")) << msg;
  body.end_building();
  b.end_building();
  EXPECT_NO_THROW(b.graph_definition());
  EXPECT_NO_THROW(body.graph_definition());
}

TEST_F(BuilderView, RefusedOnAForkedBuilder) {
  graph_builder b(dev());
  b.begin_building();
  std::vector<graph_builder> forks = b.split(2);
  const std::string msg = invalid_argument_message([&] { forks[0].graph_definition(); });
  EXPECT_TRUE(contains(msg, "forked")) << msg;
  EXPECT_FALSE(contains(msg, "capture is in progress")) << msg;  // the forked rule comes first
  b.join(std::move(forks));
  b.end_building();
}

TEST_F(BuilderView, RefusedAfterClose) {
  graph_builder b(dev());
  b.begin_building();
  b.end_building();
  EXPECT_NO_THROW(b.graph_definition());
  b.close();
  const std::string msg = invalid_argument_message([&] { b.graph_definition(); });
  EXPECT_TRUE(contains(msg, "closed")) << msg;
}

TEST_F(BuilderView, ViewSharesOwnershipAndOutlivesTheBuilder) {
  SEED_TRACE();
  auto [x0, x] = random_on_device(seed, s);
  buffer y = poisoned(kN, s);
  std::optional<graph_definition> closed_view;
  std::optional<graph_definition> destroyed_view;
  {
    graph_builder b = capture_twice_plus_one(dev(), x, y);
    closed_view = b.graph_definition();
    b.close();
    destroyed_view = capture_twice_plus_one(dev(), x, y).graph_definition();  // a temporary
  }
  for (auto* view : {&closed_view, &destroyed_view}) {
    EXPECT_EQ((*view)->node_count(), 2u);
    EXPECT_EQ((*view)->edges().size(), 1u);
    graph exec = (*view)->instantiate();
    view->reset();  // the executable graph needs no definition
    y.fill(kPoison, s);
    exec.launch(s);
    EXPECT_TRUE(same(y.to_vector<float>(s), plus(doubled(x0), 1)));
  }
}

TEST_F(BuilderView, NodesAddedThroughTheViewRunWithComplete) {
  SEED_TRACE();
  auto [y0, y] = random_on_device(seed, s);
  buffer z = poisoned(kN, s);
  graph_builder b = capture_add_one(dev(), y);
  graph_definition view = b.graph_definition();
  const std::vector<graph_node> captured = view.nodes();
  ASSERT_EQ(captured.size(), 1u);
  EXPECT_EQ(captured[0].kind(), graph_node_kind::kernel);
  const graph_node second = captured[0].launch(cover(kN), graph_kernel("add_one"), y, kN);
  second.launch(cover(kN), graph_kernel("twice"), y, z, kN);
  EXPECT_EQ(view.node_count(), 3u);
  EXPECT_EQ(b.graph_definition().node_count(), 3u);  // the same graph
  EXPECT_TRUE(b.graph_definition() == view);

  graph exec = b.complete();
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 2)));
  EXPECT_TRUE(same(z.to_vector<float>(s), doubled(plus(y0, 2))));
}

TEST_F(BuilderView, ConditionalBodyViewIsValidBeforeAndAfterCapture) {
  SEED_TRACE();
  auto [y0, y] = random_on_device(seed, s);
  const kernel add_one = graph_kernel("add_one");
  graph_builder b(dev());
  b.begin_building();
  const graph_condition cond = b.create_condition();
  launch(b.stream(), cover(1), graph_kernel("set_condition"), cond, 1u);
  graph_builder body = b.if_then(cond);
  graph_definition before = body.graph_definition();  // the body exists with its node
  EXPECT_EQ(before.node_count(), 0u);
  body.begin_building();
  launch(body.stream(), cover(kN), add_one, y, kN);
  launch(body.stream(), cover(kN), add_one, y, kN);
  body.end_building();
  graph_definition after = body.graph_definition();
  EXPECT_TRUE(after == before);
  EXPECT_EQ(before.node_count(), 2u);
  // Captured, then augmented through the view: a third step after the last captured one.
  graph_node last;
  for (const graph_node& n : after.nodes()) {
    if (n.successors().empty()) last = n;
  }
  ASSERT_TRUE(last.valid());
  last.launch(cover(kN), add_one, y, kN);
  EXPECT_EQ(after.node_count(), 3u);
  b.end_building();
  graph exec = b.complete();
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 3)));
}

TEST_F(BuilderView, HybridConditionalBodyBuiltOnlyThroughItsView) {
  SEED_TRACE();
  auto [y0, y] = random_on_device(seed, s);
  buffer z = poisoned(kN, s);
  buffer flag(sizeof(unsigned), s);
  graph_builder b(dev());
  b.begin_building();
  const graph_condition cond = condition_from(b, flag);
  graph_builder body = b.if_then(cond);
  graph_definition body_view = body.graph_definition();  // never begin_building() on the body
  EXPECT_EQ(body_view.node_count(), 0u);
  const graph_node first = body_view.launch(cover(kN), graph_kernel("add_one"), y, kN);
  first.launch(cover(kN), graph_kernel("twice"), y, z, kN);
  b.end_building();
  EXPECT_EQ(body.builder_state(), bstate::not_started);
  EXPECT_EQ(body_view.node_count(), 2u);
  graph exec = b.complete();

  for (unsigned value : {1u, 0u}) {
    SCOPED_TRACE(value);
    y.copy_from(y0, s);
    z.fill(kPoison, s);
    set_flag(flag, value, s);
    exec.launch(s);
    if (value != 0) {
      EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 1)));
      EXPECT_TRUE(same(z.to_vector<float>(s), doubled(plus(y0, 1))));
    } else {
      EXPECT_TRUE(same(y.to_vector<float>(s), y0));
      EXPECT_TRUE(same(z.to_vector<float>(s), std::vector<float>(kN, kPoison)));
    }
  }
}

// ---- embed --------------------------------------------------------------------------------------

TEST_F(BuilderEmbed, EmbedsAFinishedChildBuilder) {
  SEED_TRACE();
  auto [x0, x] = random_on_device(seed, s);
  buffer y = poisoned(kN, s);
  buffer z = poisoned(kN, s);
  const kernel add_one = graph_kernel("add_one");
  const kernel twice = graph_kernel("twice");

  graph_builder child(dev());
  child.begin_building();
  launch(child.stream(), cover(kN), add_one, y, kN);
  launch(child.stream(), cover(kN), add_one, y, kN);
  child.end_building();

  graph_builder parent(dev());
  parent.begin_building();
  launch(parent.stream(), cover(kN), twice, x, y, kN);  // y = 2x
  parent.embed(child);                                  // y = 2x + 2
  launch(parent.stream(), cover(kN), twice, y, z, kN);  // z = 4x + 4
  parent.end_building();
  child.close();  // the parent holds a clone
  EXPECT_EQ(parent.graph_definition().node_count(), 3u);
  graph exec = parent.complete();
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(doubled(x0), 2)));
  EXPECT_TRUE(same(z.to_vector<float>(s), doubled(plus(doubled(x0), 2))));
}

TEST_F(BuilderEmbed, EmbedsAGraphDefinition) {
  SEED_TRACE();
  auto [x0, x] = random_on_device(seed, s);
  buffer y = poisoned(kN, s);
  buffer z = poisoned(kN, s);
  std::optional<graph_definition> child{std::in_place, dev()};
  const graph_node n = child->launch(cover(kN), graph_kernel("add_one"), y, kN);
  n.launch(cover(kN), graph_kernel("add_one"), y, kN);
  n.successors()[0].launch(cover(kN), graph_kernel("add_one"), y, kN);

  graph_builder parent(dev());
  parent.begin_building();
  launch(parent.stream(), cover(kN), graph_kernel("twice"), x, y, kN);
  parent.embed(*child);
  child.reset();  // the parent holds a clone
  launch(parent.stream(), cover(kN), graph_kernel("twice"), y, z, kN);
  parent.end_building();
  graph exec = parent.complete();
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(doubled(x0), 3)));
  EXPECT_TRUE(same(z.to_vector<float>(s), doubled(plus(doubled(x0), 3))));
}

TEST_F(BuilderEmbed, EmbeddingAnUnfinishedBuilderIsRefused) {
  buffer counter = ints(1, s, 0);
  graph_builder parent(dev());
  graph_builder child(dev());
  parent.begin_building();
  std::string msg = invalid_argument_message([&] { parent.embed(child); });  // not started
  EXPECT_TRUE(contains(msg, "not finished")) << msg;
  child.begin_building();
  launch(child.stream(), cover(1), graph_kernel("bump"), counter);
  msg = invalid_argument_message([&] { parent.embed(child); });  // still capturing
  EXPECT_TRUE(contains(msg, "not finished")) << msg;
  EXPECT_TRUE(parent.is_building());
  EXPECT_TRUE(child.is_building());
  child.end_building();
  parent.embed(child);  // finished now
  parent.end_building();
  // A parent that is not building cannot embed either.
  EXPECT_THROW(parent.embed(child), invalid_argument);
  EXPECT_EQ(parent.graph_definition().node_count(), 1u);
  graph exec = parent.complete();
  exec.launch(s);
  EXPECT_EQ(read_ints(counter, s), std::vector<int>{1});  // the refused embeds added nothing
}

}  // namespace
}  // namespace cucore
