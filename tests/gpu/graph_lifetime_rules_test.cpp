// Graph lifetimes (label gpu): memory_operand's rules, executable graph update, capture, driver
// failures, process exit and the release thread (graph_lifetime_test_support.hpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
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

// A buffer already says who owns it: an explicit owner beside it is not a constructor. (A buffer
// and an offset is; a shared_ptr does not convert to the offset.)
static_assert(!std::is_constructible_v<cucore::memory_operand, const cucore::buffer&,
                                       std::shared_ptr<const void>>);
static_assert(std::is_constructible_v<cucore::memory_operand, const cucore::buffer&, std::size_t>);
static_assert(std::is_constructible_v<cucore::memory_operand, cucore::device_address,
                                      std::shared_ptr<const void>>);

namespace cucore {
namespace {

using namespace gpu_testing;             // gpu_test_support.hpp, graph_test_support.hpp
using namespace graph_lifetime_testing;  // graph_lifetime_test_support.hpp

// ---- memory_operand rules
// ------------------------------------------------------------------------

TEST_F(GraphLifetime, ClosedBuffersAreRefusedAsOperands) {
  buffer closed(kBytes, s());
  closed.close();
  buffer open(kBytes, s());
  const buffer never;
  graph_definition g(dev());
  EXPECT_THROW((void)memory_operand{closed}, invalid_argument);
  EXPECT_THROW((void)memory_operand(never, 0), invalid_argument);
  EXPECT_THROW(g.memcpy(closed, open, kBytes), invalid_argument);
  EXPECT_THROW(g.memcpy(open, closed, kBytes), invalid_argument);
  EXPECT_THROW(g.memset(closed, 0u, kN), invalid_argument);
  EXPECT_THROW(g.launch(cover(kN), graph_kernel("twice"), open, closed, kN), invalid_argument);
  EXPECT_EQ(g.node_count(), 0u);
}

// A raw device address with an explicit owner: the graph retains the owner, so the memory outlives
// every buffer object.
TEST_F(GraphLifetime, RawAddressWithAnOwnerRetainsTheOwner) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  buffer in(kBytes, s());
  buffer out(kBytes, s());
  std::optional<buffer> raw(std::in_place, kBytes, s());
  const device_address address = raw->address();
  const std::weak_ptr<const void> w = raw->owner();
  std::optional<graph_definition> g(std::in_place, dev());
  {
    const memory_operand dst(address, raw->owner());
    EXPECT_EQ(dst.address(), address);
    EXPECT_EQ(dst.known_size(), 0u);
    EXPECT_EQ(dst.owner(), raw->owner());
    g->memcpy(dst, in, kBytes)
        .memcpy(out, memory_operand(address + kBytes / 2, raw->owner()), kBytes / 2);
  }  // the operands hold owners too
  raw.reset();
  EXPECT_TRUE(still_alive_after(w)) << "the graph retains the explicit owners";
  graph exec = g->instantiate();
  g.reset();
  each_round(seed, [&](const std::vector<float>& data, int) {
    const auto got = launch_with(exec, in, out, data, s());
    // out's first half gets raw's second half, which is data's second half; the rest is untouched.
    EXPECT_TRUE(all_match(std::vector<float>(got.begin(), got.begin() + kN / 2),
                          std::vector<float>(data.begin() + kN / 2, data.end())));
    EXPECT_TRUE(all_match(std::vector<float>(got.begin() + kN / 2, got.end()),
                          std::vector<float>(kN - kN / 2, kPoison)));
  });
  EXPECT_TRUE(still_alive_after(w));
  exec.close();
  EXPECT_TRUE(expires_within(w));
}

// A raw address without an owner retains nothing: keeping the memory is the caller's job.
TEST_F(GraphLifetime, RawAddressWithoutAnOwnerRetainsNothing) {
  std::optional<buffer> raw(std::in_place, kBytes, s());
  const std::weak_ptr<const void> w = raw->owner();
  graph_definition g(dev());
  const memory_operand op(raw->address());
  EXPECT_EQ(op.owner(), nullptr);
  g.memset(op, 0u, kN);
  g.memcpy(op, memory_operand(raw->address() + kBytes / 2), kBytes / 2);
  EXPECT_EQ(g.node_count(), 2u);
  raw.reset();
  EXPECT_TRUE(expires_within(w)) << "the graph (still alive) retained a raw address's memory";
}

// A buffer at an offset retains the whole allocation; a pinned_buffer source retains the host
// memory; a pageable host source retains its explicit owner.
TEST_F(GraphLifetime, OffsetPinnedAndHostOperandsRetainTheirMemory) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const auto data = round_data(seed, 0);
  const std::size_t half = kBytes / 2;
  buffer out(kBytes, s());
  std::optional<buffer> mid(std::in_place, kBytes, s());
  std::optional<pinned_buffer> pinned(std::in_place, half);
  auto pageable = std::make_shared<std::vector<float>>(data.begin() + kN / 2, data.end());
  std::memcpy(pinned->data(), data.data(), half);
  const watched_owners owners{
      {"mid", mid->owner()}, {"pinned", pinned->owner()}, {"pageable", pageable}};
  std::optional<graph_definition> g(std::in_place, dev());
  {
    const memory_operand mid_second(*mid, half);
    EXPECT_EQ(mid_second.known_size(), half);
    const graph_node first = g->memcpy(*mid, *pinned, half);
    const graph_node second =
        g->memcpy(mid_second, memory_operand::host(pageable->data(), pageable), half);
    g->join({first, second}).memcpy(out, *mid, kBytes);
  }  // the nodes' handles share the graph
  mid.reset();
  pinned.reset();
  pageable.reset();
  EXPECT_TRUE(owners.alive_after());
  graph exec = g->instantiate();
  g.reset();
  for (int round = 0; round < kRounds; ++round) {
    out.fill(kPoison, s());
    exec.launch(s());
    EXPECT_TRUE(all_match(out.to_vector<float>(s()), data)) << "launch " << round;
  }
  exec.close();
  EXPECT_TRUE(owners.expire_within());
}

