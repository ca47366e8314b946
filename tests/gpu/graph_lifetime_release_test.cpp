// Where, when and how graph nodes' owners are released (label gpu; each test skips without a
// device): on the thread that destroys the last holder when no launch needs them, later on the
// release thread otherwise; never as a free inside a stream capture; never early when a driver
// call fails; cleanly while the process exits; and every one of them in the end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/graph/builder.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "graph_lifetime_support.hpp"

namespace cucore {
namespace {

using namespace graph_lifetime_testing;  // graph_lifetime_support.hpp

// ---- where and when the owners go

// The thread a watched owner was dropped on. Shared with the owner's deleter, so a drop that comes
// later than the test expects still has somewhere to write.
struct drop_record {
  std::atomic<bool> dropped{false};
  std::thread::id thread;
};

std::shared_ptr<int> recorded_owner(const std::shared_ptr<drop_record>& record) {
  return std::shared_ptr<int>(new int(1), [record](int* p) {
    record->thread = std::this_thread::get_id();
    record->dropped.store(true);
    delete p;
  });
}

// A buffer allocated on `on` from a pool of its own, whose used bytes tell whether its memory was
// freed, and a weak reference to its owner.
struct pooled_buffer {
  std::shared_ptr<pool_memory_resource> pool;
  std::optional<buffer> b;
  std::weak_ptr<const void> memory;

