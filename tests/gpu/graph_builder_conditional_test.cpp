// graph_builder (label gpu): conditional nodes by capture (graph_builder_test_support.hpp).
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

// ---- conditionals by capture --------------------------------------------------------------------

TEST_F(BuilderConditional, IfThenRunsTheBodyOnlyWhenTheConditionIsSet) {
  SEED_TRACE();
  const kernel add_one = graph_kernel("add_one");
  const kernel twice = graph_kernel("twice");
  const auto y0 = random_values<float>(kN, seed);
  const auto z0 = random_values<float>(kN, seed + 1);
  buffer y = upload(y0, s);
  buffer z = upload(z0, s);
  buffer w = poisoned(kN, s);
  buffer flag(sizeof(unsigned), s);

  graph_builder b(dev());
  b.begin_building();
  const graph_condition cond = b.create_condition();
  EXPECT_NE(cond.graph_handle(), nullptr);
  launch(b.stream(), cover(1), graph_kernel("set_condition_from"), cond, flag);
  graph_builder body = b.if_then(cond);
  EXPECT_EQ(body.builder_kind(), bkind::conditional_body);
  EXPECT_EQ(body.builder_state(), bstate::not_started);
  EXPECT_FALSE(body.is_join_required());
  body.begin_building();
  EXPECT_TRUE(body.is_building());
  launch(body.stream(), cover(kN), add_one, y, kN);
  std::vector<graph_builder> forks = body.split(2);  // a diamond inside the body
  launch(forks[0].stream(), cover(kN), add_one, z, kN);
  launch(body.stream(), cover(kN), add_one, y, kN);
  body.join(std::move(forks));
  launch(body.stream(), cover(kN), add_one, y, kN);
  body.end_building();
  EXPECT_EQ(body.builder_state(), bstate::ended);
  launch(b.stream(), cover(kN), twice, y, w, kN);  // after the conditional node
  b.end_building();
  graph exec = b.complete();

  const unsigned any_nonzero = static_cast<unsigned>(seed) | 1u;
  for (unsigned value : {any_nonzero, 0u, 1u}) {
    SCOPED_TRACE(value);
    y.copy_from(y0, s);
    z.copy_from(z0, s);
    w.fill(kPoison, s);
    set_flag(flag, value, s);
    exec.launch(s);
    const int runs = value != 0 ? 1 : 0;
    EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 3 * runs)));
    EXPECT_TRUE(same(z.to_vector<float>(s), plus(z0, runs)));
    EXPECT_TRUE(same(w.to_vector<float>(s), doubled(plus(y0, 3 * runs))));
  }
}

TEST_F(BuilderConditional, IfElseRunsExactlyOneBranch) {
  SEED_TRACE();
  auto [y0, y] = random_on_device(seed, s);
  buffer z = poisoned(kN, s);
  buffer flag(sizeof(unsigned), s);

  graph_builder b(dev());
  b.begin_building();
  const graph_condition cond = condition_from(b, flag);
  auto [then_body, else_body] = b.if_else(cond);
  EXPECT_EQ(then_body.builder_kind(), bkind::conditional_body);
  EXPECT_EQ(else_body.builder_kind(), bkind::conditional_body);
  then_body.begin_building();
  launch(then_body.stream(), cover(kN), graph_kernel("add_one"), y, kN);
  launch(then_body.stream(), cover(kN), graph_kernel("add_one"), y, kN);
  then_body.end_building();
  else_body.begin_building();
  launch(else_body.stream(), cover(kN), graph_kernel("twice"), y, z, kN);
  else_body.end_building();
  b.end_building();
  graph exec = b.complete();

  for (unsigned value : {1u, 0u, static_cast<unsigned>(seed >> 32) | 2u}) {
    SCOPED_TRACE(value);
    y.copy_from(y0, s);
    z.fill(kPoison, s);
    set_flag(flag, value, s);
    exec.launch(s);
    if (value != 0) {
      EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 2)));
      EXPECT_TRUE(same(z.to_vector<float>(s), std::vector<float>(kN, kPoison)));
    } else {
      EXPECT_TRUE(same(y.to_vector<float>(s), y0));
      EXPECT_TRUE(same(z.to_vector<float>(s), doubled(y0)));
    }
  }
}

