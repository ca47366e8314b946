// The explicit graph API: instantiation and execution of every node kind (checked on fresh random
// data), conditional nodes, executable graphs, instantiate options, DOT output and clones (label
// gpu; each test skips without a device). Adapted from cuda.core's test_graph_definition*.py and
// test_options.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/event.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "graph_definition_support.hpp"

namespace cucore {
namespace {

using namespace graph_definition_testing;  // graph_definition_support.hpp

// ---- instantiate and execute -------------------------------------------------------------------

TEST_F(GraphDefinition, KernelNodeRunsAxpy) {
  const int n = (1 << 16) + 5;
  axpy_problem p(n, seed, s);
  buffer y2 = upload(p.y0, s);
  graph_definition def(dev());
  def.launch(cover(n), graph_kernel("axpy"), p.a, p.x, p.y, n);
  // The kernel_arguments overload.
  kernel_arguments args(p.a, p.x, y2, n);
  def.launch(cover(n), graph_kernel("axpy"), args);
  graph g = launched(def);
  const std::vector<float> want = p.y_after(1);
  EXPECT_EQ(far_off(p.y.to_vector<float>(s), want), 0);
  EXPECT_EQ(far_off(y2.to_vector<float>(s), want), 0);
}

TEST_F(GraphDefinition, MemsetNodesFillDeviceMemory) {
  std::mt19937_64 gen(seed);
  const std::uint32_t v32 = fresh_nonzero(gen, {});
  const auto v16 = static_cast<std::uint16_t>(1 + v32 % 0xfffe);
  const auto v8 = static_cast<std::uint8_t>(1 + v32 % 0xfe);
  const std::size_t n = 10000 + gen() % 1000;
  const std::size_t off = 1 + gen() % 100;
  const std::size_t count = n / 2;

  buffer b32(n * 4, s);
  buffer b16(n * 2, s);
  buffer b8(n, s);
  const std::size_t pitch = 64, width = 5, rows = 7;  // 4-byte elements: 20 of 64 bytes per row
  buffer b2d(pitch * rows, s);
  b32.fill(std::uint32_t{0}, s);
  b16.fill(std::uint16_t{0}, s);
  b8.fill(std::uint8_t{0}, s);
  b2d.fill(std::uint32_t{0}, s);

  graph_definition def(dev());
  def.memset(b32, v32, n);
  def.memset(memory_operand(b16, off * 2), v16, count);
  def.memset(b8, v8, n);
  def.memset(b2d, v32, width, rows, pitch);
  graph g = launched(def);

  EXPECT_EQ(mismatches(b32.to_vector<std::uint32_t>(s), std::vector<std::uint32_t>(n, v32)), 0);
  std::vector<std::uint16_t> want16(n, 0);
  std::fill_n(want16.begin() + static_cast<std::ptrdiff_t>(off), count, v16);
  EXPECT_EQ(mismatches(b16.to_vector<std::uint16_t>(s), want16), 0);
  EXPECT_EQ(mismatches(b8.to_vector<std::uint8_t>(s), std::vector<std::uint8_t>(n, v8)), 0);
  std::vector<std::uint32_t> want2d(pitch * rows / 4, 0);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < width; ++c) want2d[r * pitch / 4 + c] = v32;
  }
  EXPECT_EQ(mismatches(b2d.to_vector<std::uint32_t>(s), want2d), 0);
}

TEST_F(GraphDefinition, MemcpyNodeCopiesDeviceToDevice) {
  const int n = 30000;
  auto [src0, src] = random_on_device(n, seed, s);
  buffer dst = poisoned(n, s);
  buffer part = poisoned(n, s);
  const std::size_t from = 100, to = 7, count = 1000;
  graph_definition def(dev());
  def.memcpy(dst, src, n * sizeof(float));
  def.memcpy(memory_operand(part, to * sizeof(float)), memory_operand(src, from * sizeof(float)),
             count * sizeof(float));
  graph g = launched(def);
  EXPECT_EQ(mismatches(dst.to_vector<float>(s), src0), 0);
  std::vector<float> want(n, kPoison);
  std::copy_n(src0.begin() + from, count, want.begin() + to);
  EXPECT_EQ(mismatches(part.to_vector<float>(s), want), 0);
}