  pooled_buffer(const device& dev, const stream& on)
      : pool(std::make_shared<pool_memory_resource>(dev)),
        b(std::in_place, kBytes, on, pool),
        memory(b->owner()) {}
  // An add_one kernel node of `g` over the buffer.
  graph_node add_kernel_to(const graph_definition& g) const {
    return g.launch(cover(kN), graph_kernel("add_one"), *b, kN);
  }
};

// Runs during() inside a global capture (the strictest mode) on `s`, which must survive it with no
// node added: no free entered it.
template <class During>
void capture_globally_around(const stream& s, During&& during) {
  graph_builder builder(s);
  builder.begin_building(capture_mode::global);
  during();
  ASSERT_NO_THROW(builder.end_building()) << "the capture was invalidated";
  EXPECT_EQ(builder.graph_definition().node_count(), 0u) << "a free entered the capture";
  builder.close();
}

// How the last holder of a node's owners goes, when no launch still needs them.
enum class last_holder { definition, node, executable };

class OwnersOfTheLastHolder : public GraphLifetime,
                              public ::testing::WithParamInterface<last_holder> {};

// When the last graph that can run a node goes and no launch is in flight, the driver destroys the
// node's user object inside that call: its owners (a callable, and a buffer whose release frees
// device memory) are dropped before the call returns, on the calling thread.
TEST_P(OwnersOfTheLastHolder, AreDroppedBeforeItsDestroyReturnsOnThatThread) {
  auto record = std::make_shared<drop_record>();
  pooled_buffer pooled(dev(), s());
  std::optional<graph_definition> g(std::in_place, dev());
  std::atomic<int> calls{0};
  // graph_nodes keep their graph alive: held only as long as the case needs them.
  std::optional<graph_node> kernel_node(pooled.add_kernel_to(*g));
  std::optional<graph_node> callback_node(
      kernel_node->callback([owner = recorded_owner(record), &calls] { calls.fetch_add(*owner); }));
  pooled.b.reset();
  s().synchronize();
  ASSERT_GT(pooled.pool->used_bytes(), 0u);
  std::optional<graph> exec;
  switch (GetParam()) {
    case last_holder::definition:
      kernel_node.reset();
      callback_node.reset();
      g.reset();
      break;
    case last_holder::node:
      callback_node->destroy();
      kernel_node->destroy();
      ASSERT_EQ(g->node_count(), 0u);
      break;
    case last_holder::executable:
      exec.emplace(g->instantiate());
      kernel_node.reset();
      callback_node.reset();
      g.reset();
      ASSERT_FALSE(record->dropped.load()) << "the executable graph holds the owners";
      exec.reset();
      break;
  }
  ASSERT_TRUE(record->dropped.load()) << "the owners were not dropped before the call returned";
  EXPECT_EQ(record->thread, std::this_thread::get_id());  // written before `dropped`
  EXPECT_TRUE(pooled.memory.expired());
  s().synchronize();
  EXPECT_EQ(pooled.pool->used_bytes(), 0u) << "the buffer's memory went back to its pool";
  EXPECT_EQ(calls.load(), 0);
}

std::string last_holder_name(last_holder h) {
  static constexpr const char* kNames[] = {"Definition", "Node", "NeverLaunchedExecutable"};
  return kNames[static_cast<int>(h)];
}

INSTANTIATE_TEST_SUITE_P(Destroyed, OwnersOfTheLastHolder,
                         ::testing::Values(last_holder::definition, last_holder::node,
                                           last_holder::executable),
                         [](const auto& info) { return last_holder_name(info.param); });

// After a launch, the driver may destroy the user objects later, on a thread of its own: the
// owners then reach the release thread, and still go.
TEST_F(GraphLifetime, OwnersOfALaunchedExecutableGoAfterItIsDestroyed) {
  auto record = std::make_shared<drop_record>();
  std::atomic<int> calls{0};
  std::optional<graph> exec;
  {
    graph_definition g(dev());
    g.callback([owner = recorded_owner(record), &calls] { calls.fetch_add(*owner); });
    exec.emplace(g.instantiate());
  }
  exec->launch(s());
  exec.reset();  // the launch may still be in flight
  EXPECT_TRUE(holds_within([&record] { return record->dropped.load(); }));
  s().synchronize();
  EXPECT_EQ(calls.load(), 1);
}

// A graph destroyed while its thread captures in global mode (the strictest) drops a buffer whose
// release stream is not the captured one: the free runs at once, made in the relaxed capture
// mode, and the capture survives it.
TEST_F(GraphLifetime, OwnersDroppedDuringAGlobalCaptureOfThisThreadLeaveTheCaptureValid) {
  stream other(dev());
  pooled_buffer pooled(dev(), other);
  std::optional<graph_definition> g(std::in_place, dev());
  pooled.add_kernel_to(*g);
  pooled.b.reset();
  other.synchronize();
  ASSERT_GT(pooled.pool->used_bytes(), 0u);

  ASSERT_NO_FATAL_FAILURE(capture_globally_around(s(), [&] {
    g.reset();
    EXPECT_TRUE(pooled.memory.expired());
  }));
  other.synchronize();
  EXPECT_EQ(pooled.pool->used_bytes(), 0u);
}

// ---- a free never enters a capture

// The last owner of a buffer lets go while the buffer's release stream captures (in global mode,
// the strictest): as a graph holding it is destroyed, or by the capturing thread itself. Enqueued
// then, the free would become a node of the user's capture (or invalidate it); it must wait for the
// capture to end, and then happen.
class FreeDuringCapture : public GraphLifetime, public ::testing::WithParamInterface<bool> {};

TEST_P(FreeDuringCapture, WaitsForTheCaptureToEnd) {
  const bool dropped_by_graph = GetParam();
  pooled_buffer pooled(dev(), s());
  graph_definition g(dev());
  pooled.add_kernel_to(g);
  if (dropped_by_graph) pooled.b.reset();  // the graph holds the memory alone
  s().synchronize();
  ASSERT_GT(pooled.pool->used_bytes(), 0u);

  if (!dropped_by_graph) {
    g = graph_definition();  // the buffer becomes the last owner
    holds_within([&pooled] { return pooled.memory.use_count() <= 1; });
    ASSERT_EQ(pooled.memory.use_count(), 1);
  }

  ASSERT_NO_FATAL_FAILURE(capture_globally_around(s(), [&] {
    if (dropped_by_graph) {
      g = graph_definition();  // its destroy drops the last owner, on this thread
    } else {
      pooled.b.reset();  // this thread drops the last owner, in its own capture
    }
    ASSERT_TRUE(expires_within(pooled.memory));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // time for a free to land
  }));

  // After the capture, the memory goes back to the pool.
  holds_within([&] {
    s().synchronize();
    return pooled.pool->used_bytes() == 0;
  });
  EXPECT_EQ(pooled.pool->used_bytes(), 0u) << "the deferred free never happened";
}

INSTANTIATE_TEST_SUITE_P(LastOwner, FreeDuringCapture, ::testing::Values(true, false),
                         [](const auto& info) {
                           return info.param ? "DroppedByDestroyingTheGraph"
                                             : "DroppedByTheCapturingThread";
                         });

// ---- driver failures never release owners early

// One launch of a new executable graph of `def`, waited for.
void launch_once(const graph_definition& def, const stream& s) {
  graph exec = def.instantiate();
  exec.launch(s);
  s.synchronize();
}

// A node whose cuGraphDestroyNode fails is still there and still runs: its owners stay.
TEST_F(GraphLifetime, AFailedNodeDestroyKeepsTheNodeAndItsOwners) {
  auto token = std::make_shared<int>(5);
  const std::weak_ptr<int> wt = token;
  std::atomic<int> calls{0};
  graph_definition g(dev());
  graph_node n = g.callback([token, &calls] { calls.fetch_add(*token); });
  token.reset();
  {
    fail_nth_call<&detail::driver_api::cuGraphDestroyNode> fault(1);
    EXPECT_THROW(n.destroy(), cuda_error);
    EXPECT_TRUE(decltype(fault)::fired());
  }
  EXPECT_EQ(g.node_count(), 1u);
  EXPECT_TRUE(still_alive_after(wt));
  launch_once(g, s());
  EXPECT_EQ(calls.load(), 5) << "the node runs";
  n.destroy();  // for real now
  EXPECT_EQ(g.node_count(), 0u);
  EXPECT_TRUE(expires_within(wt));
}

// The node went but its graph's reference could not be released: the owners stay with the graph
// until it goes, never released early.
TEST_F(GraphLifetime, AFailedReleaseLeavesTheOwnersWithTheGraph) {
  auto token = std::make_shared<int>(5);
  const std::weak_ptr<int> wt = token;
  graph_definition g(dev());
  {
    graph_node n = g.callback([token] { (void)*token; });
    token.reset();
    fail_nth_call<&detail::driver_api::cuGraphReleaseUserObject> fault(1);
    EXPECT_THROW(n.destroy(), cuda_error);
    EXPECT_TRUE(decltype(fault)::fired());
  }  // (a graph_node keeps its graph alive)
  EXPECT_EQ(g.node_count(), 0u) << "the node is gone";
  EXPECT_TRUE(still_alive_after(wt));
  g = graph_definition();
  EXPECT_TRUE(expires_within(wt));
}

// A captured callback whose host node cannot be identified (cuStreamGetCaptureInfo fails right
// after it) stays with the captured graph, attached to no node, as long as the graph lives.
TEST_F(GraphLifetime, ACallbackWhoseNodeCannotBeFoundStaysWithTheGraph) {
  auto token = std::make_shared<int>(5);
  const std::weak_ptr<int> wt = token;
  std::atomic<int> calls{0};
  graph_builder b(s());
  b.begin_building();
  {
    fail_nth_call<&detail::driver_api::cuStreamGetCaptureInfo> fault(1);
    b.callback([token, &calls] { calls.fetch_add(*token); });
    EXPECT_TRUE(decltype(fault)::fired());
  }
  token.reset();
  b.end_building();
  graph_definition def = b.graph_definition();
  b.close();
  launch_once(def, s());
  EXPECT_EQ(calls.load(), 5);
  EXPECT_TRUE(still_alive_after(wt)) << "released while the graph lives";
  def = graph_definition();
  EXPECT_TRUE(expires_within(wt));
}

// ---- process exit while owners are being released

// Thousands of owners (buffers, whose release calls cuMemFreeAsync) reach the release thread just
// as the process exits, with executable graphs still running and definitions alive in statics.
// The release must never race the driver's teardown: no failed driver call, a clean exit.
[[noreturn]] void exit_while_releasing() {
  static std::vector<graph_definition> kept;  // destroyed during exit, while the driver lives
  device dev(0);
  stream s(dev);
  const kernel k = graph_kernel("add_one");
  std::vector<graph_definition> defs;
  std::vector<graph> execs;
  for (int i = 0; i < 3000; ++i) {
    buffer b(4096, s);
    graph_definition g(dev);
    g.launch(cover(1024), k, b, 1024).memset(b, std::uint32_t{7}, 1024);
    if (i % 8 == 0) {
      execs.push_back(g.instantiate());
      execs.back().launch(s);
    }
    (i % 10 == 0 ? kept : defs).push_back(std::move(g));
  }
  defs.clear();
  execs.clear();
  std::exit(0);
}

class GraphProcessExit : public gpu_testing::gpu_test {
 protected:
  void SetUp() override {
    gpu_testing::gpu_test::SetUp();
    GTEST_FLAG_SET(death_test_style, "threadsafe");  // the release thread runs
  }
};

TEST_F(GraphProcessExit, WhileTheReleaseThreadWorksIsClean) {
  if (launches_may_block()) GTEST_SKIP() << "a death test's child under a CUDA tool may hang";
  EXPECT_EXIT(exit_while_releasing(), ::testing::ExitedWithCode(0),
              ::testing::Not(::testing::HasSubstr("failed")));
}

// ---- the release thread drains everything

TEST_F(GraphLifetime, ManyGraphsReleaseEveryOwner) {
  constexpr int kGraphs = 200;
  std::atomic<int> calls{0};
  std::vector<std::weak_ptr<int>> tokens;
  std::vector<std::weak_ptr<const void>> buffers;
  std::vector<graph_definition> defs;
  std::vector<graph> execs;
  int launched = 0;
  for (int i = 0; i < kGraphs; ++i) {
    auto token = std::make_shared<int>(1);
    buffer target(256, s());
    tokens.push_back(token);
    buffers.push_back(target.owner());
    graph_definition g(dev());
    g.memset(target, static_cast<std::uint32_t>(i), 64).callback([token, &calls] {
      calls.fetch_add(*token);
    });
    if (i % 2 == 0) {
      execs.push_back(g.instantiate());
      execs.back().launch(s());
      ++launched;
    }
    defs.push_back(std::move(g));
  }
  // Everything goes while launches may still be in flight.
  defs.clear();
  execs.clear();
  s().synchronize();
  EXPECT_EQ(calls.load(), launched);
  int never_released = 0;
  for (int i = 0; i < kGraphs; ++i) {
    never_released += !expires_within(tokens[i]);
    never_released += !expires_within(buffers[i]);
  }
  EXPECT_EQ(never_released, 0);
}

}  // namespace
}  // namespace cucore
