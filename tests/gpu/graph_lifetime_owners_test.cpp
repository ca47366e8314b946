// Graph lifetimes (label gpu): where and when the owners go, one user object for nodes with the
// same owners, and failed adds that keep nothing (graph_lifetime_test_support.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
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

namespace cucore {
namespace {

using namespace gpu_testing;             // gpu_test_support.hpp, graph_test_support.hpp
using namespace graph_lifetime_testing;  // graph_lifetime_test_support.hpp

// ---- where and when the owners go
// ----------------------------------------------------------------

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

// How the last holder of a node's owners goes, when no launch still needs them.
enum class last_holder { definition, node, executable };

class OwnersOfTheLastHolder : public GraphLifetime,
                              public ::testing::WithParamInterface<last_holder> {};

// When the last graph that can run a node goes and no launch is in flight, the driver destroys the
// node's user object inside that call: its owners (a callable, and a buffer whose release frees
// device memory) are dropped before the call returns, on the calling thread.
TEST_P(OwnersOfTheLastHolder, AreDroppedBeforeItsDestroyReturnsOnThatThread) {
  auto record = std::make_shared<drop_record>();
  auto pool = std::make_shared<pool_memory_resource>(dev());
  std::optional<buffer> b(std::in_place, kBytes, s(), pool);
  const std::weak_ptr<const void> memory = b->owner();
  std::optional<graph_definition> g(std::in_place, dev());
  std::atomic<int> calls{0};
  // graph_nodes keep their graph alive: held only as long as the case needs them.
  std::optional<graph_node> kernel_node(g->launch(cover(kN), graph_kernel("add_one"), *b, kN));
  std::optional<graph_node> callback_node(
      kernel_node->callback([owner = recorded_owner(record), &calls] { calls.fetch_add(*owner); }));
  b.reset();
  s().synchronize();
  ASSERT_GT(pool->used_bytes(), 0u);
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
  EXPECT_TRUE(memory.expired());
  s().synchronize();
  EXPECT_EQ(pool->used_bytes(), 0u) << "the buffer's memory went back to its pool";
  EXPECT_EQ(calls.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Destroyed, OwnersOfTheLastHolder,
                         ::testing::Values(last_holder::definition, last_holder::node,
                                           last_holder::executable),
                         [](const auto& info) {
                           switch (info.param) {
                             case last_holder::definition:
                               return "Definition";
                             case last_holder::node:
                               return "Node";
                             case last_holder::executable:
                               return "NeverLaunchedExecutable";
                           }
                           return "Unknown";
                         });

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
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!record->dropped.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(record->dropped.load());
  s().synchronize();
  EXPECT_EQ(calls.load(), 1);
}

// A graph destroyed while its thread captures in global mode (the strictest) drops a buffer whose
// release stream is not the captured one: the free runs at once, made in the relaxed capture
// mode, and the capture survives it.
TEST_F(GraphLifetime, OwnersDroppedDuringAGlobalCaptureOfThisThreadLeaveTheCaptureValid) {
  auto pool = std::make_shared<pool_memory_resource>(dev());
  stream other(dev());
  std::optional<buffer> b(std::in_place, kBytes, other, pool);
  const std::weak_ptr<const void> memory = b->owner();
  std::optional<graph_definition> g(std::in_place, dev());
  g->launch(cover(kN), graph_kernel("add_one"), *b, kN);
  b.reset();
  other.synchronize();
  ASSERT_GT(pool->used_bytes(), 0u);

  graph_builder builder(s());
  builder.begin_building(capture_mode::global);
  g.reset();
  EXPECT_TRUE(memory.expired());
  ASSERT_NO_THROW(builder.end_building()) << "the capture was invalidated";
  EXPECT_EQ(builder.graph_definition().node_count(), 0u) << "a free entered the capture";
  builder.close();
  other.synchronize();
  EXPECT_EQ(pool->used_bytes(), 0u);
}

// ---- nodes with the same owners share one user object (one more reference per node)
// ----------

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
    each_round(seed, [&](const std::vector<float>& data, int) {
      EXPECT_TRUE(all_match(launch_with(exec, *in, *out, data, s()), doubled(data)));
    });
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

// ---- failed and refused adds keep nothing
// ---------------------------------------------------------

// The driver refuses a 4-byte memset at an address that is not 4-byte aligned, after cucore has
// prepared the node's attachment.
TEST_F(GraphLifetime, MemsetTheDriverRefusesKeepsNothing) {
  buffer target(kBytes, s());
  auto token = std::make_shared<int>(3);
  const std::weak_ptr<int> wt = token;
  graph_definition g(dev());
  EXPECT_THROW(g.memset_bits(memory_operand(target.address() + 1, std::move(token)), 0u, 4, 16),
               cuda_error);
  EXPECT_TRUE(expires_within(wt)) << "the prepared attachment was not released";
  EXPECT_EQ(g.node_count(), 0u);
  // The graph is still usable.
  g.memset(target, 1.5f, kN);
  graph exec = g.instantiate();
  exec.launch(s());
  const auto got = target.to_vector<float>(s());
  EXPECT_TRUE(all_match(got, std::vector<float>(kN, 1.5f)));
}

// The driver refuses a kernel node with more than 1024 threads a block.
TEST_F(GraphLifetime, KernelNodeTheDriverRefusesKeepsNothing) {
  std::optional<buffer> x(std::in_place, kBytes, s());
  std::optional<buffer> y(std::in_place, kBytes, s());
  std::optional<kernel> k(graph_kernel("twice"));
  const watched_owners owners{{"x", x->owner()}, {"y", y->owner()}, {"the kernel", k->owner()}};
  graph_definition g(dev());
  g.empty();
  const launch_config too_wide{dim3(1), dim3(2048)};
  EXPECT_THROW(g.launch(too_wide, *k, *x, *y, kN), cuda_error);
  x.reset();
  y.reset();
  k.reset();
  EXPECT_TRUE(owners.expire_within());
  EXPECT_EQ(g.node_count(), 1u);
}

// The driver takes the kernel node but refuses its cluster attribute (64 blocks a cluster is past
// every GPU's limit): cucore removes the node again and releases what it had prepared.
TEST_F(GraphLifetime, KernelNodeWhoseClusterTheDriverRefusesKeepsNothing) {
  std::optional<buffer> x(std::in_place, kBytes, s());
  std::optional<kernel> k(graph_kernel("twice"));
  const watched_owners owners{{"x", x->owner()}, {"the kernel", k->owner()}};
  graph_definition g(dev());
  launch_config clustered{dim3(64), dim3(32)};
  clustered.cluster = dim3(64);
  EXPECT_THROW(g.launch(clustered, *k, *x, *x, 0), cuda_error);
  EXPECT_EQ(g.node_count(), 0u) << "the node the driver added was not removed";
  x.reset();
  k.reset();
  EXPECT_TRUE(owners.expire_within());
}

// Adds cucore refuses before calling the driver keep nothing either.
TEST_F(GraphLifetime, AddsCucoreRefusesKeepNothing) {
  std::optional<buffer> small(std::in_place, 64, s());
  std::optional<buffer> big(std::in_place, kBytes, s());
  auto token = std::make_shared<int>(4);
  const watched_owners owners{{"small", small->owner()}, {"big", big->owner()}, {"token", token}};
  graph_definition g(dev());
  // More bytes than the destination holds.
  EXPECT_THROW(g.memcpy(*small, *big, kBytes), invalid_argument);
  // A 3-byte memset element.
  EXPECT_THROW(g.memset_bits(memory_operand(big->address(), token), 0u, 3, 16), invalid_argument);
  // A kernel argument missing (twice takes in, out, n).
  EXPECT_THROW(g.launch(cover(kN), graph_kernel("twice"), *big, kN), invalid_argument);
  // A memset of width 0 with an explicit owner.
  EXPECT_THROW(g.memset(memory_operand(big->address(), token), 0u, 0), invalid_argument);
  EXPECT_EQ(g.node_count(), 0u);
  small.reset();
  big.reset();
  token.reset();
  EXPECT_TRUE(owners.expire_within());
}

}  // namespace
}  // namespace cucore