TEST_F(GraphDefinition, MemcpyNodesCopyThroughPinnedHostMemory) {
  const int n = 20000;
  const std::size_t bytes = n * sizeof(float);
  pinned_buffer up(bytes);
  pinned_buffer down(bytes);
  buffer d(bytes, s);
  auto first = random_values<float>(n, seed);
  std::copy(first.begin(), first.end(), up.span<float>().begin());

  graph_definition def(dev());
  graph_node h2d = def.memcpy(d, up, bytes);
  graph_node k = h2d.launch(cover(n), graph_kernel("add_one"), d, n);
  k.memcpy(down, d, bytes);
  graph g = def.instantiate();

  g.launch(s);
  s.synchronize();
  std::vector<float> got(down.span<float>().begin(), down.span<float>().end());
  std::vector<float> want(n);
  for (int i = 0; i < n; ++i) want[i] = first[i] + 1.0f;
  EXPECT_EQ(mismatches(got, want), 0);

  // The node reads the pinned memory when it runs: new input, new output.
  auto second = random_values<float>(n, seed + 1);
  std::copy(second.begin(), second.end(), up.span<float>().begin());
  g.launch(s);
  s.synchronize();
  got.assign(down.span<float>().begin(), down.span<float>().end());
  for (int i = 0; i < n; ++i) want[i] = second[i] + 1.0f;
  EXPECT_EQ(mismatches(got, want), 0);
}

TEST_F(GraphDefinition, ChildGraphNodesRunTheChild) {
  const int n = 7777;
  axpy_problem p(n, seed, s);
  graph_definition child(dev());
  child.launch(cover(n), graph_kernel("axpy"), p.a, p.x, p.y, n);

  graph_definition def(dev());
  graph_node first = def.embed(child);
  graph_node second = first.embed(child);
  second.launch(cover(n), graph_kernel("add_one"), p.y, n);
  graph g = launched(def);
  std::vector<float> want = p.y_after(2);
  for (float& w : want) w = w + 1.0f;
  EXPECT_EQ(far_off(p.y.to_vector<float>(s), want), 0);
}

TEST_F(GraphDefinition, HostCallbackLambdaRunsAfterTheWorkBeforeIt) {
  const int n = 3000;
  axpy_problem p(n, seed, s);
  pinned_buffer staged(n * sizeof(float));
  std::atomic<int> calls{0};
  std::vector<float> seen;

  graph_definition def(dev());
  graph_node k = def.launch(cover(n), graph_kernel("axpy"), p.a, p.x, p.y, n);
  graph_node copy = k.memcpy(staged, p.y, n * sizeof(float));
  // The callback reads what the copy before it wrote.
  float* staged_data = staged.span<float>().data();
  graph_node cb = copy.callback([&calls, &seen, staged_data, n] {
    seen.assign(staged_data, staged_data + n);
    calls.fetch_add(1);
  });
  EXPECT_EQ(cb.kind(), graph_node_kind::host_callback);
  graph g = def.instantiate();
  const int launches = 3;
  for (int l = 0; l < launches; ++l) g.launch(s);
  s.synchronize();
  EXPECT_EQ(calls.load(), launches);
  EXPECT_EQ(far_off(seen, p.y_after(launches)), 0);
}

struct callback_payload {
  std::atomic<int>* target;
  int add;
};

void add_payload(void* data) {
  callback_payload p{};
  std::memcpy(&p, data, sizeof p);  // the copy need not be aligned for the struct
  p.target->fetch_add(p.add);
}

std::atomic<int> g_null_user_data_calls{0};
void count_null_user_data(void* data) {
  if (data == nullptr) g_null_user_data_calls.fetch_add(1);
}

