// Lifetimes of what graph nodes keep alive (label gpu; each test skips without a device). Every
// node that references a resource holds its owners in a CUDA user object: the owners must outlive
// every definition, clone, embed, executable graph and in-flight launch that can still run the
// node, and must be released once the last of them is gone — not before, and not never. The tests
// drop every host-side owner (buffers, events, kernels, callables, user data) and then check, on
// fresh random data, that the graphs still compute the right results, and watch the owners through
// weak references.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
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

using namespace gpu_testing;  // gpu_test_support.hpp, graph_test_support.hpp

constexpr int kN = 3000;  // not a multiple of the block size
constexpr std::size_t kBytes = kN * sizeof(float);
constexpr int kRounds = 3;  // launches per executable graph, each on fresh data

std::string seed_note(std::uint64_t seed) {
  return "seed " + std::to_string(seed);
}

// Fresh data for launch `round`.
std::vector<float> round_data(std::uint64_t seed, int round) {
  return random_values<float>(kN, seed + 0x9e3779b97f4a7c15ull * static_cast<unsigned>(round + 1));
}

// Every element matches (exactly, or within a relative tolerance).
::testing::AssertionResult all_match(const std::vector<float>& got, const std::vector<float>& want,
                                     float tolerance = 0.0f) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " values, expected " << want.size();
  }
  std::size_t bad = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float limit = tolerance * std::max(1.0f, std::fabs(want[i]));
    if (!(std::fabs(got[i] - want[i]) <= limit)) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad != 0) {
    return ::testing::AssertionFailure()
           << bad << " of " << got.size() << " values differ; first at " << first << ": got "
           << got[first] << ", expected " << want[first];
  }
  return ::testing::AssertionSuccess();
}

// Calls launch_and_check(data, round) for kRounds launches, each on fresh data and under a trace
// naming the launch.
template <class F>
void each_round(std::uint64_t seed, F&& launch_and_check) {
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("launch " + std::to_string(round));
    launch_and_check(round_data(seed, round), round);
  }
}

// One launch of `exec` on `s`: `in` gets `data` and `out` is poisoned first. Returns what out
// holds after the launch.
std::vector<float> launch_with(const graph& exec, buffer& in, buffer& out,
                               const std::vector<float>& data, const stream& s) {
  in.copy_from(data, s);
  out.fill(kPoison, s);
  exec.launch(s);
  return out.to_vector<float>(s);
}

class GraphLifetime : public gpu_testing::gpu_test {
 protected:
  void SetUp() override {
    gpu_testing::gpu_test::SetUp();
    if (IsSkipped()) return;
    dev_.emplace(0);
    stream_.emplace(*dev_);
  }
  void TearDown() override {
    if (stream_) stream_->synchronize();
  }
  const device& dev() const { return *dev_; }
  const stream& s() const { return *stream_; }

 private:
  std::optional<device> dev_;
  std::optional<stream> stream_;
};

// For tests that watch one buffer, `z`, used by several nodes (copied from `in`, doubled into
// `out` by `k`): the test drops `z` and watches it through `wz`. A trace names the seed of the
// data.
class GraphLifetimeWatched : public GraphLifetime {
 protected:
  void SetUp() override {
    GraphLifetime::SetUp();
    if (IsSkipped()) return;
    trace_.emplace(__FILE__, __LINE__, seed_note(seed));
    in.emplace(kBytes, s());
    out.emplace(kBytes, s());
    z.emplace(kBytes, s());
    wz = z->owner();
    k = graph_kernel("twice");
  }

  const std::uint64_t seed = fresh_seed();
  std::optional<buffer> in;
  std::optional<buffer> out;
  std::optional<buffer> z;
  std::weak_ptr<const void> wz;
  kernel k;

 private:
  std::optional<::testing::ScopedTrace> trace_;
};

// ---- one graph, many views: a sample whose owners the test drops
// ----------------------------------

