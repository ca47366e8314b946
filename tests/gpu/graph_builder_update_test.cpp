// graph_builder (label gpu): capture_guard and abandoned captures, and executable graph update
// from a builder (graph_builder_test_support.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>
#include <stdexcept>
#include <string>
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

// ---- capture_guard and abandoned captures -------------------------------------------------------

TEST_F(BuilderGuard, AnExceptionInsideTheGuardEndsTheCapture) {
  SEED_TRACE();
  const kernel add_one = graph_kernel("add_one");
  auto [y0, y] = random_on_device(seed, s);
  s.synchronize();
  stream caller(dev());
  graph_builder b(caller);
  bool caught = false;
  try {
    capture_guard guard(b);
    EXPECT_TRUE(b.is_building());
    launch(b.stream(), cover(kN), add_one, y, kN);
    throw std::runtime_error("the capture failed half way");
  } catch (const std::runtime_error& e) {
    caught = true;
    EXPECT_STREQ(e.what(), "the capture failed half way");
  }
  EXPECT_TRUE(caught);
  EXPECT_FALSE(b.is_building());
  EXPECT_EQ(b.builder_state(), bstate::ended);
  // The stream runs ordinary work again; the captured launch never ran.
  launch(caller, cover(kN), add_one, y, kN);
  EXPECT_TRUE(same(y.to_vector<float>(caller), plus(y0, 1)));
  // What was captured before the exception is a complete graph.
  graph exec = b.complete();
  exec.launch(caller);
  EXPECT_TRUE(same(y.to_vector<float>(caller), plus(y0, 2)));
}

TEST_F(BuilderGuard, EndFinishesTheCaptureNormally) {
  SEED_TRACE();
  auto [y0, y] = random_on_device(seed, s);
  graph_builder b(dev());
  {
    capture_guard guard(b, capture_mode::thread_local_);
    EXPECT_EQ(b.builder_state(), bstate::capturing);
    launch(b.stream(), cover(kN), graph_kernel("add_one"), y, kN);
    guard.end();
    EXPECT_EQ(b.builder_state(), bstate::ended);
    EXPECT_NO_THROW(guard.end());  // once ended, the guard has nothing left to do
  }
  EXPECT_EQ(b.builder_state(), bstate::ended);
  graph exec = b.complete();
  exec.launch(s);
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 2)));
  // A guard on a builder that cannot begin throws from its constructor.
  EXPECT_THROW(capture_guard again(b), invalid_argument);
}

TEST_F(BuilderGuard, DestroyingABuilderMidCaptureLeavesItsStreamUsable) {
  SEED_TRACE();
  const kernel add_one = graph_kernel("add_one");
  auto [y0, y] = random_on_device(seed, s);
  s.synchronize();
  stream caller(dev());
  {
    graph_builder b(caller);
    b.begin_building();
    launch(b.stream(), cover(kN), add_one, y, kN);
    launch(b.stream(), cover(kN), add_one, y, kN);
  }  // destroyed while capturing
  graph_builder probe(caller);
  EXPECT_FALSE(probe.is_building());
  launch(caller, cover(kN), add_one, y, kN);
  EXPECT_TRUE(same(y.to_vector<float>(caller), plus(y0, 1)));

  // close() mid-capture does the same, and the stream captures again afterwards.
  probe.begin_building();
  launch(probe.stream(), cover(kN), add_one, y, kN);
  probe.close();
  graph_builder again(caller);
  EXPECT_FALSE(again.is_building());
  again.begin_building();
  launch(again.stream(), cover(kN), add_one, y, kN);
  again.end_building();
  graph exec = again.complete();
  exec.launch(caller);
  EXPECT_TRUE(same(y.to_vector<float>(caller), plus(y0, 2)));
}

// ---- executable graph update --------------------------------------------------------------------

TEST_F(BuilderUpdate, UpdateFromABuilderRedirectsKernelArguments) {
  SEED_TRACE();
  auto [x0, x] = random_on_device(seed, s);
  buffer first = poisoned(kN, s);
  buffer second = poisoned(kN, s);
  const std::vector<float> want = plus(doubled(x0), 1);
  const std::vector<float> untouched(kN, kPoison);

  graph exec = capture_twice_plus_one(dev(), x, first).complete();
  exec.launch(s);
  EXPECT_TRUE(same(first.to_vector<float>(s), want));
  EXPECT_TRUE(same(second.to_vector<float>(s), untouched));

  graph_builder redirected = capture_twice_plus_one(dev(), x, second);
  exec.update(redirected);
  redirected.close();  // the executable graph keeps its new parameters
  first.fill(kPoison, s);
  exec.launch(s);
  EXPECT_TRUE(same(first.to_vector<float>(s), untouched));
  EXPECT_TRUE(same(second.to_vector<float>(s), want));
}