TEST_F(BuilderConditional, WhileLoopRunsUntilTheBodyClearsTheCondition) {
  SEED_TRACE();
  const int limit = 1 + static_cast<int>(seed % 16);
  SCOPED_TRACE(::testing::Message() << "limit " << limit);
  auto [y0, y] = random_on_device(seed, s);
  buffer counter = ints(1, s, -12345);

  graph_builder b(dev());
  b.begin_building();
  counter.fill(0, b.stream());  // a captured memset: every launch counts from zero
  const graph_condition cond = b.create_condition();
  launch(b.stream(), cover(1), graph_kernel("set_condition"), cond, 1u);
  graph_builder body = b.while_loop(cond);
  EXPECT_EQ(body.builder_kind(), bkind::conditional_body);
  body.begin_building();
  launch(body.stream(), cover(kN), graph_kernel("add_one"), y, kN);
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
  launch(body.stream(), cover(1), graph_kernel("bump"), element(counters, 0));
  body.end_building();
  launch(b.stream(), cover(1), graph_kernel("bump"), element(counters, 1));  // the graph ran
  b.end_building();
  graph exec = b.complete();
  exec.launch(s);
  exec.launch(s);
  EXPECT_EQ(read_ints(counters, s), (std::vector<int>{0, 2}));
}

TEST_F(BuilderConditional, SwitchSelectsOneBranchAndSkipsAllWhenOutOfRange) {
  SEED_TRACE();
  buffer counters = ints(4, s, -1);
  buffer selector(sizeof(unsigned), s);
  const kernel bump = graph_kernel("bump");

  graph_builder b(dev());
  b.begin_building();
  counters.fill(0, b.stream());
  const graph_condition cond = condition_from(b, selector);
  std::vector<graph_builder> cases = b.switch_(cond, 3);
  ASSERT_EQ(cases.size(), 3u);
  for (unsigned i = 0; i < 3; ++i) {
    EXPECT_EQ(cases[i].builder_kind(), bkind::conditional_body);
    cases[i].begin_building();
    for (unsigned k = 0; k <= i; ++k)
      launch(cases[i].stream(), cover(1), bump, element(counters, i));
    cases[i].end_building();
  }
  launch(b.stream(), cover(1), bump, element(counters, 3));  // after the switch, always
  b.end_building();
  graph exec = b.complete();

  const unsigned far_out = 3u + static_cast<unsigned>(seed % 100000);
  for (unsigned value : {2u, 0u, 1u, 3u, far_out}) {
    SCOPED_TRACE(value);
    set_flag(selector, value, s);
    exec.launch(s);
    std::vector<int> want{0, 0, 0, 1};
    if (value < 3) want[value] = static_cast<int>(value) + 1;
    EXPECT_EQ(read_ints(counters, s), want);
  }
}

TEST_F(BuilderConditional, ConditionalOnAForkedBuilder) {
  buffer counters = ints(3, s, -1);
  buffer flag(sizeof(unsigned), s);
  const kernel bump = graph_kernel("bump");

  graph_builder b(dev());
  b.begin_building();
  counters.fill(0, b.stream());
  std::vector<graph_builder> forks = b.split(2);
  graph_builder& f = forks[0];
  const graph_condition cond = condition_from(f, flag);
  graph_builder body = f.if_then(cond);
  body.begin_building();
  launch(body.stream(), cover(1), bump, element(counters, 0));
  body.end_building();
  launch(b.stream(), cover(1), bump, element(counters, 1));  // the other branch
  b.join(std::move(forks));
  launch(b.stream(), cover(1), bump, element(counters, 2));  // after the join
  b.end_building();
  EXPECT_EQ(body.graph_definition().node_count(), 1u);
  body.close();
  graph exec = b.complete();

  for (unsigned value : {1u, 0u}) {
    SCOPED_TRACE(value);
    set_flag(flag, value, s);
    exec.launch(s);
    EXPECT_EQ(read_ints(counters, s), (std::vector<int>{value != 0 ? 1 : 0, 1, 1}));
  }
}

TEST_F(BuilderConditional, NestedConditionalsKeepTheirHierarchyAlive) {
  buffer counters = ints(4, s, -1);
  buffer flags(2 * sizeof(unsigned), s);
  const kernel bump = graph_kernel("bump");
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

}  // namespace
}  // namespace cucore