// in (kept) → x (dropped) → twice → y (dropped) → out (kept) → a callback that counts its calls and
// holds a token nobody else holds. After add_sample returns, x, y, the kernel object and the token
// are owned by the graph alone.
struct sample {
  buffer in;
  buffer out;
  std::weak_ptr<const void> x;
  std::weak_ptr<const void> y;
  std::weak_ptr<const void> kernel;
  std::weak_ptr<int> token;
  std::unique_ptr<std::atomic<int>> calls = std::make_unique<std::atomic<int>>(0);

  watched_owners owners() const {
    return {{"x", x}, {"y", y}, {"the kernel", kernel}, {"the callback's token", token}};
  }
  // After a moment in which the release thread could have dropped them.
  ::testing::AssertionResult all_alive() const { return owners().alive_after(); }
  ::testing::AssertionResult all_expire() const { return owners().expire_within(); }
};

sample add_sample(const graph_definition& g, const stream& s) {
  sample out;
  out.in = buffer(kBytes, s);
  out.out = buffer(kBytes, s);
  buffer x(kBytes, s);
  buffer y(kBytes, s);
  kernel k = graph_kernel("twice");
  auto token = std::make_shared<int>(42);
  out.x = x.owner();
  out.y = y.owner();
  out.kernel = k.owner();
  out.token = token;
  std::atomic<int>* calls = out.calls.get();
  g.memcpy(x, out.in, kBytes)
      .launch(cover(kN), k, x, y, kN)
      .memcpy(out.out, y, kBytes)
      .callback([token, calls] {
        if (*token == 42) calls->fetch_add(1);
      });
  return out;  // x, y, k and token go out of scope: the graph holds them alone
}

// Launches `exec` kRounds times on fresh data: out must be 2 * in and the callback must run once
// per launch.
void run_sample(const graph& exec, sample& smp, const stream& s, std::uint64_t seed) {
  each_round(seed, [&](const std::vector<float>& data, int) {
    smp.in.copy_from(data, s);
    smp.out.fill(kPoison, s);
    const int before = smp.calls->load();
    exec.launch(s);
    const std::vector<float> got = smp.out.to_vector<float>(s);
    EXPECT_TRUE(all_match(got, doubled(data)));
    EXPECT_EQ(smp.calls->load(), before + 1);
  });
}

// run_sample on a new executable graph of `def`, destroyed again at the end.
void run_new_executable(const graph_definition& def, sample& smp, const stream& s,
                        std::uint64_t seed) {
  graph exec = def.instantiate();
  run_sample(exec, smp, s, seed);
}

// ---- each kind of node keeps its owners, dropped before or after instantiation
// -------------------

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

// A graph of one node kind whose owners the test drops. The constructor allocates on `s`, adds
// the nodes to `g` and keeps the host-side owners; drop() drops them (the graph holds them alone
// after that); launch_and_check() runs one launch on fresh data and checks its results. The test
// GraphLifetimeNodeKind.KeepsItsOwners drives every kind through the same lifetime.
struct node_kind_graph {
  explicit node_kind_graph(const stream& on) : s(on) {}
  node_kind_graph(const node_kind_graph&) = delete;
  node_kind_graph& operator=(const node_kind_graph&) = delete;
  virtual ~node_kind_graph() = default;
  virtual void drop() = 0;
  virtual void launch_and_check(const graph& exec, const std::vector<float>& data, int round) = 0;

  const stream& s;
  watched_owners owners;  // what the test dropped: the graphs must keep it
};

// A kernel writes through a buffer argument the test dropped; memcpy nodes move the data in and out
// of buffers the test keeps.
struct kernel_with_buffer_arguments final : node_kind_graph {
  buffer in;
  buffer out;
  std::optional<buffer> x;
  std::optional<buffer> y;
  std::optional<kernel> k;
  kernel_with_buffer_arguments(const stream& on, const graph_definition& g, std::uint64_t)
      : node_kind_graph(on),
        in(kBytes, s),
        out(kBytes, s),
        x(std::in_place, kBytes, s),
        y(std::in_place, kBytes, s),
        k(graph_kernel("twice")) {
    owners = {{"x", x->owner()}, {"y", y->owner()}, {"the kernel", k->owner()}};
    g.memcpy(*x, in, kBytes).launch(cover(kN), *k, *x, *y, kN).memcpy(out, *y, kBytes);
  }
  void drop() override {
    x->close();
    y.reset();
    k.reset();
  }
  void launch_and_check(const graph& exec, const std::vector<float>& data, int) override {
    EXPECT_TRUE(all_match(launch_with(exec, in, out, data, s), doubled(data)));
  }
};

