// The parts of the graph API that need no GPU: operand rules, empty handles, names. The graph
// behaviour itself is tested on a GPU (tests/gpu/graph_*_test.cpp).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <type_traits>

#include "cucore/error.hpp"
#include "cucore/graph/builder.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"

namespace {

using cucore::memory_operand;

// A buffer already names its owner: a buffer plus an explicit owner is not an operand.
static_assert(
    !std::is_constructible_v<memory_operand, const cucore::buffer&, std::shared_ptr<const void>>);
static_assert(std::is_constructible_v<memory_operand, const cucore::buffer&, std::size_t>);
static_assert(
    std::is_constructible_v<memory_operand, cucore::device_address, std::shared_ptr<const void>>);

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const cucore::invalid_argument& e) {
    return e.what();
  }
  return "(no invalid_argument thrown)";
}

TEST(GraphApi, ClosedBuffersAreRefusedAsOperands) {
  cucore::buffer closed;
  EXPECT_NE(message_of([&] { memory_operand op(closed); }).find("closed or empty"),
            std::string::npos);
  cucore::pinned_buffer pinned;
  EXPECT_NE(message_of([&] { memory_operand op(pinned); }).find("closed or empty"),
            std::string::npos);
}

TEST(GraphApi, RawAddressesCarryTheirExplicitOwner) {
  auto owner = std::make_shared<int>(7);
  memory_operand op(0x1000, owner);
  EXPECT_EQ(op.address(), 0x1000u);
  EXPECT_FALSE(op.is_host());
  EXPECT_EQ(op.known_size(), 0u);
  EXPECT_EQ(op.owner().get(), owner.get());
  EXPECT_EQ(owner.use_count(), 2);

  memory_operand bare(0x2000);
  EXPECT_EQ(bare.owner(), nullptr);

  int host_value = 0;
  memory_operand h = memory_operand::host(&host_value);
  EXPECT_TRUE(h.is_host());
  EXPECT_EQ(h.address(), reinterpret_cast<std::uintptr_t>(&host_value));
}

TEST(GraphApi, EmptyHandlesAreClearErrors) {
  cucore::graph exec;
  EXPECT_FALSE(exec.valid());
  EXPECT_THROW((void)exec.handle(), cucore::error);
  exec.close();
  exec.close();  // idempotent

  cucore::graph_node node;
  EXPECT_FALSE(node.valid());
  EXPECT_NE(message_of([&] { (void)node.handle(); }).find("empty"), std::string::npos);
  EXPECT_NE(message_of([&] { (void)node.empty(); }).find("empty"), std::string::npos);
}

TEST(GraphApi, AClosedBuilderRefusesEverything) {
  cucore::graph_builder b;
  EXPECT_FALSE(b.valid());
  EXPECT_EQ(b.builder_state(), cucore::graph_builder::state::closed);
  EXPECT_NE(message_of([&] { (void)b.graph_definition(); }).find("closed"), std::string::npos);
  EXPECT_NE(message_of([&] { b.begin_building(); }).find("closed"), std::string::npos);
  EXPECT_NE(message_of([&] { b.callback([] {}); }).find("closed"), std::string::npos);
  b.close();
  b.close();  // idempotent
}

TEST(GraphApi, KindsHaveNames) {
  EXPECT_STREQ(cucore::to_string(cucore::graph_node_kind::kernel), "kernel");
  EXPECT_STREQ(cucore::to_string(cucore::graph_node_kind::host_callback), "host_callback");
  EXPECT_STREQ(cucore::to_string(cucore::graph_node_kind::conditional), "conditional");
  EXPECT_STREQ(cucore::to_string(cucore::conditional_kind::while_loop), "while_loop");
  EXPECT_STREQ(cucore::to_string(cucore::conditional_kind::switch_), "switch_");
}

}  // namespace
