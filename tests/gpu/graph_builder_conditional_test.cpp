// Conditional nodes by stream capture (if/else, while, switch, nested, on forks) and the
// graph_definition() views of builders and their bodies; adapted from cuda.core's
// test_graph_builder_conditional.py and test_graph_builder.py (label gpu; each test skips without
// a device). Every buffer captured here outlives the graphs that use it.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
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
#include "graph_builder_support.hpp"

namespace cucore {
namespace {

using namespace graph_builder_testing;  // graph_builder_support.hpp

// ---- conditionals by capture --------------------------------------------------------------------

// A capture on `b` whose condition, `cond`, a captured kernel sets from `flag` at every launch, and
// what the conditional bodies compute on: random y (y0 on the host) and a poisoned `out`.
struct flagged_capture {
  std::vector<float> y0;
  buffer y;
  buffer out;
  buffer flag;
  graph_builder b;
  graph_condition cond;

  flagged_capture(const device& d, const stream& s, std::uint64_t seed)
      : out(poisoned(kN, s)), flag(sizeof(unsigned), s), b(d) {
    std::tie(y0, y) = random_on_device(kN, seed, s);
    b.begin_building();
    cond = condition_from(b, flag);
  }
  // Launches `exec` with the condition `value`, y back at y0 and `out` poisoned first.
  void launch_with(const graph& exec, unsigned value, const stream& s) {
    y.copy_from(y0, s);
    out.fill(kPoison, s);
    set_flag(flag, value, s);
    exec.launch(s);
  }
  // What y and `out` hold after a launch.
  void expect(const std::vector<float>& want_y, const std::vector<float>& want_out,
              const stream& s) const {
    EXPECT_TRUE(same(y.to_vector<float>(s), want_y));
    EXPECT_TRUE(same(out.to_vector<float>(s), want_out));
  }
};

TEST_F(BuilderConditional, IfThenRunsTheBodyOnlyWhenTheConditionIsSet) {
  auto [z0, z] = random_on_device(kN, seed + 1, s);  // allocated before the capture begins
  flagged_capture c(dev(), s, seed);
  EXPECT_NE(c.cond.graph_handle(), nullptr);
  graph_builder body = c.b.if_then(c.cond);
  EXPECT_EQ(body.builder_kind(), bkind::conditional_body);
  EXPECT_EQ(body.builder_state(), bstate::not_started);
  EXPECT_FALSE(body.is_join_required());
  body.begin_building();
  EXPECT_TRUE(body.is_building());
  launch(body.stream(), cover(kN), add_one, c.y, kN);
  std::vector<graph_builder> forks = body.split(2);  // a diamond inside the body
  launch(forks[0].stream(), cover(kN), add_one, z, kN);
  launch(body.stream(), cover(kN), add_one, c.y, kN);
  body.join(std::move(forks));
  launch(body.stream(), cover(kN), add_one, c.y, kN);
  body.end_building();
  EXPECT_EQ(body.builder_state(), bstate::ended);
  launch(c.b.stream(), cover(kN), twice, c.y, c.out, kN);  // after the conditional node
  c.b.end_building();
  graph exec = c.b.complete();

  const unsigned any_nonzero = static_cast<unsigned>(seed) | 1u;
  for (unsigned value : {any_nonzero, 0u, 1u}) {
    SCOPED_TRACE(value);
    z.copy_from(z0, s);
    c.launch_with(exec, value, s);
    const int runs = value != 0 ? 1 : 0;
    c.expect(plus(c.y0, 3 * runs), doubled(plus(c.y0, 3 * runs)), s);
    EXPECT_TRUE(same(z.to_vector<float>(s), plus(z0, runs)));
  }
}

TEST_F(BuilderConditional, IfElseRunsExactlyOneBranch) {
  flagged_capture c(dev(), s, seed);
  auto [then_body, else_body] = c.b.if_else(c.cond);
  EXPECT_EQ(then_body.builder_kind(), bkind::conditional_body);
  EXPECT_EQ(else_body.builder_kind(), bkind::conditional_body);
  then_body.begin_building();
  launch(then_body.stream(), cover(kN), add_one, c.y, kN);
  launch(then_body.stream(), cover(kN), add_one, c.y, kN);
  then_body.end_building();
  else_body.begin_building();
  launch(else_body.stream(), cover(kN), twice, c.y, c.out, kN);
  else_body.end_building();
  c.b.end_building();
  graph exec = c.b.complete();

  for (unsigned value : {1u, 0u, static_cast<unsigned>(seed >> 32) | 2u}) {
    SCOPED_TRACE(value);
    c.launch_with(exec, value, s);
    if (value != 0) {
      c.expect(plus(c.y0, 2), std::vector<float>(kN, kPoison), s);
    } else {
      c.expect(c.y0, doubled(c.y0), s);
    }
  }
}

TEST_F(BuilderConditional, WhileLoopRunsUntilTheBodyClearsTheCondition) {
  const int limit = 1 + static_cast<int>(seed % 16);
  SCOPED_TRACE(::testing::Message() << "limit " << limit);
  auto [y0, y] = random_on_device(kN, seed, s);
  buffer counter = ints(1, s, -12345);

  graph_builder b(dev());
  b.begin_building();
  counter.fill(0, b.stream());  // a captured memset: every launch counts from zero
  const graph_condition cond = b.create_condition();
  launch(b.stream(), cover(1), graph_kernel("set_condition"), cond, 1u);
  graph_builder body = b.while_loop(cond);
  EXPECT_EQ(body.builder_kind(), bkind::conditional_body);
  body.begin_building();
  launch(body.stream(), cover(kN), add_one, y, kN);
  // The body clears the condition itself once the counter reaches the limit.
  launch(body.stream(), cover(1), graph_kernel("count_up"), cond, counter, limit);
  body.end_building();
  b.end_building();
  graph exec = b.complete();

  exec.launch(s);
  EXPECT_EQ(read_ints(counter, s), std::vector<int>{limit});
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, limit)));
  exec.launch(s);
  EXPECT_EQ(read_ints(counter, s), std::vector<int>{limit});
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 2 * limit)));
}