// ---- executable graph update
// ---------------------------------------------------------------------

// cuda.core's test_graph_update_replaces_attachment_user_objects: the executable graph takes the
// new definition's owners and lets go of the old ones.
TEST_F(GraphLifetime, UpdateTakesTheNewOwnersAndReleasesTheOld) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> old_def(std::in_place, dev());
  sample before = add_sample(*old_def, s());
  graph exec = old_def->instantiate();
  old_def.reset();
  run_sample(exec, before, s(), seed);

  std::optional<graph_definition> new_def(std::in_place, dev());
  sample after = add_sample(*new_def, s());  // same topology, other buffers and callback
  exec.update(*new_def);
  new_def.reset();
  EXPECT_TRUE(after.all_alive()) << "the executable graph holds the new owners";
  EXPECT_TRUE(before.all_expire()) << "the replaced owners were never released";
  const int old_calls = before.calls->load();
  run_sample(exec, after, s(), seed + 1);
  EXPECT_EQ(before.calls->load(), old_calls) << "the old callback ran after the update";
  exec.close();
  EXPECT_TRUE(after.all_expire());
}

// cuda.core's test_failed_graph_update_does_not_adopt_attachments and
// test_failed_graph_update_preserves_active_attachment_ownership.
TEST_F(GraphLifetime, FailedUpdateKeepsTheOwnersTheExecutableHad) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> old_def(std::in_place, dev());
  sample active = add_sample(*old_def, s());
  graph exec = old_def->instantiate();
  old_def.reset();

  std::optional<graph_definition> other(std::in_place, dev());
  sample refused = add_sample(*other, s());
  other->empty();  // another topology
  EXPECT_THROW(exec.update(*other), cuda_error);
  other.reset();
  EXPECT_TRUE(refused.all_expire()) << "a failed update adopted the new owners";
  EXPECT_TRUE(active.all_alive()) << "a failed update released the active owners";
  run_sample(exec, active, s(), seed);
  EXPECT_EQ(refused.calls->load(), 0);
  exec.close();
  EXPECT_TRUE(active.all_expire());
}

// ---- capture
// ---------------------------------------------------------------------------------------

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

// ---- a free never enters a capture
// ---------------------------------------------------------------

// The last owner of a buffer lets go while the buffer's release stream captures (in global mode,
// the strictest): as a graph holding it is destroyed, or by the capturing thread itself. Enqueued
// then, the free would become a node of the user's capture (or invalidate it); it must wait for the
// capture to end, and then happen.
class FreeDuringCapture : public GraphLifetime, public ::testing::WithParamInterface<bool> {};

TEST_P(FreeDuringCapture, WaitsForTheCaptureToEnd) {
  const bool dropped_by_graph = GetParam();
  auto pool = std::make_shared<pool_memory_resource>(dev());
  std::weak_ptr<const void> memory;
  std::optional<buffer> b(std::in_place, kBytes, s(), pool);
  memory = b->owner();
  graph_definition g(dev());
  g.launch(cover(kN), graph_kernel("add_one"), *b, kN);
  if (dropped_by_graph) b.reset();  // the graph holds the memory alone
  s().synchronize();
  ASSERT_GT(pool->used_bytes(), 0u);

  if (!dropped_by_graph) {
    g = graph_definition();  // the buffer becomes the last owner
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (memory.use_count() > 1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(memory.use_count(), 1);
  }

  graph_builder builder(s());
  builder.begin_building(capture_mode::global);
  if (dropped_by_graph) {
    g = graph_definition();  // its destroy drops the last owner, on this thread
  } else {
    b.reset();  // this thread drops the last owner, in its own capture
  }
  ASSERT_TRUE(expires_within(memory));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // time for a free to land

  ASSERT_NO_THROW(builder.end_building()) << "the capture was invalidated";
  EXPECT_EQ(builder.graph_definition().node_count(), 0u) << "a free entered the capture";
  builder.close();

  // After the capture, the memory goes back to the pool.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (pool->used_bytes() != 0 && std::chrono::steady_clock::now() < deadline) {
    s().synchronize();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(pool->used_bytes(), 0u) << "the deferred free never happened";
}

INSTANTIATE_TEST_SUITE_P(LastOwner, FreeDuringCapture, ::testing::Values(true, false),
                         [](const auto& info) {
                           return info.param ? "DroppedByDestroyingTheGraph"
                                             : "DroppedByTheCapturingThread";
                         });

// ---- driver failures never release owners early
// --------------------------------------------------

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
  {
    graph exec = g.instantiate();
    exec.launch(s());
    s().synchronize();
  }
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
  {
    graph exec = def.instantiate();
    exec.launch(s());
    s().synchronize();
  }
  EXPECT_EQ(calls.load(), 5);
  EXPECT_TRUE(still_alive_after(wt)) << "released while the graph lives";
  def = graph_definition();
  EXPECT_TRUE(expires_within(wt));
}

// ---- process exit while owners are being released
// ------------------------------------------------

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
// --------------------------------------------------------

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