TEST_F(GraphDefinition, HostCallbackFunctionWithCopiedUserData) {
  std::atomic<int> total{0};
  callback_payload payload{&total, static_cast<int>(1 + seed % 1000)};
  const int add = payload.add;
  graph_definition def(dev());
  graph_node cb = def.callback(&add_payload, std::as_bytes(std::span(&payload, 1)));
  EXPECT_EQ(cb.kind(), graph_node_kind::host_callback);
  // The node holds a copy: changing the original afterwards changes nothing.
  payload.add = -12345;
  payload.target = nullptr;
  // Empty user data passes a null pointer.
  g_null_user_data_calls.store(0);
  cb.callback(&count_null_user_data, std::span<const std::byte>{});
  graph g = launched(def);
  g.launch(s);
  s.synchronize();
  EXPECT_EQ(total.load(), 2 * add);
  EXPECT_EQ(g_null_user_data_calls.load(), 2);
  EXPECT_THROW(def.callback(host_function{nullptr}, nullptr), invalid_argument);
}

TEST_F(GraphDefinition, HostCallbackFunctionWithRawPointer) {
  std::atomic<int> counter{0};
  graph_definition def(dev());
  def.callback(&count_call, &counter).callback(&count_call, &counter);
  graph g = def.instantiate();
  const int launches = 2 + static_cast<int>(fresh_seed() % 4);
  for (int i = 0; i < launches; ++i) g.launch(s);
  s.synchronize();
  EXPECT_EQ(counter.load(), 2 * launches);
}

TEST_F(GraphDefinition, EventRecordAndWaitNodesOrderGraphsOnTwoStreams) {
  // The producer graph runs a slow kernel that writes `mid` and records the event; the consumer
  // graph waits on it and reads `mid`. Without the wait it would read the poison.
  stream s1(dev());
  stream s2(dev());
  stream s3(dev());
  const int n = 1 << 16;
  auto [in0, in] = random_on_device(n, seed, s1);
  buffer mid = poisoned(n, s1);
  buffer out = poisoned(n, s1);
  s1.synchronize();

  event e(dev(), {.timing = false});
  const long long cycles = 20'000'000;  // ~10 ms
  graph_definition producer(dev());
  graph_node record = producer
                          .launch(cover(n), gpu_testing::test_kernels().get_kernel("spin_scale"),
                                  in, mid, n, cycles)
                          .record(e);
  graph_definition consumer(dev());
  graph_node wait = consumer.wait(e);
  wait.launch(cover(n), graph_kernel("twice"), mid, out, n);
  EXPECT_EQ(record.kind(), graph_node_kind::event_record);
  EXPECT_EQ(wait.kind(), graph_node_kind::event_wait);
  EXPECT_EQ(record.event_handle(), e.handle());
  EXPECT_EQ(wait.event_handle(), e.handle());
  graph gp = producer.instantiate();
  graph gc = consumer.instantiate();

  gp.launch(s1);
  gc.launch(s2);
  auto result = out.to_vector<float>(s2);
  std::vector<float> want(n);
  for (int i = 0; i < n; ++i) want[i] = 4.0f * in0[i];
  EXPECT_EQ(mismatches(result, want), 0);
  EXPECT_TRUE(e.query());

  // The host waits on the event the graph records.
  mid.fill(kPoison, s1);
  s1.synchronize();
  gp.launch(s1);
  e.synchronize();
  auto m = mid.to_vector<float>(s3);
  for (int i = 0; i < n; ++i) want[i] = 2.0f * in0[i];
  EXPECT_EQ(mismatches(m, want), 0);
  s1.synchronize();
}

TEST_F(GraphDefinition, AllocatedMemoryIsUsableUntilItsFreeNode) {
  axpy_problem p(12345, seed, s);
  graph_definition def(dev());
  device_address tmp = 0;
  graph_node k = p.add_axpy_through_allocation(def, tmp);
  graph_node freed = k.deallocate(tmp);
  EXPECT_EQ(freed.free_address(), tmp);
  EXPECT_TRUE(as_set(freed.predecessors()) == (std::unordered_set<graph_node>{k}));

  graph g = launched(def);
  EXPECT_EQ(far_off(p.y.to_vector<float>(s), p.y_after(1)), 0);
  // Freed by its node: the graph runs again.
  g.launch(s);
  EXPECT_EQ(far_off(p.y.to_vector<float>(s), p.y_after(2)), 0);
}