TEST_F(BuilderConditional, WhileLoopWithAFalseDefaultNeverRuns) {
  buffer counters = ints(2, s, 0);
  graph_builder b(dev());
  b.begin_building();
  const graph_condition cond = b.create_condition(0u);  // every launch starts with 0
  graph_builder body = b.while_loop(cond);
  body.begin_building();
  launch(body.stream(), cover(1), bump, element(counters, 0));
  body.end_building();
  launch(b.stream(), cover(1), bump, element(counters, 1));  // the graph ran
  b.end_building();
  graph exec = launched(b, s);
  exec.launch(s);
  EXPECT_EQ(read_ints(counters, s), (std::vector<int>{0, 2}));
}

// A capture on `b` whose every launch starts by zeroing `n` int counters (-1 before the first
// launch), which the captured bodies bump, and a `flag` for its condition.
struct counting_capture {
  buffer counters;
  buffer flag;
  graph_builder b;

  counting_capture(const device& d, const stream& s, std::size_t n)
      : counters(ints(n, s, -1)), flag(sizeof(unsigned), s), b(d) {
    b.begin_building();
    counters.fill(0, b.stream());
  }
  // Captures a bump of counter `i` on `on` (b, or a body or fork of it).
  void bump(const graph_builder& on, std::size_t i) const {
    launch(on.stream(), cover(1), graph_kernel("bump"), element(counters, i));
  }
  // The counters after launching `exec` with the condition `value`.
  std::vector<int> after_launch(const graph& exec, unsigned value, const stream& s) {
    set_flag(flag, value, s);
    exec.launch(s);
    return read_ints(counters, s);
  }
};

