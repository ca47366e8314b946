// Stream capture: embedding builders and definitions, host callbacks and what they retain,
// capture_guard and abandoned captures, and executable graph update from builders and
// definitions; adapted from cuda.core's test_graph_builder.py and test_graph_update.py (label gpu;
// each test skips without a device). Every buffer captured here outlives the graphs that use it.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
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
#include "graph_builder_support.hpp"

namespace cucore {
namespace {

using namespace graph_builder_testing;  // graph_builder_support.hpp

// ---- embed --------------------------------------------------------------------------------------

TEST_F(BuilderEmbed, EmbedsAFinishedChildBuilder) {
  auto [x0, x] = random_on_device(kN, seed, s);
  buffer y = poisoned(kN, s);
  buffer z = poisoned(kN, s);

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
  graph exec = launched(parent, s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(doubled(x0), 2)));
  EXPECT_TRUE(same(z.to_vector<float>(s), doubled(plus(doubled(x0), 2))));
}

TEST_F(BuilderEmbed, EmbedsAGraphDefinition) {
  auto [x0, x] = random_on_device(kN, seed, s);
  buffer y = poisoned(kN, s);
  buffer z = poisoned(kN, s);
  std::optional<graph_definition> child{std::in_place, dev()};
  const graph_node n = child->launch(cover(kN), add_one, y, kN);
  n.launch(cover(kN), add_one, y, kN);
  n.successors()[0].launch(cover(kN), add_one, y, kN);

  graph_builder parent(dev());
  parent.begin_building();
  launch(parent.stream(), cover(kN), twice, x, y, kN);
  parent.embed(*child);
  child.reset();  // the parent holds a clone
  launch(parent.stream(), cover(kN), twice, y, z, kN);
  parent.end_building();
  graph exec = launched(parent, s);
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
  launch(child.stream(), cover(1), bump, counter);
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
  graph exec = launched(parent, s);
  EXPECT_EQ(read_ints(counter, s), std::vector<int>{1});  // the refused embeds added nothing
}

// ---- host callbacks -----------------------------------------------------------------------------

TEST_F(BuilderCallback, LambdaRunsAtEveryLaunchInCaptureOrder) {
  auto [y0, y] = random_on_device(kN, seed, s);
  std::atomic<int> calls{0};
  graph_builder b(dev());
  b.begin_building();
  launch(b.stream(), cover(kN), add_one, y, kN);
  b.callback([&calls] { calls.fetch_add(1); });
  launch(b.stream(), cover(kN), add_one, y, kN);
  b.callback([&calls] { calls.fetch_add(100); });
  b.end_building();
  EXPECT_EQ(b.graph_definition().node_count(), 4u);
  graph exec = b.complete();
  EXPECT_EQ(calls.load(), 0);  // capturing runs nothing
  for (int i = 1; i <= 3; ++i) exec.launch(s);
  s.synchronize();
  EXPECT_EQ(calls.load(), 303);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 6)));
}

// The lambda (and a token it captured) lives as long as the graph or an executable graph made
// from it; `drop_executable_first` picks which goes first.
void check_lambda_retention(const device& d, const stream& s, bool drop_executable_first) {
  auto token = std::make_shared<int>(5);
  std::weak_ptr<int> weak = token;
  std::atomic<int> calls{0};
  graph exec;
  std::optional<graph_definition> view;
  {
    graph_builder b(d);
    b.begin_building();
    b.callback([token, &calls] { calls.fetch_add(*token); });
    token.reset();
    b.end_building();
    exec = b.complete();
    view = b.graph_definition();
  }  // the builder is gone
  EXPECT_TRUE(still_alive_after(weak));
  exec.launch(s);
  exec.launch(s);
  s.synchronize();
  EXPECT_EQ(calls.load(), 10);

  if (drop_executable_first) {
    exec.close();
    EXPECT_TRUE(still_alive_after(weak)) << "released while the graph still holds it";
    graph again = view->instantiate();  // the graph can still run it
    again.launch(s);
    s.synchronize();
    EXPECT_EQ(calls.load(), 15);
    again.close();
    EXPECT_TRUE(still_alive_after(weak));
    view.reset();
  } else {
    view.reset();
    EXPECT_TRUE(still_alive_after(weak)) << "released while the executable graph holds it";
    exec.launch(s);
    s.synchronize();
    EXPECT_EQ(calls.load(), 15);
    exec.close();
  }
  EXPECT_TRUE(expires_within(weak)) << "not released after the graph and executables are gone";
}

TEST_F(BuilderCallback, LambdaIsRetainedUntilTheGraphThenTheExecutableAreGone) {
  check_lambda_retention(dev(), s, /*drop_executable_first=*/false);
}

TEST_F(BuilderCallback, LambdaIsRetainedUntilTheExecutableThenTheGraphAreGone) {
  check_lambda_retention(dev(), s, /*drop_executable_first=*/true);
}

struct callback_sink {
  std::mutex mutex;
  int calls = 0;
  std::array<unsigned char, 24> seen{};
};

struct callback_payload {
  callback_sink* sink;
  std::array<unsigned char, 24> bytes;
};