TEST_F(GraphDefinition, IfThenRunsItsBodyOnlyWhenTheConditionIsTrue) {
  buffer flag(sizeof(unsigned), s);
  buffer body_count = upload(std::vector<int>{0}, s);
  buffer after_count = upload(std::vector<int>{0}, s);
  graph_definition def(dev());
  graph_condition c = def.create_condition();
  graph_node cond = def.launch(kOne, graph_kernel("set_condition_from"), c, flag).if_then(c);
  cond.branch(0).launch(kOne, graph_kernel("bump"), body_count);
  cond.launch(kOne, graph_kernel("bump"), after_count);
  graph g = def.instantiate();

  const unsigned values[] = {1u, 0u, 2u + static_cast<unsigned>(seed % 1000), 0u};
  int want_body = 0;
  int want_after = 0;
  for (unsigned v : values) {
    flag.copy_from(std::vector<unsigned>{v}, s);
    g.launch(s);
    want_body += v != 0 ? 1 : 0;
    ++want_after;
    EXPECT_EQ(read_int(body_count, s), want_body) << "condition " << v;
    EXPECT_EQ(read_int(after_count, s), want_after) << "condition " << v;
  }
}

TEST_F(GraphDefinition, IfElseRunsOneOfItsBranches) {
  std::mt19937_64 gen(seed);
  const std::uint32_t then_value = fresh_nonzero(gen, {});
  const std::uint32_t else_value = fresh_nonzero(gen, {then_value});
  buffer out(sizeof(std::uint32_t), s);
  for (unsigned v : {1u, 0u}) {
    SCOPED_TRACE("condition " + std::to_string(v));
    graph_definition def(dev());
    graph_condition c = def.create_condition();
    // The condition is set by a kernel that takes it as an argument.
    graph_node node = def.launch(kOne, graph_kernel("set_condition"), c, v).if_else(c);
    node.branch(0).memset(out, then_value, 1);
    node.branch(1).memset(out, else_value, 1);
    graph g = def.instantiate();
    out.fill(std::uint32_t{0}, s);
    g.launch(s);
    EXPECT_EQ(out.to_vector<std::uint32_t>(s).at(0), v != 0 ? then_value : else_value);
  }
}

TEST_F(GraphDefinition, WhileLoopRunsUntilTheBodyClearsTheCondition) {
  const int limit = 1 + static_cast<int>(seed % 50);
  buffer counter = upload(std::vector<int>{0}, s);
  buffer after = upload(std::vector<int>{0}, s);
  graph_definition def(dev());
  graph_condition c = def.create_condition(1u);  // every launch enters the loop
  graph_node loop = def.while_loop(c);
  loop.branch(0).launch(kOne, graph_kernel("count_up"), c, counter, limit);
  loop.launch(kOne, graph_kernel("bump"), after);
  graph g = launched(def);
  EXPECT_EQ(read_int(counter, s), limit);
  EXPECT_EQ(read_int(after, s), 1);
  // The default is set again at the next launch: one more pass, which clears it.
  g.launch(s);
  EXPECT_EQ(read_int(counter, s), limit + 1);
  EXPECT_EQ(read_int(after, s), 2);
}

TEST_F(GraphDefinition, WhileLoopWithAFalseDefaultRunsZeroTimes) {
  buffer counter = upload(std::vector<int>{0}, s);
  buffer after = upload(std::vector<int>{0}, s);
  graph_definition def(dev());
  graph_condition c = def.create_condition(0u);
  graph_node loop = def.while_loop(c);
  loop.branch(0).launch(kOne, graph_kernel("bump"), counter);
  loop.launch(kOne, graph_kernel("bump"), after);
  graph g = launched(def);
  g.launch(s);
  EXPECT_EQ(read_int(counter, s), 0);
  EXPECT_EQ(read_int(after, s), 2);  // the graph did run
}