TEST_F(BuilderConditional, SwitchSelectsOneBranchAndSkipsAllWhenOutOfRange) {
  counting_capture c(dev(), s, 4);
  const graph_condition cond = condition_from(c.b, c.flag);
  std::vector<graph_builder> cases = c.b.switch_(cond, 3);
  ASSERT_EQ(cases.size(), 3u);
  for (unsigned i = 0; i < 3; ++i) {
    EXPECT_EQ(cases[i].builder_kind(), bkind::conditional_body);
    cases[i].begin_building();
    for (unsigned k = 0; k <= i; ++k) c.bump(cases[i], i);
    cases[i].end_building();
  }
  c.bump(c.b, 3);  // after the switch, always
  c.b.end_building();
  graph exec = c.b.complete();

  const unsigned far_out = 3u + static_cast<unsigned>(seed % 100000);
  for (unsigned value : {2u, 0u, 1u, 3u, far_out}) {
    SCOPED_TRACE(value);
    std::vector<int> want{0, 0, 0, 1};
    if (value < 3) want[value] = static_cast<int>(value) + 1;
    EXPECT_EQ(c.after_launch(exec, value, s), want);
  }
}

TEST_F(BuilderConditional, ConditionalOnAForkedBuilder) {
  counting_capture c(dev(), s, 3);
  std::vector<graph_builder> forks = c.b.split(2);
  graph_builder& f = forks[0];
  const graph_condition cond = condition_from(f, c.flag);
  graph_builder body = f.if_then(cond);
  body.begin_building();
  c.bump(body, 0);
  body.end_building();
  c.bump(c.b, 1);  // the other branch
  c.b.join(std::move(forks));
  c.bump(c.b, 2);  // after the join
  c.b.end_building();
  EXPECT_EQ(body.graph_definition().node_count(), 1u);
  body.close();
  graph exec = c.b.complete();

  for (unsigned value : {1u, 0u}) {
    SCOPED_TRACE(value);
    EXPECT_EQ(c.after_launch(exec, value, s), (std::vector<int>{value != 0 ? 1 : 0, 1, 1}));
  }
}

TEST_F(BuilderConditional, NestedConditionalsKeepTheirHierarchyAlive) {
  buffer counters = ints(4, s, -1);
  buffer flags(2 * sizeof(unsigned), s);
  const kernel set_from = graph_kernel("set_condition_from");

  std::optional<graph_definition> main_view;
  std::optional<graph_definition> inner_view;
  {
    graph_builder b(dev());
    b.begin_building();
    counters.fill(0, b.stream());
    const graph_condition outer_cond = b.create_condition();
    launch(b.stream(), cover(1), set_from, outer_cond, element(flags, 0));
    graph_builder outer = b.if_then(outer_cond);
    outer.begin_building();
    launch(outer.stream(), cover(1), bump, element(counters, 0));
    const graph_condition inner_cond = outer.create_condition();  // the body's own condition
    EXPECT_NE(inner_cond, outer_cond);
    launch(outer.stream(), cover(1), set_from, inner_cond, element(flags, 1));
    graph_builder inner = outer.if_then(inner_cond);
    EXPECT_EQ(inner.builder_kind(), bkind::conditional_body);
    inner.begin_building();
    launch(inner.stream(), cover(1), bump, element(counters, 1));
    inner.end_building();
    launch(outer.stream(), cover(1), bump, element(counters, 2));  // after the inner node
    outer.end_building();
    launch(b.stream(), cover(1), bump, element(counters, 3));
    b.end_building();
    main_view = b.graph_definition();
    inner_view = inner.graph_definition();
    EXPECT_EQ(outer.graph_definition().node_count(), 4u);  // bump, set, if, bump
    inner.close();
    outer.close();
  }  // every builder is gone: the views keep the whole hierarchy
  EXPECT_EQ(inner_view->node_count(), 1u);
  graph exec = main_view->instantiate();
  main_view.reset();
  inner_view.reset();

  for (unsigned o : {0u, 1u}) {
    for (unsigned i : {0u, 1u}) {
      SCOPED_TRACE(::testing::Message() << "outer " << o << " inner " << i);
      const std::vector<unsigned> host{o, i};
      flags.copy_from(host, s);
      exec.launch(s);
      const int outer_ran = o != 0 ? 1 : 0;
      EXPECT_EQ(read_ints(counters, s),
                (std::vector<int>{outer_ran, outer_ran * (i != 0 ? 1 : 0), outer_ran, 1}));
    }
  }
}

