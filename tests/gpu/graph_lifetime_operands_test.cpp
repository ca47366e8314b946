// What the graph keeps of the memory it is given (label gpu; each test skips without a device):
// adds that the driver or cucore refuse keep nothing; closed buffers are refused as operands; a raw
// device address keeps the owner given with it, or nothing; a buffer at an offset, pinned memory
// and pageable host memory keep their memory for as long as a graph can use it.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "graph_lifetime_support.hpp"

// A buffer already says who owns it: an explicit owner beside it is not a constructor. (A buffer
// and an offset is; a shared_ptr does not convert to the offset.)
static_assert(!std::is_constructible_v<cucore::memory_operand, const cucore::buffer&,
                                       std::shared_ptr<const void>>);
static_assert(std::is_constructible_v<cucore::memory_operand, const cucore::buffer&, std::size_t>);
static_assert(std::is_constructible_v<cucore::memory_operand, cucore::device_address,
                                      std::shared_ptr<const void>>);

namespace cucore {
namespace {

using namespace graph_lifetime_testing;  // graph_lifetime_support.hpp

// ---- failed and refused adds keep nothing

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

// ---- memory_operand rules

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
  graph exec = executable_without(g);
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
  graph exec = executable_without(g);
  for (int round = 0; round < kRounds; ++round) {
    out.fill(kPoison, s());
    exec.launch(s());
    EXPECT_TRUE(all_match(out.to_vector<float>(s()), data)) << "launch " << round;
  }
  exec.close();
  EXPECT_TRUE(owners.expire_within());
}

}  // namespace
}  // namespace cucore