TEST_F(GraphDefinition, SwitchRunsTheSelectedBranchAndSkipsAllOutOfRange) {
  std::mt19937_64 gen(seed);
  const unsigned count = 4;
  std::vector<std::uint32_t> values;
  for (unsigned i = 0; i < count; ++i) values.push_back(fresh_nonzero(gen, values));
  buffer selector(sizeof(unsigned), s);
  buffer out(sizeof(std::uint32_t), s);

  graph_definition def(dev());
  graph_condition c = def.create_condition();
  // The condition through an explicit kernel_arguments.
  kernel_arguments args;
  args.push(c);
  args.push(selector);
  graph_node sw = def.launch(kOne, graph_kernel("set_condition_from"), args).switch_(c, count);
  for (unsigned i = 0; i < count; ++i) sw.branch(i).memset(out, values[i], 1);
  graph g = def.instantiate();

  std::vector<unsigned> order(count);
  for (unsigned i = 0; i < count; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), gen);
  for (unsigned pick : order) {
    selector.copy_from(std::vector<unsigned>{pick}, s);
    out.fill(std::uint32_t{0}, s);
    g.launch(s);
    EXPECT_EQ(out.to_vector<std::uint32_t>(s).at(0), values[pick]) << "branch " << pick;
  }
  const unsigned out_of_range = count + static_cast<unsigned>(gen() % 1000);
  selector.copy_from(std::vector<unsigned>{out_of_range}, s);
  out.fill(std::uint32_t{0}, s);
  g.launch(s);
  EXPECT_EQ(out.to_vector<std::uint32_t>(s).at(0), 0u) << "value " << out_of_range;
}

// ---- executables, options, DOT and clones ------------------------------------------------------

TEST_F(GraphDefinition, MultipleInstantiationsAreIndependent) {
  const int n = 3333;
  add_one_graph one(dev(), s, n, seed);
  graph g1 = one.def.instantiate();
  graph g2 = one.def.instantiate();
  EXPECT_NE(g1.handle(), g2.handle());
  g1.launch(s);
  g2.launch(s);
  g1.launch(s);
  // Changing the definition changes neither executable; a new one sees the change.
  one.node.launch(cover(n), graph_kernel("add_one"), one.y, n);
  g1.launch(s);
  graph g3 = launched(one.def);
  EXPECT_EQ(one.y_far_off(s, [](float y) { return y + 6.0f; }), 0);
}

TEST_F(GraphDefinition, UploadedGraphRelaunchesAccumulate) {
  const int n = 1000;
  add_one_graph one(dev(), s, n, seed);
  graph g = one.def.instantiate();
  g.upload(s);
  const int launches = 3;
  for (int i = 0; i < launches; ++i) g.launch(s);
  EXPECT_EQ(one.y_far_off(s, [](float y) { return y + 1.0f + 1.0f + 1.0f; }), 0);
}

TEST_F(GraphDefinition, InstantiateWithUploadStreamAndNodePriority) {
  stream other(dev());
  const int n = 1000;
  add_one_graph one(dev(), s, n, seed);
  s.synchronize();  // the upload of y
  graph_instantiate_options options;
  options.upload_stream = stream_ref(other);
  options.use_node_priority = true;
  graph g = one.def.instantiate(options);
  other.synchronize();
  g.launch(s);
  g.launch(s);
  EXPECT_EQ(one.y_far_off(s, [](float y) { return y + 2.0f; }), 0);
}

TEST_F(GraphDefinition, DeviceLaunchableGraphRunsFromTheHost) {
  const int n = 1000;
  add_one_graph one(dev(), s, n, seed);
  graph_instantiate_options options;
  options.device_launch = true;
  graph g = one.def.instantiate(options);
  g.upload(s);
  g.launch(s);
  EXPECT_EQ(one.y_far_off(s, [](float y) { return y + 1.0f; }), 0);
}

