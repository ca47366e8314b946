// Lifetimes of what graph nodes keep alive, node kind by node kind (label gpu; each test skips
// without a device). Every node that references a resource holds its owners in a CUDA user object:
// the owners must outlive every definition and executable graph that can still run the node, and
// must be released once the last of them is gone. The tests drop every host-side owner (buffers,
// events, kernels, callables, user data), before or after instantiation, and then check on fresh
// random data that the graphs still compute the right results.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/object_code.hpp"
#include "cucore/runtime/event.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "graph_lifetime_support.hpp"

namespace cucore {
namespace {

using namespace graph_lifetime_testing;  // graph_lifetime_support.hpp

enum class drop_point { before_instantiate, after_instantiate };

std::string drop_point_name(drop_point p) {
  return p == drop_point::before_instantiate ? "DroppedBeforeInstantiate"
                                             : "DroppedAfterInstantiate";
}

// Instantiates `g`, calling drop() at `point` around it.
template <class Drop>
graph instantiate_dropping_at(drop_point point, const graph_definition& g, Drop&& drop) {
  if (point == drop_point::before_instantiate) drop();
  graph exec = g.instantiate();
  if (point == drop_point::after_instantiate) drop();
  return exec;
}

// A host callback's data: a node copies `in` into pinned `staged`; the callback writes staged[i]
// times a factor into `result` and counts its calls.
struct host_scaled {
  buffer in;
  pinned_buffer staged{kBytes};
  std::vector<float> result = std::vector<float>(kN, kPoison);
  std::atomic<int> calls{0};

  explicit host_scaled(const stream& s) : in(kBytes, s) {}
  float* staged_data() { return staged.span<float>().data(); }

  // Launch `round` of `exec` on `data`: the callback ran once more and wrote data[i] * factor(i).
  template <class Factor>
  void launch_and_check(const graph& exec, const std::vector<float>& data, int round,
                        const stream& s, Factor&& factor) {
    in.copy_from(data, s);
    std::fill(result.begin(), result.end(), kPoison);
    exec.launch(s);
    s.synchronize();
    EXPECT_EQ(calls.load(), round + 1);
    std::vector<float> want(kN);
    for (int i = 0; i < kN; ++i) want[i] = data[i] * factor(i);
    EXPECT_TRUE(all_match(result, want));
  }
};

// ---- each kind of node keeps its owners, dropped before or after instantiation

// A graph of one node kind whose owners the test drops. The constructor adds the nodes to `g` and
// keeps the host-side owners; drop() drops them (the graph holds them alone after that);
// launch_and_check() runs one launch on fresh data and checks its results (by default, out = 2 *
// in). The test GraphLifetimeNodeKind.KeepsItsOwners drives every kind through the same lifetime.
struct node_kind_graph {
  explicit node_kind_graph(const stream& on) : s(on), in(kBytes, on), out(kBytes, on) {}
  node_kind_graph(const node_kind_graph&) = delete;
  node_kind_graph& operator=(const node_kind_graph&) = delete;
  virtual ~node_kind_graph() = default;
  virtual void drop() = 0;
  virtual void launch_and_check(const graph& exec, const std::vector<float>& data, int) {
    EXPECT_TRUE(all_match(launch_with(exec, in, out, data, s), doubled(data)));
  }