TEST_F(BuilderConditional, ConditionalsNeedABuildingBuilderAndTheirOwnCondition) {
  graph_builder b(dev());
  graph_builder other(dev());
  EXPECT_THROW(b.create_condition(), invalid_argument);  // no graph before begin_building
  b.begin_building();
  other.begin_building();
  const graph_condition mine = b.create_condition();
  const graph_condition theirs = other.create_condition();
  std::string msg = invalid_argument_message([&] { b.if_then(theirs); });
  EXPECT_TRUE(contains(msg, "another graph")) << msg;
  EXPECT_THROW(b.while_loop(graph_condition()), invalid_argument);
  msg = invalid_argument_message([&] { b.switch_(mine, 0); });
  EXPECT_TRUE(contains(msg, "at least one")) << msg;
  EXPECT_TRUE(b.is_building());
  graph_builder body = b.if_then(mine);
  // A body builder's conditional needs the body to be building.
  const graph_condition body_cond = body.create_condition();
  EXPECT_THROW(body.if_then(body_cond), invalid_argument);
  body.begin_building();
  graph_builder inner = body.if_then(body_cond);
  body.end_building();
  b.end_building();
  other.end_building();
  EXPECT_THROW(b.if_then(mine), invalid_argument);  // the capture ended
  EXPECT_THROW(b.if_else(mine), invalid_argument);
}

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
  auto [x0, x] = random_on_device(kN, seed, s);
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
  auto [y0, y] = random_on_device(kN, seed, s);
  buffer z = poisoned(kN, s);
  graph_builder b = capture_add_one(dev(), y);
  graph_definition view = b.graph_definition();
  const std::vector<graph_node> captured = view.nodes();
  ASSERT_EQ(captured.size(), 1u);
  EXPECT_EQ(captured[0].kind(), graph_node_kind::kernel);
  const graph_node second = captured[0].launch(cover(kN), add_one, y, kN);
  second.launch(cover(kN), twice, y, z, kN);
  EXPECT_EQ(view.node_count(), 3u);
  EXPECT_EQ(b.graph_definition().node_count(), 3u);  // the same graph
  EXPECT_TRUE(b.graph_definition() == view);

  graph exec = launched(b, s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 2)));
  EXPECT_TRUE(same(z.to_vector<float>(s), doubled(plus(y0, 2))));
}

TEST_F(BuilderView, ConditionalBodyViewIsValidBeforeAndAfterCapture) {
  auto [y0, y] = random_on_device(kN, seed, s);
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
  graph exec = launched(b, s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 3)));
}

TEST_F(BuilderView, HybridConditionalBodyBuiltOnlyThroughItsView) {
  flagged_capture c(dev(), s, seed);
  graph_builder body = c.b.if_then(c.cond);
  graph_definition body_view = body.graph_definition();  // never begin_building() on the body
  EXPECT_EQ(body_view.node_count(), 0u);
  const graph_node first = body_view.launch(cover(kN), add_one, c.y, kN);
  first.launch(cover(kN), twice, c.y, c.out, kN);
  c.b.end_building();
  EXPECT_EQ(body.builder_state(), bstate::not_started);
  EXPECT_EQ(body_view.node_count(), 2u);
  graph exec = c.b.complete();

  for (unsigned value : {1u, 0u}) {
    SCOPED_TRACE(value);
    c.launch_with(exec, value, s);
    if (value != 0) {
      c.expect(plus(c.y0, 1), doubled(plus(c.y0, 1)), s);
    } else {
      c.expect(c.y0, std::vector<float>(kN, kPoison), s);
    }
  }
}

}  // namespace
}  // namespace cucore