TEST_F(GraphDefinition, AutoFreeOnLaunchRelaunchesAnUnfreedAllocation) {
  axpy_problem p(5000, seed, s);
  graph_definition def(dev());
  device_address tmp = 0;
  p.add_axpy_through_allocation(def, tmp);  // no free
  graph_instantiate_options options;
  options.auto_free_on_launch = true;
  graph g = launched(def, options);
  g.launch(s);  // frees the first launch's allocation first
  EXPECT_EQ(far_off(p.y.to_vector<float>(s), p.y_after(2)), 0);
  // The last launch's allocation stays allocated until something frees it (destroying the graph
  // does not): a graph of one free node does, so the test leaks nothing (memcheck --leak-check).
  graph_definition release(dev());
  release.deallocate(tmp);
  release.instantiate().launch(s);
  s.synchronize();
}

TEST_F(GraphDefinition, DebugDotPrintWritesAGraph) {
  buffer y(4096, s);
  graph_definition def(dev());
  def.launch(cover(1024), graph_kernel("add_one"), y, 1024)
      .memset(y, std::uint32_t{3}, 1024)
      .if_then(def.create_condition(1u));
  const auto dir = std::filesystem::temp_directory_path();
  const auto plain = dir / ("cucore-graph-def-" + std::to_string(seed) + ".dot");
  const auto detailed = dir / ("cucore-graph-def-" + std::to_string(seed) + "-verbose.dot");
  def.debug_dot_print(plain);
  def.debug_dot_print(detailed, graph_dot_options{.verbose = true,
                                                  .kernel_node_params = true,
                                                  .memset_node_params = true,
                                                  .handles = true,
                                                  .conditional_node_params = true});
  const std::string a = read_text(plain);
  const std::string b = read_text(detailed);
  std::filesystem::remove(plain);
  std::filesystem::remove(detailed);
  EXPECT_NE(a.find("digraph"), std::string::npos) << a;
  EXPECT_NE(b.find("digraph"), std::string::npos) << b;
  EXPECT_GT(b.size(), a.size()) << "the options add detail";
  EXPECT_THROW(def.debug_dot_print(dir / "no-such-directory-cucore" / "x.dot"), error);
}

TEST_F(GraphDefinition, CloneIsIndependent) {
  const int n = 2000;
  auto y0 = random_values<float>(n, seed);
  buffer y = upload(y0, s);
  graph_definition def(dev());
  graph_node last = def.launch(cover(n), graph_kernel("add_one"), y, n)
                        .launch(cover(n), graph_kernel("add_one"), y, n)
                        .launch(cover(n), graph_kernel("add_one"), y, n);
  graph_definition copy = def.clone();
  EXPECT_FALSE(copy == def);
  EXPECT_NE(copy.handle(), def.handle());
  EXPECT_EQ(copy.node_count(), 3u);
  EXPECT_EQ(copy.edges().size(), 2u);
  for (const graph_node& node : copy.nodes()) {
    EXPECT_TRUE(node.graph() == copy);
    EXPECT_EQ(node.kind(), graph_node_kind::kernel);
  }

  // Destroy the clone's last node: the original keeps all three.
  auto nodes = copy.nodes();
  auto tail = std::find_if(nodes.begin(), nodes.end(),
                           [](const graph_node& node) { return node.successors().empty(); });
  ASSERT_NE(tail, nodes.end());
  tail->destroy();
  EXPECT_EQ(copy.node_count(), 2u);
  EXPECT_EQ(def.node_count(), 3u);
  EXPECT_TRUE(last.valid());

  graph original = def.instantiate();
  graph cloned = copy.instantiate();
  original.launch(s);
  std::vector<float> want(n);
  for (int i = 0; i < n; ++i) want[i] = y0[i] + 3.0f;
  EXPECT_EQ(far_off(y.to_vector<float>(s), want), 0);
  cloned.launch(s);
  for (int i = 0; i < n; ++i) want[i] = y0[i] + 5.0f;
  EXPECT_EQ(far_off(y.to_vector<float>(s), want), 0);

  // And the other way round.
  last.destroy();
  EXPECT_EQ(def.node_count(), 2u);
  EXPECT_EQ(copy.node_count(), 2u);
}

}  // namespace
}  // namespace cucore
