// graph_builder (label gpu): host callbacks by capture, and what they keep alive
// (graph_builder_test_support.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
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

// ---- host callbacks -----------------------------------------------------------------------------

TEST_F(BuilderCallback, LambdaRunsAtEveryLaunchInCaptureOrder) {
  SEED_TRACE();
  auto [y0, y] = random_on_device(seed, s);
  std::atomic<int> calls{0};
  graph_builder b(dev());
  b.begin_building();
  launch(b.stream(), cover(kN), graph_kernel("add_one"), y, kN);
  b.callback([&calls] { calls.fetch_add(1); });
  launch(b.stream(), cover(kN), graph_kernel("add_one"), y, kN);
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
  SEED_TRACE();
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

void count_call(void* data) {
  static_cast<std::atomic<int>*>(data)->fetch_add(1);
}

TEST_F(BuilderCallback, FunctionPointerWithTheCallersPointer) {
  std::atomic<int> calls{0};
  graph_builder b(dev());
  b.begin_building();
  b.callback(&count_call, static_cast<void*>(&calls));
  b.callback(&count_call, static_cast<void*>(&calls));
  b.end_building();
  graph exec = b.complete();
  exec.launch(s);
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

}  // namespace
}  // namespace cucore