TEST_F(BuilderUpdate, UpdateFromAnUnfinishedOrClosedBuilderIsRefused) {
  buffer y = poisoned(kN, s);
  graph exec = capture_twice_plus_one(dev(), y, y).complete();
  graph_builder source(dev());
  std::string msg = invalid_argument_message([&] { exec.update(source); });
  EXPECT_TRUE(contains(msg, "not finished")) << msg;
  source.begin_building();
  launch(source.stream(), cover(kN), graph_kernel("twice"), y, y, kN);
  launch(source.stream(), cover(kN), graph_kernel("add_one"), y, kN);
  msg = invalid_argument_message([&] { exec.update(source); });
  EXPECT_TRUE(contains(msg, "not finished")) << msg;
  EXPECT_TRUE(source.is_building());
  source.end_building();
  EXPECT_NO_THROW(exec.update(source));
  source.close();
  msg = invalid_argument_message([&] { exec.update(source); });
  EXPECT_TRUE(contains(msg, "closed")) << msg;
}

TEST_F(BuilderUpdate, TopologyMismatchIsACudaErrorAndLeavesTheGraphUnchanged) {
  SEED_TRACE();
  auto [x0, x] = random_on_device(seed, s);
  buffer y = poisoned(kN, s);
  buffer other = poisoned(kN, s);
  graph exec = capture_twice_plus_one(dev(), x, y).complete();

  graph_builder three(dev());
  three.begin_building();
  launch(three.stream(), cover(kN), graph_kernel("twice"), x, other, kN);
  launch(three.stream(), cover(kN), graph_kernel("add_one"), other, kN);
  launch(three.stream(), cover(kN), graph_kernel("add_one"), other, kN);
  three.end_building();
  try {
    exec.update(three);
    FAIL() << "expected cuda_error";
  } catch (const cuda_error& e) {
    EXPECT_EQ(e.result_name(), "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE");
    EXPECT_EQ(e.call(), "cuGraphExecUpdate");
    EXPECT_TRUE(contains(e.what(), "topology")) << e.what();
  }
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(doubled(x0), 1)));
  EXPECT_TRUE(same(other.to_vector<float>(s), std::vector<float>(kN, kPoison)));
}

TEST_F(BuilderUpdate, UpdateFromADefinition) {
  SEED_TRACE();
  auto [x0, x] = random_on_device(seed, s);
  buffer first = poisoned(kN, s);
  buffer second = poisoned(kN, s);
  graph exec = capture_twice_plus_one(dev(), x, first).complete();

  std::optional<graph_definition> source;
  {
    graph_builder b = capture_twice_plus_one(dev(), x, second);
    source = b.graph_definition();
  }  // the view outlives its builder
  exec.update(*source);
  source.reset();
  exec.launch(s);
  EXPECT_TRUE(same(first.to_vector<float>(s), std::vector<float>(kN, kPoison)));
  EXPECT_TRUE(same(second.to_vector<float>(s), plus(doubled(x0), 1)));
}

TEST_F(BuilderUpdate, UpdateSwapsConditionalSwitchGraphs) {
  buffer counters = ints(3, s, 0);
  const kernel bump = graph_kernel("bump");
  // The same topology; only the condition's default value (the selected case) differs.
  auto build = [&](unsigned selected) {
    graph_builder b(dev());
    b.begin_building();
    const graph_condition cond = b.create_condition(selected);
    std::vector<graph_builder> cases = b.switch_(cond, 3);
    for (unsigned i = 0; i < 3; ++i) {
      cases[i].begin_building();
      launch(cases[i].stream(), cover(1), bump, element(counters, i));
      cases[i].end_building();
    }
    b.end_building();
    return b;
  };
  graph_builder variants[] = {build(0), build(1), build(2)};
  graph exec = variants[0].complete();
  exec.launch(s);
  EXPECT_EQ(read_ints(counters, s), (std::vector<int>{1, 0, 0}));
  exec.update(variants[1]);
  exec.launch(s);
  EXPECT_EQ(read_ints(counters, s), (std::vector<int>{1, 1, 0}));
  exec.update(variants[2]);
  exec.launch(s);
  EXPECT_EQ(read_ints(counters, s), (std::vector<int>{1, 1, 1}));
}

}  // namespace
}  // namespace cucore