// A C host function: records the payload it was given (its copy may be unaligned: memcpy).
void record_payload(void* data) {
  callback_payload p;
  std::memcpy(&p, data, sizeof(p));
  std::lock_guard<std::mutex> lock(p.sink->mutex);
  ++p.sink->calls;
  p.sink->seen = p.bytes;
}

TEST_F(BuilderCallback, FunctionPointerUserDataIsCopied) {
  callback_sink sink;
  callback_payload payload{&sink, {}};
  for (std::size_t i = 0; i < payload.bytes.size(); ++i) {
    payload.bytes[i] = static_cast<unsigned char>((seed >> (8 * (i % 8))) + i);
  }
  const auto expected = payload.bytes;
  auto source = std::make_unique<std::vector<std::byte>>(sizeof(payload));
  std::memcpy(source->data(), &payload, sizeof(payload));

  graph exec;
  {
    graph_builder b(dev());
    b.begin_building();
    b.callback(&record_payload, std::span<const std::byte>(*source));
    // The source bytes are overwritten, then freed: the graph has its own copy.
    std::fill(source->begin(), source->end(), std::byte{0xEE});
    source.reset();
    b.end_building();
    exec = b.complete();
  }
  exec.launch(s);
  exec.launch(s);
  s.synchronize();
  std::lock_guard<std::mutex> lock(sink.mutex);
  EXPECT_EQ(sink.calls, 2);
  EXPECT_EQ(sink.seen, expected);
}

TEST_F(BuilderCallback, FunctionPointerWithTheCallersPointer) {
  std::atomic<int> calls{0};
  graph_builder b(dev());
  b.begin_building();
  b.callback(&count_call, static_cast<void*>(&calls));
  b.callback(&count_call, static_cast<void*>(&calls));
  b.end_building();
  graph exec = launched(b, s);
  s.synchronize();
  EXPECT_EQ(calls.load(), 2);
}

TEST_F(BuilderCallback, CallbackNeedsABuildingBuilder) {
  std::atomic<int> calls{0};
  const std::array<std::byte, 4> bytes{};
  graph_builder b(dev());
  std::string msg = invalid_argument_message([&] { b.callback([&calls] { ++calls; }); });
  EXPECT_TRUE(contains(msg, "begin_building")) << msg;
  EXPECT_THROW(b.callback(&count_call, std::span<const std::byte>(bytes)), invalid_argument);
  b.begin_building();
  EXPECT_THROW(b.callback(static_cast<host_function>(nullptr), static_cast<void*>(&calls)),
               invalid_argument);
  b.end_building();
  EXPECT_THROW(b.callback([&calls] { ++calls; }), invalid_argument);
  EXPECT_THROW(b.callback(&count_call, static_cast<void*>(&calls)), invalid_argument);
  graph exec = b.complete();  // nothing was captured
  exec.launch(s);
  s.synchronize();
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(b.graph_definition().node_count(), 0u);
}

// ---- capture_guard and abandoned captures -------------------------------------------------------

TEST_F(BuilderGuard, AnExceptionInsideTheGuardEndsTheCapture) {
  auto [y0, y] = random_on_device(kN, seed, s);
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
  graph exec = launched(b, caller);
  EXPECT_TRUE(same(y.to_vector<float>(caller), plus(y0, 2)));
}

TEST_F(BuilderGuard, EndFinishesTheCaptureNormally) {
  auto [y0, y] = random_on_device(kN, seed, s);
  graph_builder b(dev());
  {
    capture_guard guard(b, capture_mode::thread_local_);
    EXPECT_EQ(b.builder_state(), bstate::capturing);
    launch(b.stream(), cover(kN), add_one, y, kN);
    guard.end();
    EXPECT_EQ(b.builder_state(), bstate::ended);
    EXPECT_NO_THROW(guard.end());  // once ended, the guard has nothing left to do
  }
  EXPECT_EQ(b.builder_state(), bstate::ended);
  graph exec = launched(b, s);
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 2)));
  // A guard on a builder that cannot begin throws from its constructor.
  EXPECT_THROW(capture_guard again(b), invalid_argument);
}

TEST_F(BuilderGuard, DestroyingABuilderMidCaptureLeavesItsStreamUsable) {
  auto [y0, y] = random_on_device(kN, seed, s);
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
  graph exec = launched(again, caller);
  EXPECT_TRUE(same(y.to_vector<float>(caller), plus(y0, 2)));
}

// ---- executable graph update --------------------------------------------------------------------

TEST_F(BuilderUpdate, UpdateFromABuilderRedirectsKernelArguments) {
  auto [x0, x] = random_on_device(kN, seed, s);
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
  launch(source.stream(), cover(kN), twice, y, y, kN);
  launch(source.stream(), cover(kN), add_one, y, kN);
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
  auto [x0, x] = random_on_device(kN, seed, s);
  buffer y = poisoned(kN, s);
  buffer other = poisoned(kN, s);
  graph exec = capture_twice_plus_one(dev(), x, y).complete();

  graph_builder three(dev());
  three.begin_building();
  launch(three.stream(), cover(kN), twice, x, other, kN);
  launch(three.stream(), cover(kN), add_one, other, kN);
  launch(three.stream(), cover(kN), add_one, other, kN);
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
  auto [x0, x] = random_on_device(kN, seed, s);
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