  const stream& s;
  buffer in;
  buffer out;
  watched_owners owners;  // what the test dropped: the graphs must keep it
};

// A kernel writes through a buffer argument the test dropped; memcpy nodes move the data in and out
// of buffers the test keeps.
struct kernel_with_buffer_arguments final : node_kind_graph {
  std::optional<buffer> x{std::in_place, kBytes, s};
  std::optional<buffer> y{std::in_place, kBytes, s};
  std::optional<kernel> k{graph_kernel("twice")};
  kernel_with_buffer_arguments(const stream& on, const graph_definition& g, std::uint64_t)
      : node_kind_graph(on) {
    owners = {{"x", x->owner()}, {"y", y->owner()}, {"the kernel", k->owner()}};
    g.memcpy(*x, in, kBytes).launch(cover(kN), *k, *x, *y, kN).memcpy(out, *y, kBytes);
  }
  void drop() override {
    x->close();
    y.reset();
    k.reset();
  }
};

// Both operands of the middle copy are buffers the test dropped.
struct memcpy_between_dropped_buffers final : node_kind_graph {
  std::optional<buffer> a{std::in_place, kBytes, s};
  std::optional<buffer> b{std::in_place, kBytes, s};
  memcpy_between_dropped_buffers(const stream& on, const graph_definition& g, std::uint64_t)
      : node_kind_graph(on) {
    owners = {{"a", a->owner()}, {"b", b->owner()}};
    g.memcpy(*a, in, kBytes).memcpy(*b, *a, kBytes).memcpy(out, *b, kBytes);
  }
  void drop() override {
    a.reset();
    b->close();
  }
  void launch_and_check(const graph& exec, const std::vector<float>& data, int) override {
    EXPECT_TRUE(all_match(launch_with(exec, in, out, data, s), data));
  }
};

// A memset fills a dropped buffer, a kernel adds fresh data to it, a copy brings it back:
// out = a * in + v.
struct memset_of_a_dropped_buffer final : node_kind_graph {
  std::vector<float> constants;
  float a;
  float v;
  std::optional<buffer> y{std::in_place, kBytes, s};
  memset_of_a_dropped_buffer(const stream& on, const graph_definition& g, std::uint64_t seed)
      : node_kind_graph(on),
        constants(random_values<float>(2, seed ^ 0x5eedull)),
        a(constants[0]),
        v(constants[1]) {
    owners = {{"y", y->owner()}};
    g.memset(*y, v, kN)
        .launch(cover(kN), graph_kernel("axpy"), a, in, *y, kN)
        .memcpy(out, *y, kBytes);
  }
  void drop() override { y.reset(); }
  void launch_and_check(const graph& exec, const std::vector<float>& data, int) override {
    const std::vector<float> got = launch_with(exec, in, out, data, s);
    std::vector<float> want(kN);
    for (int i = 0; i < kN; ++i) want[i] = a * data[i] + v;
    EXPECT_TRUE(all_match(got, want, 1e-5f));
  }
};

// The callable of the lambda host callback: a C++ lambda with state of its own (a vector of factors
// and a token) that reads pinned memory a copy node filled and writes host memory.
auto scaling_lambda(std::vector<float> factors, std::shared_ptr<int> token, const float* src,
                    float* dst, std::atomic<int>* calls) {
  return [factors = std::move(factors), token = std::move(token), src, dst, calls] {
    if (*token != 7) return;
    for (std::size_t i = 0; i < factors.size(); ++i) dst[i] = src[i] * factors[i];
    calls->fetch_add(1);
  };
}

struct host_callback_lambda final : node_kind_graph {
  std::vector<float> factors;
  host_scaled host;
  std::optional<decltype(scaling_lambda({}, nullptr, nullptr, nullptr, nullptr))> fn;
  host_callback_lambda(const stream& on, const graph_definition& g, std::uint64_t seed)
      : node_kind_graph(on), factors(random_values<float>(kN, seed ^ 0xfac7ull)), host(s) {
    auto token = std::make_shared<int>(7);
    owners = {{"the lambda's token", token}};
    fn.emplace(scaling_lambda(factors, token, host.staged_data(), host.result.data(), &host.calls));
    token.reset();
    g.memcpy(host.staged, host.in, kBytes).callback(*fn);  // copies the lambda
  }
  void drop() override { fn.reset(); }
  void launch_and_check(const graph& exec, const std::vector<float>& data, int round) override {
    host.launch_and_check(exec, data, round, s, [this](int i) { return factors[i]; });
  }
};

// The kernel comes from an object_code of its own (not the shared test library): dropping the code
// and the kernel must not unload the library while the graph can launch it.
struct kernel_from_its_own_library final : node_kind_graph {
  std::optional<object_code> code{
      object_code::from_cubin(graph_kernels().code(), "lifetime.cubin")};
  std::optional<kernel> k{code->get_kernel("twice")};
  kernel_from_its_own_library(const stream& on, const graph_definition& g, std::uint64_t)
      : node_kind_graph(on) {
    owners = {{"the kernel", k->owner()}};
    g.launch(cover(kN), *k, in, out, kN);
  }
  void drop() override {
    k.reset();
    code.reset();
  }
};

// Which of the definition and the executable graph is destroyed first (the other must still hold
// the owners then).
enum class first_destroyed { definition, executable };

// One row per node kind: a new kind is one more row (and its node_kind_graph).
struct node_kind {
  const char* name;  // the test's name
  std::unique_ptr<node_kind_graph> (*make)(const stream&, const graph_definition&, std::uint64_t);
  first_destroyed first;
  const char* still_held_because;  // the note when the first one is gone
};

void PrintTo(const node_kind& k, std::ostream* os) {
  *os << k.name;
}

template <class T>
std::unique_ptr<node_kind_graph> make_node_kind_graph(const stream& s, const graph_definition& g,
                                                      std::uint64_t seed) {
  return std::make_unique<T>(s, g, seed);
}

const node_kind kNodeKinds[] = {
    {"KernelNodeKeepsItsBufferArguments", &make_node_kind_graph<kernel_with_buffer_arguments>,
     first_destroyed::definition, "the executable graph still runs the kernel"},
    {"MemcpyNodesKeepTheirBufferOperands", &make_node_kind_graph<memcpy_between_dropped_buffers>,
     first_destroyed::executable, "the definition still holds the copies"},
    {"MemsetNodeKeepsItsDestination", &make_node_kind_graph<memset_of_a_dropped_buffer>,
     first_destroyed::definition, ""},
    {"HostCallbackKeepsItsLambda", &make_node_kind_graph<host_callback_lambda>,
     first_destroyed::definition, ""},
    {"KernelNodeKeepsTheKernelsLibraryLoaded", &make_node_kind_graph<kernel_from_its_own_library>,
     first_destroyed::definition, ""},
};

class GraphLifetimeNodeKind
    : public GraphLifetime,
      public ::testing::WithParamInterface<std::tuple<node_kind, drop_point>> {};

// The owners live through instantiation and kRounds launches on fresh data, while either the
// definition or the executable graph is left, and are released once both are gone.
TEST_P(GraphLifetimeNodeKind, KeepsItsOwners) {
  const node_kind& kind = std::get<0>(GetParam());
  std::optional<graph_definition> g(std::in_place, dev());
  const std::unique_ptr<node_kind_graph> nodes = kind.make(s(), *g, seed);

  graph exec = instantiate_dropping_at(std::get<1>(GetParam()), *g, [&] { nodes->drop(); });
  EXPECT_TRUE(nodes->owners.alive_after());
  each_round(seed, [&](const std::vector<float>& data, int round) {
    nodes->launch_and_check(exec, data, round);
  });
  if (kind.first == first_destroyed::definition) {
    g.reset();
    EXPECT_TRUE(nodes->owners.alive_after()) << kind.still_held_because;
    exec.close();
  } else {
    exec.close();
    EXPECT_TRUE(nodes->owners.alive_after()) << kind.still_held_because;
    g.reset();
  }
  EXPECT_TRUE(nodes->owners.expire_within());
}

INSTANTIATE_TEST_SUITE_P(Owners, GraphLifetimeNodeKind,
                         ::testing::Combine(::testing::ValuesIn(kNodeKinds),
                                            ::testing::Values(drop_point::before_instantiate,
                                                              drop_point::after_instantiate)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  drop_point_name(std::get<1>(info.param));
                         });

// The node kinds whose lifetime does not fit the table: two graphs on two streams, and user data
// the graph copied (nothing to watch).
class GraphLifetimeDrop : public GraphLifetime, public ::testing::WithParamInterface<drop_point> {
 protected:
  // Calls drop() at the parameter's point around instantiating `g`.
  template <class Drop>
  graph instantiate_dropping(const graph_definition& g, Drop&& drop) {
    return instantiate_dropping_at(GetParam(), g, std::forward<Drop>(drop));
  }
};

// Graph A (on one stream) computes into a dropped buffer and records a dropped event; graph B (on
// another stream) waits for that event, then copies the result out. A slow kernel makes a missing
// wait visible as wrong results.
TEST_P(GraphLifetimeDrop, EventRecordAndWaitNodesKeepTheirEvent) {
  stream other(dev());
  const kernel spin = test_kernels().get_kernel("spin_scale");
  buffer in(kBytes, s());
  buffer out(kBytes, s());
  std::optional<buffer> y(std::in_place, kBytes, s());
  std::optional<event> e(std::in_place, dev(), event_options{.timing = false});
  const std::weak_ptr<const void> we = e->owner();
  const std::weak_ptr<const void> wy = y->owner();
  std::optional<graph_definition> producer(std::in_place, dev());
  std::optional<graph_definition> consumer(std::in_place, dev());
  producer->launch(cover(kN), spin, in, *y, kN, 2'000'000LL).record(*e);
  consumer->wait(*e).memcpy(out, *y, kBytes);

  std::optional<graph> exec_consumer;
  graph exec_producer = instantiate_dropping(*producer, [&] {
    exec_consumer = consumer->instantiate();
    e.reset();
    y.reset();
  });
  EXPECT_TRUE(still_alive_after(we));
  EXPECT_FALSE(wy.expired());
  each_round(seed, [&](const std::vector<float>& data, int) {
    in.copy_from(data, s());
    out.fill(kPoison, other);
    exec_producer.launch(s());
    exec_consumer->launch(other);
    EXPECT_TRUE(all_match(out.to_vector<float>(other), doubled(data)));
    s().synchronize();
  });
  // The producer's side (the record node) goes first: the wait node still holds the event.
  producer.reset();
  exec_producer.close();
  EXPECT_TRUE(still_alive_after(we)) << "the wait node still holds the event";
  exec_consumer.reset();
  EXPECT_TRUE(still_alive_after(we)) << "the consumer's definition still holds the event";
  consumer.reset();
  EXPECT_TRUE(expires_within(we));
  EXPECT_TRUE(expires_within(wy));
}

// A C function with user data the graph copied: the caller's struct is scribbled over once dropped.
struct scale_job {
  const float* in;
  float* out;
  int n;
  float factor;
  std::atomic<int>* calls;
};

void run_scale_job(void* user_data) {
  scale_job job;
  std::memcpy(&job, user_data, sizeof job);
  for (int i = 0; i < job.n; ++i) job.out[i] = job.in[i] * job.factor;
  job.calls->fetch_add(1);
}

TEST_P(GraphLifetimeDrop, HostCallbackKeepsACopyOfItsUserData) {
  const float factor = random_values<float>(1, seed ^ 0xc0ffeeull)[0];
  host_scaled host(s());
  scale_job job{host.staged_data(), host.result.data(), kN, factor, &host.calls};
  std::optional<graph_definition> g(std::in_place, dev());
  g->memcpy(host.staged, host.in, kBytes)
      .callback(&run_scale_job, std::as_bytes(std::span<const scale_job, 1>(&job, 1)));

  graph exec = instantiate_dropping(*g, [&] { std::memset(&job, 0xff, sizeof job); });
  each_round(seed, [&](const std::vector<float>& data, int round) {
    host.launch_and_check(exec, data, round, s(), [factor](int) { return factor; });
  });
  // The executable graph keeps its own copy once the definition is gone.
  g.reset();
  host.in.copy_from(round_data(seed, kRounds), s());
  exec.launch(s());
  s().synchronize();
  EXPECT_EQ(host.calls.load(), kRounds + 1);
}

INSTANTIATE_TEST_SUITE_P(Owners, GraphLifetimeDrop,
                         ::testing::Values(drop_point::before_instantiate,
                                           drop_point::after_instantiate),
                         [](const ::testing::TestParamInfo<drop_point>& info) {
                           return drop_point_name(info.param);
                         });

// ---- event nodes alone

// One row per event node kind: a graph of that node alone holds the event.
struct event_node_kind {
  const char* name;                                        // the test's name
  void (*prepare)(event& e, const stream& s);              // before the node is added
  void (*add)(const graph_definition& g, const event& e);  // adds the node
  int launches;
};

void PrintTo(const event_node_kind& k, std::ostream* os) {
  *os << k.name;
}

const event_node_kind kEventNodeKinds[] = {
    {"EventRecordNode", [](event&, const stream&) {},
     [](const graph_definition& g, const event& e) { g.record(e); }, 2},
    {"EventWaitNode", [](event& e, const stream& s) { e.record(s); },
     [](const graph_definition& g, const event& e) { g.wait(e).empty(); }, 1},
};

class GraphLifetimeEventNode : public GraphLifetime,
                               public ::testing::WithParamInterface<event_node_kind> {};

TEST_P(GraphLifetimeEventNode, AloneKeepsTheEventAlive) {
  const event_node_kind& kind = GetParam();
  std::optional<event> e(std::in_place, dev());
  kind.prepare(*e, s());
  const std::weak_ptr<const void> we = e->owner();
  std::optional<graph_definition> g(std::in_place, dev());
  kind.add(*g, *e);
  e.reset();
  EXPECT_TRUE(still_alive_after(we));
  graph exec = executable_without(g);
  for (int i = 0; i < kind.launches; ++i) exec.launch(s());
  s().synchronize();
  EXPECT_TRUE(still_alive_after(we));
  exec.close();
  EXPECT_TRUE(expires_within(we));
}

INSTANTIATE_TEST_SUITE_P(Events, GraphLifetimeEventNode, ::testing::ValuesIn(kEventNodeKinds),
                         [](const ::testing::TestParamInfo<event_node_kind>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace cucore