// Both operands of the middle copy are buffers the test dropped.
struct memcpy_between_dropped_buffers final : node_kind_graph {
  buffer in;
  buffer out;
  std::optional<buffer> a;
  std::optional<buffer> b;
  memcpy_between_dropped_buffers(const stream& on, const graph_definition& g, std::uint64_t)
      : node_kind_graph(on),
        in(kBytes, s),
        out(kBytes, s),
        a(std::in_place, kBytes, s),
        b(std::in_place, kBytes, s) {
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
  buffer in;
  buffer out;
  std::optional<buffer> y;
  memset_of_a_dropped_buffer(const stream& on, const graph_definition& g, std::uint64_t seed)
      : node_kind_graph(on),
        constants(random_values<float>(2, seed ^ 0x5eedull)),
        a(constants[0]),
        v(constants[1]),
        in(kBytes, s),
        out(kBytes, s),
        y(std::in_place, kBytes, s) {
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
  buffer in;
  pinned_buffer staged;
  std::vector<float> result;
  std::atomic<int> calls{0};
  std::optional<decltype(scaling_lambda({}, nullptr, nullptr, nullptr, nullptr))> fn;
  host_callback_lambda(const stream& on, const graph_definition& g, std::uint64_t seed)
      : node_kind_graph(on),
        factors(random_values<float>(kN, seed ^ 0xfac7ull)),
        in(kBytes, s),
        staged(kBytes),
        result(kN, kPoison) {
    auto token = std::make_shared<int>(7);
    owners = {{"the lambda's token", token}};
    fn.emplace(scaling_lambda(factors, token, staged.span<float>().data(), result.data(), &calls));
    token.reset();
    g.memcpy(staged, in, kBytes).callback(*fn);  // copies the lambda
  }
  void drop() override { fn.reset(); }
  void launch_and_check(const graph& exec, const std::vector<float>& data, int round) override {
    in.copy_from(data, s);
    std::fill(result.begin(), result.end(), kPoison);
    exec.launch(s);
    s.synchronize();
    EXPECT_EQ(calls.load(), round + 1);
    std::vector<float> want(kN);
    for (int i = 0; i < kN; ++i) want[i] = data[i] * factors[i];
    EXPECT_TRUE(all_match(result, want));
  }
};

// The kernel comes from an object_code of its own (not the shared test library): dropping the code
// and the kernel must not unload the library while the graph can launch it.
struct kernel_from_its_own_library final : node_kind_graph {
  std::optional<object_code> code;
  std::optional<kernel> k;
  buffer in;
  buffer out;
  kernel_from_its_own_library(const stream& on, const graph_definition& g, std::uint64_t)
      : node_kind_graph(on),
        code(object_code::from_cubin(graph_kernels().code(), "lifetime.cubin")),
        k(code->get_kernel("twice")),
        in(kBytes, s),
        out(kBytes, s) {
    owners = {{"the kernel", k->owner()}};
    g.launch(cover(kN), *k, in, out, kN);
  }
  void drop() override {
    k.reset();
    code.reset();
  }
  void launch_and_check(const graph& exec, const std::vector<float>& data, int) override {
    EXPECT_TRUE(all_match(launch_with(exec, in, out, data, s), doubled(data)));
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
  const auto& [kind, point] = GetParam();
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> g(std::in_place, dev());
  const std::unique_ptr<node_kind_graph> nodes = kind.make(s(), *g, seed);

  graph exec = instantiate_dropping_at(point, *g, [&] { nodes->drop(); });
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
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
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
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const float factor = random_values<float>(1, seed ^ 0xc0ffeeull)[0];
  buffer in(kBytes, s());
  pinned_buffer staged(kBytes);
  std::vector<float> result(kN, kPoison);
  std::atomic<int> calls{0};
  scale_job job{staged.span<float>().data(), result.data(), kN, factor, &calls};
  std::optional<graph_definition> g(std::in_place, dev());
  g->memcpy(staged, in, kBytes)
      .callback(&run_scale_job, std::as_bytes(std::span<const scale_job, 1>(&job, 1)));

  graph exec = instantiate_dropping(*g, [&] { std::memset(&job, 0xff, sizeof job); });
  each_round(seed, [&](const std::vector<float>& data, int round) {
    in.copy_from(data, s());
    std::fill(result.begin(), result.end(), kPoison);
    exec.launch(s());
    s().synchronize();
    EXPECT_EQ(calls.load(), round + 1);
    std::vector<float> want(kN);
    for (int i = 0; i < kN; ++i) want[i] = data[i] * factor;
    EXPECT_TRUE(all_match(result, want));
  });
  // The executable graph keeps its own copy once the definition is gone.
  g.reset();
  in.copy_from(round_data(seed, kRounds), s());
  exec.launch(s());
  s().synchronize();
  EXPECT_EQ(calls.load(), kRounds + 1);
}

INSTANTIATE_TEST_SUITE_P(Owners, GraphLifetimeDrop,
                         ::testing::Values(drop_point::before_instantiate,
                                           drop_point::after_instantiate),
                         [](const ::testing::TestParamInfo<drop_point>& info) {
                           return drop_point_name(info.param);
                         });

// ---- lifetimes across definitions, clones, embeds and executable graphs
// --------------------------

TEST_F(GraphLifetime, DefinitionAloneKeepsOwnersUntilDestroyed) {
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  EXPECT_TRUE(smp.all_alive());
  EXPECT_EQ(g->node_count(), 4u);
  g.reset();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, ExecutableKeepsOwnersAfterItsDefinitionIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  graph exec = g->instantiate();
  g.reset();
  EXPECT_TRUE(smp.all_alive()) << "the executable graph still runs every node";
  run_sample(exec, smp, s(), seed);
  EXPECT_TRUE(smp.all_alive());
  exec.close();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, OwnersLiveUntilTheLastOfSeveralExecutablesIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  graph first = g->instantiate();
  graph second = g->instantiate();
  g.reset();
  first.close();
  EXPECT_TRUE(smp.all_alive()) << "the second executable graph still holds them";
  run_sample(second, smp, s(), seed);
  second.close();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, CloneKeepsOwnersAfterTheSourceIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  std::optional<graph_definition> copy(g->clone());
  g.reset();
  EXPECT_TRUE(smp.all_alive());
  run_new_executable(*copy, smp, s(), seed);
  EXPECT_TRUE(smp.all_alive());
  copy.reset();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, SourceKeepsOwnersAfterItsCloneIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  std::optional<graph_definition> copy(g->clone());
  {
    graph exec = copy->instantiate();
    copy.reset();
    run_sample(exec, smp, s(), seed);
  }
  EXPECT_TRUE(smp.all_alive()) << "the source still holds them";
  run_new_executable(*g, smp, s(), seed);
  g.reset();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, EmbeddedChildKeepsOwnersAfterTheChildDefinitionIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> child(std::in_place, dev());
  sample smp = add_sample(*child, s());
  std::optional<graph_definition> parent(std::in_place, dev());
  parent->empty().embed(*child).empty();
  child.reset();
  EXPECT_TRUE(smp.all_alive()) << "the parent's embedded copy holds them";
  run_new_executable(*parent, smp, s(), seed);
  EXPECT_TRUE(smp.all_alive());
  parent.reset();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, ChildDefinitionKeepsOwnersAfterTheParentIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> child(std::in_place, dev());
  sample smp = add_sample(*child, s());
  std::optional<graph_definition> parent(std::in_place, dev());
  parent->embed(*child);
  {
    graph exec = parent->instantiate();
    parent.reset();
    run_sample(exec, smp, s(), seed);
  }
  EXPECT_TRUE(smp.all_alive()) << "the child definition still holds them";
  child.reset();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, NestedEmbedsKeepOwnersUntilTheOutermostIsDestroyed) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> inner(std::in_place, dev());
  sample smp = add_sample(*inner, s());
  std::optional<graph_definition> middle(std::in_place, dev());
  middle->embed(*inner);
  std::optional<graph_definition> outer(std::in_place, dev());
  outer->embed(*middle).empty();
  inner.reset();
  middle.reset();
  EXPECT_TRUE(smp.all_alive()) << "the outermost graph's nested copy holds them";
  graph exec = outer->instantiate();
  outer.reset();
  EXPECT_TRUE(smp.all_alive());
  run_sample(exec, smp, s(), seed);
  exec.close();
  EXPECT_TRUE(smp.all_expire());
}

// The definition and the executable graph are destroyed right after the launch: the owners must
// stay alive until the stream has run it.
TEST_F(GraphLifetime, InFlightLaunchKeepsOwnersUntilItFinishes) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const auto data = round_data(seed, 0);
  buffer in(kBytes, s());
  buffer out(kBytes, s());
  in.copy_from(data, s());
  out.fill(kPoison, s());
  s().synchronize();
  std::optional<buffer> x(std::in_place, kBytes, s());
  std::optional<buffer> y(std::in_place, kBytes, s());
  auto token = std::make_shared<int>(1);
  std::atomic<int> calls{0};
  const std::weak_ptr<const void> wx = x->owner();
  const std::weak_ptr<const void> wy = y->owner();
  const std::weak_ptr<int> wt = token;
  std::optional<graph_definition> g(std::in_place, dev());
  g->memcpy(*x, in, kBytes)
      .launch(cover(kN), test_kernels().get_kernel("spin_scale"), *x, *y, kN, 200'000'000LL)
      .memcpy(out, *y, kBytes)
      .callback([token, &calls] { calls.fetch_add(*token); });
  std::optional<graph> exec(g->instantiate());
  x.reset();
  y.reset();
  token.reset();
  g.reset();

  exec->launch(s());
  exec.reset();  // destroyed with the launch in flight
  // While the stream is still busy with the launch, nothing it uses may have been released. (The
  // owners are read before the stream is asked, so a busy answer means they were read in flight.)
  int busy_polls = 0;
  for (;;) {
    const bool alive = !wx.expired() && !wy.expired() && !wt.expired();
    if (s().query()) break;
    ++busy_polls;
    ASSERT_TRUE(alive) << "an owner was released while the launch still ran";
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (busy_polls == 0 && !launches_may_block()) {
    std::fprintf(stderr, "note: the launch had finished before the first poll\n");
  }
  s().synchronize();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(all_match(out.to_vector<float>(s()), doubled(data)));
  EXPECT_TRUE(expires_within(wx));
  EXPECT_TRUE(expires_within(wy));
  EXPECT_TRUE(expires_within(wt));
}

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
  graph exec = g->instantiate();
  g.reset();
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

// ---- destroying nodes
// ----------------------------------------------------------------------------

TEST_F(GraphLifetime, DestroyingANodeReleasesOnlyThatNodesOwners) {
  std::optional<buffer> target(std::in_place, kBytes, s());
  const std::weak_ptr<const void> wb = target->owner();
  auto kept_token = std::make_shared<int>(1);
  auto gone_token = std::make_shared<int>(2);
  const std::weak_ptr<int> w_kept = kept_token;
  const std::weak_ptr<int> w_gone = gone_token;
  graph_definition g(dev());
  graph_node fill = g.memset(*target, 0u, kN);
  graph_node doomed = fill.callback([gone_token] { (void)*gone_token; });
  fill.callback([kept_token] { (void)*kept_token; });
  target.reset();
  gone_token.reset();
  kept_token.reset();
  EXPECT_TRUE(still_alive_after(w_gone));
  doomed.destroy();
  EXPECT_FALSE(doomed.valid());
  EXPECT_TRUE(expires_within(w_gone)) << "no clone or executable graph holds the destroyed node";
  EXPECT_TRUE(still_alive_after(w_kept)) << "another node's owners must stay";
  EXPECT_FALSE(wb.expired());
  fill.destroy();
  EXPECT_TRUE(expires_within(wb));
  EXPECT_FALSE(w_kept.expired());
  EXPECT_EQ(g.node_count(), 1u);
}

TEST_F(GraphLifetime, CloneTakenBeforeANodeIsDestroyedKeepsItsOwners) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  std::optional<graph_definition> copy(g->clone());
  for (graph_node& n : g->nodes()) {
    if (n.kind() == graph_node_kind::host_callback) n.destroy();
  }
  EXPECT_EQ(g->node_count(), 3u);
  EXPECT_TRUE(still_alive_after(smp.token)) << "the clone holds its own reference";
  run_new_executable(*copy, smp, s(), seed);  // the clone's callback still runs
  copy.reset();
  EXPECT_TRUE(expires_within(smp.token));
  EXPECT_FALSE(smp.x.expired()) << "the source's other nodes still hold theirs";
  g.reset();
  EXPECT_TRUE(smp.all_expire());
}

TEST_F(GraphLifetime, DestroyingANodeInACloneLeavesTheSourcesOwners) {
  std::optional<graph_definition> g(std::in_place, dev());
  sample smp = add_sample(*g, s());
  std::optional<graph_definition> copy(g->clone());
  for (graph_node& n : copy->nodes()) {
    if (n.kind() == graph_node_kind::host_callback) n.destroy();
  }
  EXPECT_TRUE(still_alive_after(smp.token)) << "the source holds its own reference";
  g.reset();
  EXPECT_TRUE(expires_within(smp.token)) << "the clone released its reference on destroy";
  EXPECT_FALSE(smp.x.expired());
  copy.reset();
  EXPECT_TRUE(smp.all_expire());
}

// cuda.core's test_deleted_memcpy_bundle_survives_in_existing_exec, with a callback besides: the
// definition no longer holds the copies' buffer, the executable graph still does.
TEST_F(GraphLifetime, DestroyedNodesOwnersSurviveInAnExistingExecutable) {
  const auto seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  buffer in(kBytes, s());
  buffer out(kBytes, s());
  std::optional<buffer> a(std::in_place, kBytes, s());
  auto token = std::make_shared<int>(1);
  std::atomic<int> calls{0};
  const std::weak_ptr<const void> wa = a->owner();
  const std::weak_ptr<int> wt = token;
  graph_definition g(dev());
  g.empty().memcpy(*a, in, kBytes).memcpy(out, *a, kBytes).callback([token, &calls] {
    calls.fetch_add(*token);
  });
  a.reset();
  token.reset();
  graph exec = g.instantiate();
  for (graph_node& n : g.nodes()) {
    if (n.kind() != graph_node_kind::empty) n.destroy();
  }
  ASSERT_EQ(g.node_count(), 1u);
  EXPECT_TRUE(still_alive_after(wa)) << "the executable graph still runs the copies";
  EXPECT_FALSE(wt.expired());
  each_round(seed, [&](const std::vector<float>& data, int round) {
    EXPECT_TRUE(all_match(launch_with(exec, in, out, data, s()), data));
    EXPECT_EQ(calls.load(), round + 1);
  });
  exec.close();
  EXPECT_TRUE(expires_within(wa)) << "the definition (still alive) kept a destroyed node's owners";
  EXPECT_TRUE(expires_within(wt));
}

// cuda.core's test_new_node_attachment_does_not_replace_deleted_node_exec_attachment.
TEST_F(GraphLifetime, NewNodeDoesNotTakeOverADestroyedNodesOwnersInAnExecutable) {
  std::atomic<int> calls_a{0};
  std::atomic<int> calls_b{0};
  auto token_a = std::make_shared<int>(1);
  auto token_b = std::make_shared<int>(1);
  const std::weak_ptr<int> wa = token_a;
  const std::weak_ptr<int> wb = token_b;
  std::optional<graph_definition> g(std::in_place, dev());
  graph_node a = g->callback([token_a, &calls_a] { calls_a.fetch_add(*token_a); });
  token_a.reset();
  graph exec = g->instantiate();
  a.destroy();
  a = graph_node();  // a destroyed node's handle still shares the graph
  g->callback([token_b, &calls_b] { calls_b.fetch_add(*token_b); });
  token_b.reset();
  EXPECT_TRUE(still_alive_after(wa)) << "the executable graph runs the destroyed node";
  EXPECT_FALSE(wb.expired());
  for (int i = 0; i < kRounds; ++i) exec.launch(s());
  s().synchronize();
  EXPECT_EQ(calls_a.load(), kRounds);
  EXPECT_EQ(calls_b.load(), 0);
  g.reset();
  EXPECT_TRUE(expires_within(wb)) << "the new node lived in the definition only";
  EXPECT_TRUE(still_alive_after(wa));
  exec.close();
  EXPECT_TRUE(expires_within(wa));
}

// Destroying a node inside a parent's embedded copy releases that copy's reference only.
TEST_F(GraphLifetime, DestroyingANodeInsideAnEmbedReleasesTheEmbedsReference) {
  std::optional<graph_definition> child(std::in_place, dev());
  sample smp = add_sample(*child, s());
  graph_definition parent(dev());
  graph_definition view = parent.embed(*child).child_graph();
  for (graph_node& n : view.nodes()) {
    if (n.kind() == graph_node_kind::host_callback) n.destroy();
  }
  EXPECT_TRUE(still_alive_after(smp.token)) << "the child definition holds its own";
  child.reset();
  EXPECT_TRUE(expires_within(smp.token)) << "the parent's copy released it on destroy";
  EXPECT_TRUE(still_alive_after(smp.x)) << "the parent's copy still holds the other nodes'";
  EXPECT_FALSE(smp.kernel.expired());
}

// cuda.core's test_destroying_child_node_recursively_releases_subgraph_attachments.
TEST_F(GraphLifetime, DestroyingAChildGraphNodeReleasesItsEmbeddedOwners) {
  std::optional<graph_definition> child(std::in_place, dev());
  sample smp = add_sample(*child, s());
  std::optional<graph_definition> parent(std::in_place, dev());
  graph_node outer = parent->empty();
  graph_node embedded = outer.embed(*child);
  child.reset();
  EXPECT_TRUE(smp.all_alive());
  embedded.destroy();
  EXPECT_TRUE(smp.all_expire()) << "the parent (still alive) must not keep the child's owners";
  EXPECT_EQ(parent->node_count(), 1u);
}

TEST_F(GraphLifetimeWatched, ConditionalBodyKeepsItsOwnersAndNodeDestroyReleasesThem) {
  graph_definition g(dev());
  graph_node cond = g.if_then(g.create_condition(1u));
  cond.branch(0).memcpy(*z, *in, kBytes).launch(cover(kN), k, *z, *out, kN);
  z.reset();
  EXPECT_TRUE(still_alive_after(wz)) << "the body's nodes hold it";
  {
    graph exec = g.instantiate();
    each_round(seed, [&](const std::vector<float>& data, int) {
      EXPECT_TRUE(all_match(launch_with(exec, *in, *out, data, s()), doubled(data)));
    });
    cond.destroy();
    EXPECT_TRUE(still_alive_after(wz)) << "the executable graph still runs the body";
    const auto data = round_data(seed, kRounds);
    in->copy_from(data, s());
    exec.launch(s());
    EXPECT_TRUE(all_match(out->to_vector<float>(s()), doubled(data)));
  }
  EXPECT_TRUE(expires_within(wz)) << "destroying the conditional node released its body's owners";
  EXPECT_EQ(g.node_count(), 0u);
}

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
