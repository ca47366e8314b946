// Stream capture into CUDA graphs (graph_builder, capture_guard) and executable graph update,
// adapted from cuda.core's test_graph_builder.py, test_graph_builder_conditional.py and
// test_graph_update.py (label gpu; each test skips without a device).
//
// Capture retains nothing but host callbacks (the documented contract): every buffer captured
// here outlives the graphs that use it. Buffers are allocated and filled on a separate work stream
// before any capture, so no allocation or free is ever captured by accident.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
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
#include "graph_test_support.hpp"

namespace cucore {
namespace {

using namespace gpu_testing;  // gpu_test_support.hpp, graph_test_support.hpp

using bkind = graph_builder::kind;
using bstate = graph_builder::state;

constexpr int kN = 4099;  // not a multiple of the block size

// The fixture of every test here: a device, a work stream (allocations, uploads, launches of the
// executable graphs) and a fresh seed (print it with SEED_TRACE).
class builder_test : public gpu_testing::gpu_test {
 protected:
  void SetUp() override {
    gpu_testing::gpu_test::SetUp();
    if (IsSkipped()) return;
    s = stream(device(0));
    seed = fresh_seed();
  }
  // (Not a member of type device: constructing one needs the driver, before SetUp can skip.)
  device dev() const { return s.device(); }
  stream s;
  std::uint64_t seed = 0;
};

#define SEED_TRACE() SCOPED_TRACE(::testing::Message() << "seed " << seed)

class BuilderCapture : public builder_test {};
class BuilderConditional : public builder_test {};
class BuilderView : public builder_test {};
class BuilderEmbed : public builder_test {};
class BuilderCallback : public builder_test {};
class BuilderGuard : public builder_test {};
class BuilderUpdate : public builder_test {};

// kN random floats from `seed`, and a device buffer holding them (uploaded on `s`).
std::pair<std::vector<float>, buffer> random_on_device(std::uint64_t seed, const stream& s) {
  std::vector<float> host = random_values<float>(kN, seed);
  buffer b = upload(host, s);
  return {std::move(host), std::move(b)};
}

buffer poisoned(std::size_t n, const stream& s) {
  buffer b(n * sizeof(float), s);
  b.fill(kPoison, s);
  return b;
}

buffer ints(std::size_t n, const stream& s, int value = 0) {
  buffer b(n * sizeof(int), s);
  b.fill(value, s);
  return b;
}

// The address of element `index` of a buffer of 4-byte elements.
device_address element(const buffer& b, std::size_t index) {
  return b.address() + index * 4;
}

void set_flag(buffer& flag, unsigned value, const stream& s) {
  flag.copy_from(&value, sizeof(value), s);
}

std::vector<float> plus(const std::vector<float>& v, int times) {
  std::vector<float> out = v;
  for (float& x : out) {
    for (int i = 0; i < times; ++i) x = x + 1.0f;
  }
  return out;
}

// Whether match(got[i], want[i]) holds for every element; reports the first difference.
template <class Want, class Match>
::testing::AssertionResult every_element(const std::vector<float>& got,
                                         const std::vector<Want>& want, Match match) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  std::size_t bad = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!match(got[i], want[i])) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " differ; first at " << first << ": got " << got[first]
         << ", want " << want[first];
}

// Exact comparison (kernels that add 1 or double are exact).
::testing::AssertionResult same(const std::vector<float>& got, const std::vector<float>& want) {
  return every_element(got, want, [](float g, float w) { return g == w; });
}

// Within `tolerance` (for axpy, which the device may fuse).
::testing::AssertionResult near(const std::vector<float>& got, const std::vector<double>& want,
                                double tolerance) {
  return every_element(got, want,
                       [tolerance](float g, double w) { return std::fabs(g - w) <= tolerance; });
}

// got = a * u + rest, computed in double, within 8 float epsilons of the terms' magnitudes (the
// device may fuse the multiply and the add).
::testing::AssertionResult near_axpy(const std::vector<float>& got, float a,
                                     const std::vector<double>& u,
                                     const std::vector<double>& rest) {
  std::vector<double> want(u.size());
  double bound = 0;
  for (std::size_t i = 0; i < u.size(); ++i) {
    want[i] = static_cast<double>(a) * u[i] + rest[i];
    bound = std::max(bound, std::fabs(static_cast<double>(a) * u[i]) + std::fabs(rest[i]));
  }
  return near(got, want, 8 * std::numeric_limits<float>::epsilon() * bound);
}

std::vector<int> read_ints(const buffer& b, const stream& s) {
  return b.to_vector<int>(s);
}

// A new condition of the builder's graph, set (by a captured kernel) from the unsigned in `from`
// at every launch.
graph_condition condition_from(const graph_builder& b, const buffer& from) {
  const graph_condition cond = b.create_condition();
  launch(b.stream(), cover(1), graph_kernel("set_condition_from"), cond, from);
  return cond;
}

// A finished builder capturing `y += 1` (one kernel node).
graph_builder capture_add_one(const device& d, const buffer& y) {
  graph_builder b(d);
  b.begin_building();
  launch(b.stream(), cover(kN), graph_kernel("add_one"), y, kN);
  b.end_building();
  return b;
}

// A finished builder capturing `out = 2 * in; out += 1` (two kernel nodes).
graph_builder capture_twice_plus_one(const device& d, const buffer& in, const buffer& out) {
  graph_builder b(d);
  b.begin_building();
  launch(b.stream(), cover(kN), graph_kernel("twice"), in, out, kN);
  launch(b.stream(), cover(kN), graph_kernel("add_one"), out, kN);
  b.end_building();
  return b;
}

// ---- building and lifecycle --------------------------------------------------------------------

TEST_F(BuilderCapture, IsBuildingTogglesAcrossBeginAndEnd) {
  graph_builder b(dev());
  EXPECT_TRUE(b.valid());
  EXPECT_EQ(b.builder_kind(), bkind::primary);
  EXPECT_EQ(b.builder_state(), bstate::not_started);
  EXPECT_FALSE(b.is_building());
  EXPECT_FALSE(b.is_join_required());
  b.begin_building();
  EXPECT_TRUE(b.is_building());
  EXPECT_EQ(b.builder_state(), bstate::capturing);
  b.end_building();
  EXPECT_FALSE(b.is_building());
  EXPECT_EQ(b.builder_state(), bstate::ended);
}

TEST_F(BuilderCapture, StraightCaptureRunsOnFreshDataAtEveryLaunch) {
  SEED_TRACE();
  const kernel twice = graph_kernel("twice");
  const kernel add_one = graph_kernel("add_one");
  const kernel axpy = graph_kernel("axpy");
  const float a = random_values<float>(1, seed + 100)[0];
  buffer x = poisoned(kN, s);
  buffer y = poisoned(kN, s);

  graph_builder b(dev());
  b.begin_building();
  launch(b.stream(), cover(kN), twice, x, y, kN);    // y = 2x
  launch(b.stream(), cover(kN), add_one, y, kN);     // y = 2x + 1
  launch(b.stream(), cover(kN), axpy, a, x, y, kN);  // y = a x + 2x + 1
  b.end_building();
  graph exec = b.complete();
  ASSERT_TRUE(exec.valid());
  EXPECT_NE(exec.handle(), nullptr);
  EXPECT_EQ(exec.device(), dev());
  exec.upload(s);

  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    const auto hx = random_values<float>(kN, seed + static_cast<std::uint64_t>(round));
    x.copy_from(hx, s);
    y.fill(kPoison, s);
    exec.launch(s);
    std::vector<double> u(kN);
    std::vector<double> rest(kN);
    for (int i = 0; i < kN; ++i) {
      u[i] = hx[i];
      rest[i] = 2.0 * hx[i] + 1.0;
    }
    EXPECT_TRUE(near_axpy(y.to_vector<float>(s), a, u, rest));
  }
}

TEST_F(BuilderCapture, BeginBuildingTwiceIsRefused) {
  graph_builder b(dev());
  b.begin_building();
  const std::string msg = invalid_argument_message([&] { b.begin_building(); });
  EXPECT_TRUE(contains(msg, "already building")) << msg;
  EXPECT_TRUE(b.is_building());  // the capture in progress is untouched
  b.end_building();
  EXPECT_NO_THROW(b.complete());  // an empty graph instantiates
}

TEST_F(BuilderCapture, NoResumeAfterEndAndRelaunchesAccumulate) {
  SEED_TRACE();
  auto [y0, y] = random_on_device(seed, s);
  graph_builder b = capture_add_one(dev(), y);
  graph exec = b.complete();
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 1)));

  const std::string msg = invalid_argument_message([&] { b.begin_building(); });
  EXPECT_TRUE(contains(msg, "resume")) << msg;
  EXPECT_EQ(b.builder_state(), bstate::ended);

  exec.launch(s);
  exec.launch(s);
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 4)));
}

TEST_F(BuilderCapture, CompleteAndDotPrintBeforeEndAreRefused) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("cucore-builder-early-" + std::to_string(::getpid()) + ".dot");
  graph_builder b(dev());
  EXPECT_TRUE(contains(invalid_argument_message([&] { b.complete(); }), "end_building"));
  EXPECT_THROW(b.debug_dot_print(path), invalid_argument);
  b.begin_building();
  EXPECT_TRUE(contains(invalid_argument_message([&] { b.complete(); }), "end_building"));
  EXPECT_THROW(b.debug_dot_print(path), invalid_argument);
  EXPECT_TRUE(b.is_building());
  EXPECT_FALSE(std::filesystem::exists(path));
  b.end_building();
  graph exec = b.complete();
  EXPECT_TRUE(exec.valid());
}

TEST_F(BuilderCapture, EndBuildingNeedsACapture) {
  graph_builder b(dev());
  EXPECT_TRUE(contains(invalid_argument_message([&] { b.end_building(); }), "not building"));
  b.begin_building();
  b.end_building();
  EXPECT_TRUE(contains(invalid_argument_message([&] { b.end_building(); }), "not building"));
}

TEST_F(BuilderCapture, SplitNeedsBuildingAndACountOfAtLeastTwo) {
  graph_builder b(dev());
  std::string msg = invalid_argument_message([&] { b.split(2); });
  EXPECT_TRUE(contains(msg, "begin_building")) << msg;
  b.begin_building();
  msg = invalid_argument_message([&] { b.split(1); });
  EXPECT_TRUE(contains(msg, "at least 2")) << msg;
  EXPECT_THROW(b.split(0), invalid_argument);
  EXPECT_TRUE(b.is_building());
  EXPECT_THROW(b.join({}), invalid_argument);  // nothing to join
  b.end_building();
  EXPECT_THROW(b.split(2), invalid_argument);  // no longer building
}

TEST_F(BuilderCapture, SplitJoinDiamondComputesBothBranches) {
  SEED_TRACE();
  const kernel twice = graph_kernel("twice");
  const kernel add_one = graph_kernel("add_one");
  const kernel axpy = graph_kernel("axpy");
  const float a = random_values<float>(1, seed + 7)[0];
  buffer x = poisoned(kN, s);
  buffer u = poisoned(kN, s);
  buffer v = poisoned(kN, s);
  buffer w = poisoned(kN, s);

  graph_builder b(dev());
  b.begin_building();
  u.copy_from(x, b.stream());  // u = x, before the fork
  std::vector<graph_builder> forks = b.split(2);
  ASSERT_EQ(forks.size(), 1u);
  graph_builder& right = forks[0];
  EXPECT_EQ(right.builder_kind(), bkind::forked);
  EXPECT_EQ(right.builder_state(), bstate::capturing);
  EXPECT_TRUE(right.is_building());
  EXPECT_TRUE(right.is_join_required());
  EXPECT_FALSE(b.is_join_required());
  EXPECT_NE(right.stream().handle(), b.stream().handle());

  launch(b.stream(), cover(kN), twice, u, v, kN);     // left: v = 2x
  w.copy_from(u, right.stream());                     // right: w = x
  launch(right.stream(), cover(kN), add_one, w, kN);  // right: w = x + 1

  const std::string msg = invalid_argument_message([&] { right.end_building(); });
  EXPECT_TRUE(contains(msg, "forked")) << msg;
  EXPECT_TRUE(right.is_building());

  b.join(std::move(forks));
  launch(b.stream(), cover(kN), axpy, a, v, w, kN);  // w = a (2x) + x + 1: needs both branches
  b.end_building();
  EXPECT_EQ(b.graph_definition().node_count(), 5u);  // copy, twice, copy, add_one, axpy
  graph exec = b.complete();

  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    const auto hx = random_values<float>(kN, seed + 11 + static_cast<std::uint64_t>(round));
    x.copy_from(hx, s);
    v.fill(kPoison, s);
    w.fill(kPoison, s);
    exec.launch(s);
    EXPECT_TRUE(same(v.to_vector<float>(s), doubled(hx)));
    std::vector<double> two_x(kN);
    std::vector<double> rest(kN);
    for (int i = 0; i < kN; ++i) {
      two_x[i] = 2.0 * hx[i];
      rest[i] = static_cast<double>(hx[i] + 1.0f);
    }
    EXPECT_TRUE(near_axpy(w.to_vector<float>(s), a, two_x, rest));
  }
}

TEST_F(BuilderCapture, ForksOfForksJoinBackIntoThePrimary) {
  SEED_TRACE();
  const kernel add_one = graph_kernel("add_one");
  const kernel twice = graph_kernel("twice");
  std::vector<std::vector<float>> y0;
  std::vector<buffer> ys;
  std::vector<buffer> outs;
  for (std::uint64_t i = 0; i < 4; ++i) {
    y0.push_back(random_values<float>(kN, seed + i));
    ys.push_back(upload(y0.back(), s));
    outs.push_back(poisoned(kN, s));
  }

  graph_builder b(dev());
  b.begin_building();
  std::vector<graph_builder> first = b.split(3);
  ASSERT_EQ(first.size(), 2u);
  std::vector<graph_builder> second = first[1].split(2);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_TRUE(second[0].is_join_required());
  EXPECT_EQ(second[0].builder_kind(), bkind::forked);

  launch(b.stream(), cover(kN), add_one, ys[0], kN);
  launch(first[0].stream(), cover(kN), add_one, ys[1], kN);
  launch(first[1].stream(), cover(kN), add_one, ys[2], kN);
  launch(second[0].stream(), cover(kN), add_one, ys[3], kN);

  first[1].join(std::move(second));  // a forked builder joins its own fork
  EXPECT_TRUE(first[1].is_join_required());
  b.join(std::move(first));
  for (std::size_t i = 0; i < 4; ++i) {
    launch(b.stream(), cover(kN), twice, ys[i], outs[i], kN);  // after every branch
  }
  b.end_building();
  graph exec = b.complete();
  exec.launch(s);
  for (std::size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(same(ys[i].to_vector<float>(s), plus(y0[i], 1)));
    EXPECT_TRUE(same(outs[i].to_vector<float>(s), doubled(plus(y0[i], 1))));
  }
}

TEST_F(BuilderCapture, EveryCaptureModeCaptures) {
  SEED_TRACE();
  const kernel add_one = graph_kernel("add_one");
  auto [y0, y] = random_on_device(seed, s);
  launch(s, cover(kN), add_one, y, kN);  // loads the kernel before any capture
  s.synchronize();
  int expected = 1;
  for (capture_mode mode :
       {capture_mode::global, capture_mode::thread_local_, capture_mode::relaxed}) {
    SCOPED_TRACE(static_cast<int>(mode));
    graph_builder b(dev());
    b.begin_building(mode);
    EXPECT_TRUE(b.is_building());
    launch(b.stream(), cover(kN), add_one, y, kN);
    launch(b.stream(), cover(kN), add_one, y, kN);
    b.end_building();
    graph exec = b.complete();
    exec.launch(s);
    expected += 2;
    EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, expected)));
  }
}

TEST_F(BuilderCapture, BuilderOnACallersStreamLeavesItUsable) {
  SEED_TRACE();
  const kernel add_one = graph_kernel("add_one");
  auto [y0, y] = random_on_device(seed, s);
  s.synchronize();  // y is ready for the other stream

  stream caller(dev());
  graph exec;
  {
    graph_builder b(caller);
    EXPECT_EQ(b.stream().handle(), caller.handle());
    EXPECT_EQ(b.stream().device(), dev());
    b.begin_building();
    launch(b.stream(), cover(kN), add_one, y, kN);
    b.end_building();
    exec = b.complete();
  }  // the builder is gone; the stream is the caller's
  exec.launch(caller);
  launch(caller, cover(kN), add_one, y, kN);  // ordinary work on the same stream
  EXPECT_TRUE(same(y.to_vector<float>(caller), plus(y0, 2)));

  // A builder keeps a stream it was given alive: this one is a temporary.
  graph_builder t{stream(dev())};
  t.begin_building();
  launch(t.stream(), cover(kN), add_one, y, kN);
  t.end_building();
  graph from_temporary = t.complete();
  from_temporary.launch(t.stream());
  t.stream().synchronize();
  EXPECT_TRUE(same(y.to_vector<float>(caller), plus(y0, 3)));
}

TEST_F(BuilderCapture, CloseIsIdempotentAndLaterCallsAreRefused) {
  SEED_TRACE();
  graph_builder none;  // default-constructed: like a closed one
  EXPECT_FALSE(none.valid());
  EXPECT_EQ(none.builder_state(), bstate::closed);
  EXPECT_THROW(none.begin_building(), invalid_argument);
  EXPECT_NO_THROW(none.close());

  auto [y0, y] = random_on_device(seed, s);
  graph_builder finished = capture_twice_plus_one(dev(), y, y);  // y = 2y + 1, for embed below

  graph_builder b = capture_add_one(dev(), y);
  graph exec = b.complete();
  b.close();
  b.close();
  EXPECT_FALSE(b.valid());
  EXPECT_EQ(b.builder_state(), bstate::closed);

  const auto path = std::filesystem::temp_directory_path() /
                    ("cucore-builder-closed-" + std::to_string(::getpid()) + ".dot");
  EXPECT_TRUE(contains(invalid_argument_message([&] { b.begin_building(); }), "closed"));
  EXPECT_THROW(b.end_building(), invalid_argument);
  EXPECT_THROW(b.is_building(), invalid_argument);
  EXPECT_THROW(b.complete(), invalid_argument);
  EXPECT_THROW(b.stream(), invalid_argument);
  EXPECT_THROW(b.builder_kind(), invalid_argument);
  EXPECT_THROW(b.is_join_required(), invalid_argument);
  EXPECT_THROW(b.split(2), invalid_argument);
  EXPECT_THROW(b.create_condition(), invalid_argument);
  EXPECT_THROW(b.embed(finished), invalid_argument);
  EXPECT_THROW(b.callback([] {}), invalid_argument);
  EXPECT_THROW(b.graph_definition(), invalid_argument);
  EXPECT_THROW(b.debug_dot_print(path), invalid_argument);
  EXPECT_THROW(exec.update(b), invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(path));

  // A moved-from builder is closed too.
  graph_builder moved_to = std::move(finished);
  EXPECT_FALSE(finished.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(finished.builder_state(), bstate::closed);
  EXPECT_THROW(finished.complete(), invalid_argument);
  EXPECT_EQ(moved_to.builder_state(), bstate::ended);

  // The executable graph does not need its builder.
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 1)));
  exec.close();
  exec.close();
  EXPECT_FALSE(exec.valid());
  EXPECT_THROW(exec.launch(s), invalid_argument);
}

TEST_F(BuilderCapture, DebugDotPrintWritesAFile) {
  buffer in = poisoned(kN, s);
  buffer out = poisoned(kN, s);
  graph_builder b = capture_twice_plus_one(dev(), in, out);
  const auto dir = std::filesystem::temp_directory_path();
  const std::string stem = "cucore-builder-" + std::to_string(::getpid()) + "-" +
                           std::to_string(static_cast<unsigned>(seed));
  const auto plain = dir / (stem + ".dot");
  const auto verbose = dir / (stem + "-verbose.dot");
  b.debug_dot_print(plain);
  b.debug_dot_print(verbose, graph_dot_options{.verbose = true, .kernel_node_params = true});
  for (const auto& path : {plain, verbose}) {
    SCOPED_TRACE(path.string());
    ASSERT_TRUE(std::filesystem::exists(path));
    std::ifstream file(path);
    const std::string text((std::istreambuf_iterator<char>(file)),
                           std::istreambuf_iterator<char>());
    EXPECT_TRUE(contains(text, "digraph")) << text.substr(0, 200);
    std::filesystem::remove(path);
  }
}

// ---- conditionals by capture --------------------------------------------------------------------

TEST_F(BuilderConditional, IfThenRunsTheBodyOnlyWhenTheConditionIsSet) {
  SEED_TRACE();
  const kernel add_one = graph_kernel("add_one");
  const kernel twice = graph_kernel("twice");
  const auto y0 = random_values<float>(kN, seed);
  const auto z0 = random_values<float>(kN, seed + 1);
  buffer y = upload(y0, s);
  buffer z = upload(z0, s);
  buffer w = poisoned(kN, s);
  buffer flag(sizeof(unsigned), s);

  graph_builder b(dev());
  b.begin_building();
  const graph_condition cond = b.create_condition();
  EXPECT_NE(cond.graph_handle(), nullptr);
  launch(b.stream(), cover(1), graph_kernel("set_condition_from"), cond, flag);
  graph_builder body = b.if_then(cond);
  EXPECT_EQ(body.builder_kind(), bkind::conditional_body);
  EXPECT_EQ(body.builder_state(), bstate::not_started);
  EXPECT_FALSE(body.is_join_required());
  body.begin_building();
  EXPECT_TRUE(body.is_building());
  launch(body.stream(), cover(kN), add_one, y, kN);
  std::vector<graph_builder> forks = body.split(2);  // a diamond inside the body
  launch(forks[0].stream(), cover(kN), add_one, z, kN);
  launch(body.stream(), cover(kN), add_one, y, kN);
  body.join(std::move(forks));
  launch(body.stream(), cover(kN), add_one, y, kN);
  body.end_building();
  EXPECT_EQ(body.builder_state(), bstate::ended);
  launch(b.stream(), cover(kN), twice, y, w, kN);  // after the conditional node
  b.end_building();
  graph exec = b.complete();

  const unsigned any_nonzero = static_cast<unsigned>(seed) | 1u;
  for (unsigned value : {any_nonzero, 0u, 1u}) {
    SCOPED_TRACE(value);
    y.copy_from(y0, s);
    z.copy_from(z0, s);
    w.fill(kPoison, s);
    set_flag(flag, value, s);
    exec.launch(s);
    const int runs = value != 0 ? 1 : 0;
    EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 3 * runs)));
    EXPECT_TRUE(same(z.to_vector<float>(s), plus(z0, runs)));
    EXPECT_TRUE(same(w.to_vector<float>(s), doubled(plus(y0, 3 * runs))));
  }
}

TEST_F(BuilderConditional, IfElseRunsExactlyOneBranch) {
  SEED_TRACE();
  auto [y0, y] = random_on_device(seed, s);
  buffer z = poisoned(kN, s);
  buffer flag(sizeof(unsigned), s);

  graph_builder b(dev());
  b.begin_building();
  const graph_condition cond = condition_from(b, flag);
  auto [then_body, else_body] = b.if_else(cond);
  EXPECT_EQ(then_body.builder_kind(), bkind::conditional_body);
  EXPECT_EQ(else_body.builder_kind(), bkind::conditional_body);
  then_body.begin_building();
  launch(then_body.stream(), cover(kN), graph_kernel("add_one"), y, kN);
  launch(then_body.stream(), cover(kN), graph_kernel("add_one"), y, kN);
  then_body.end_building();
  else_body.begin_building();
  launch(else_body.stream(), cover(kN), graph_kernel("twice"), y, z, kN);
  else_body.end_building();
  b.end_building();
  graph exec = b.complete();

  for (unsigned value : {1u, 0u, static_cast<unsigned>(seed >> 32) | 2u}) {
    SCOPED_TRACE(value);
    y.copy_from(y0, s);
    z.fill(kPoison, s);
    set_flag(flag, value, s);
    exec.launch(s);
    if (value != 0) {
      EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 2)));
      EXPECT_TRUE(same(z.to_vector<float>(s), std::vector<float>(kN, kPoison)));
    } else {
      EXPECT_TRUE(same(y.to_vector<float>(s), y0));
      EXPECT_TRUE(same(z.to_vector<float>(s), doubled(y0)));
    }
  }
}

TEST_F(BuilderConditional, WhileLoopRunsUntilTheBodyClearsTheCondition) {
  SEED_TRACE();
  const int limit = 1 + static_cast<int>(seed % 16);
  SCOPED_TRACE(::testing::Message() << "limit " << limit);
  auto [y0, y] = random_on_device(seed, s);
  buffer counter = ints(1, s, -12345);

  graph_builder b(dev());
  b.begin_building();
  counter.fill(0, b.stream());  // a captured memset: every launch counts from zero
  const graph_condition cond = b.create_condition();
  launch(b.stream(), cover(1), graph_kernel("set_condition"), cond, 1u);
  graph_builder body = b.while_loop(cond);
  EXPECT_EQ(body.builder_kind(), bkind::conditional_body);
  body.begin_building();
  launch(body.stream(), cover(kN), graph_kernel("add_one"), y, kN);
  // The body clears the condition itself once the counter reaches the limit.
  launch(body.stream(), cover(1), graph_kernel("count_up"), cond, counter, limit);
  body.end_building();
  b.end_building();
  graph exec = b.complete();

  exec.launch(s);
  EXPECT_EQ(read_ints(counter, s), std::vector<int>{limit});
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, limit)));
  exec.launch(s);
  EXPECT_EQ(read_ints(counter, s), std::vector<int>{limit});
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 2 * limit)));
}

TEST_F(BuilderConditional, WhileLoopWithAFalseDefaultNeverRuns) {
  buffer counters = ints(2, s, 0);
  graph_builder b(dev());
  b.begin_building();
  const graph_condition cond = b.create_condition(0u);  // every launch starts with 0
  graph_builder body = b.while_loop(cond);
  body.begin_building();
  launch(body.stream(), cover(1), graph_kernel("bump"), element(counters, 0));
  body.end_building();
  launch(b.stream(), cover(1), graph_kernel("bump"), element(counters, 1));  // the graph ran
  b.end_building();
  graph exec = b.complete();
  exec.launch(s);
  exec.launch(s);
  EXPECT_EQ(read_ints(counters, s), (std::vector<int>{0, 2}));
}

TEST_F(BuilderConditional, SwitchSelectsOneBranchAndSkipsAllWhenOutOfRange) {
  SEED_TRACE();
  buffer counters = ints(4, s, -1);
  buffer selector(sizeof(unsigned), s);
  const kernel bump = graph_kernel("bump");

  graph_builder b(dev());
  b.begin_building();
  counters.fill(0, b.stream());
  const graph_condition cond = condition_from(b, selector);
  std::vector<graph_builder> cases = b.switch_(cond, 3);
  ASSERT_EQ(cases.size(), 3u);
  for (unsigned i = 0; i < 3; ++i) {
    EXPECT_EQ(cases[i].builder_kind(), bkind::conditional_body);
    cases[i].begin_building();
    for (unsigned k = 0; k <= i; ++k)
      launch(cases[i].stream(), cover(1), bump, element(counters, i));
    cases[i].end_building();
  }
  launch(b.stream(), cover(1), bump, element(counters, 3));  // after the switch, always
  b.end_building();
  graph exec = b.complete();

  const unsigned far_out = 3u + static_cast<unsigned>(seed % 100000);
  for (unsigned value : {2u, 0u, 1u, 3u, far_out}) {
    SCOPED_TRACE(value);
    set_flag(selector, value, s);
    exec.launch(s);
    std::vector<int> want{0, 0, 0, 1};
    if (value < 3) want[value] = static_cast<int>(value) + 1;
    EXPECT_EQ(read_ints(counters, s), want);
  }
}

TEST_F(BuilderConditional, ConditionalOnAForkedBuilder) {
  buffer counters = ints(3, s, -1);
  buffer flag(sizeof(unsigned), s);
  const kernel bump = graph_kernel("bump");

  graph_builder b(dev());
  b.begin_building();
  counters.fill(0, b.stream());
  std::vector<graph_builder> forks = b.split(2);
  graph_builder& f = forks[0];
  const graph_condition cond = condition_from(f, flag);
  graph_builder body = f.if_then(cond);
  body.begin_building();
  launch(body.stream(), cover(1), bump, element(counters, 0));
  body.end_building();
  launch(b.stream(), cover(1), bump, element(counters, 1));  // the other branch
  b.join(std::move(forks));
  launch(b.stream(), cover(1), bump, element(counters, 2));  // after the join
  b.end_building();
  EXPECT_EQ(body.graph_definition().node_count(), 1u);
  body.close();
  graph exec = b.complete();

  for (unsigned value : {1u, 0u}) {
    SCOPED_TRACE(value);
    set_flag(flag, value, s);
    exec.launch(s);
    EXPECT_EQ(read_ints(counters, s), (std::vector<int>{value != 0 ? 1 : 0, 1, 1}));
  }
}

TEST_F(BuilderConditional, NestedConditionalsKeepTheirHierarchyAlive) {
  buffer counters = ints(4, s, -1);
  buffer flags(2 * sizeof(unsigned), s);
  const kernel bump = graph_kernel("bump");
  const kernel set_from = graph_kernel("set_condition_from");

  std::optional<graph_definition> main_view;
  std::optional<graph_definition> inner_view;
  {
    graph_builder b(dev());
    b.begin_building();
    counters.fill(0, b.stream());
    const graph_condition outer_cond = b.create_condition();
    launch(b.stream(), cover(1), set_from, outer_cond, element(flags, 0));
    graph_builder outer = b.if_then(outer_cond);
    outer.begin_building();
    launch(outer.stream(), cover(1), bump, element(counters, 0));
    const graph_condition inner_cond = outer.create_condition();  // the body's own condition
    EXPECT_NE(inner_cond, outer_cond);
    launch(outer.stream(), cover(1), set_from, inner_cond, element(flags, 1));
    graph_builder inner = outer.if_then(inner_cond);
    EXPECT_EQ(inner.builder_kind(), bkind::conditional_body);
    inner.begin_building();
    launch(inner.stream(), cover(1), bump, element(counters, 1));
    inner.end_building();
    launch(outer.stream(), cover(1), bump, element(counters, 2));  // after the inner node
    outer.end_building();
    launch(b.stream(), cover(1), bump, element(counters, 3));
    b.end_building();
    main_view = b.graph_definition();
    inner_view = inner.graph_definition();
    EXPECT_EQ(outer.graph_definition().node_count(), 4u);  // bump, set, if, bump
    inner.close();
    outer.close();
  }  // every builder is gone: the views keep the whole hierarchy
  EXPECT_EQ(inner_view->node_count(), 1u);
  graph exec = main_view->instantiate();
  main_view.reset();
  inner_view.reset();

  for (unsigned o : {0u, 1u}) {
    for (unsigned i : {0u, 1u}) {
      SCOPED_TRACE(::testing::Message() << "outer " << o << " inner " << i);
      const std::vector<unsigned> host{o, i};
      flags.copy_from(host, s);
      exec.launch(s);
      const int outer_ran = o != 0 ? 1 : 0;
      EXPECT_EQ(read_ints(counters, s),
                (std::vector<int>{outer_ran, outer_ran * (i != 0 ? 1 : 0), outer_ran, 1}));
    }
  }
}

TEST_F(BuilderConditional, ConditionalsNeedABuildingBuilderAndTheirOwnCondition) {
  graph_builder b(dev());
  graph_builder other(dev());
  EXPECT_THROW(b.create_condition(), invalid_argument);  // no graph before begin_building
  b.begin_building();
  other.begin_building();
  const graph_condition mine = b.create_condition();
  const graph_condition theirs = other.create_condition();
  std::string msg = invalid_argument_message([&] { b.if_then(theirs); });
  EXPECT_TRUE(contains(msg, "another graph")) << msg;
  EXPECT_THROW(b.while_loop(graph_condition()), invalid_argument);
  msg = invalid_argument_message([&] { b.switch_(mine, 0); });
  EXPECT_TRUE(contains(msg, "at least one")) << msg;
  EXPECT_TRUE(b.is_building());
  graph_builder body = b.if_then(mine);
  // A body builder's conditional needs the body to be building.
  const graph_condition body_cond = body.create_condition();
  EXPECT_THROW(body.if_then(body_cond), invalid_argument);
  body.begin_building();
  graph_builder inner = body.if_then(body_cond);
  body.end_building();
  b.end_building();
  other.end_building();
  EXPECT_THROW(b.if_then(mine), invalid_argument);  // the capture ended
  EXPECT_THROW(b.if_else(mine), invalid_argument);
}

// ---- graph_definition() views -------------------------------------------------------------------

TEST_F(BuilderView, RefusedBeforeBeginBuildingOnAPrimaryBuilder) {
  graph_builder b(dev());
  const std::string msg = invalid_argument_message([&] { b.graph_definition(); });
  EXPECT_TRUE(contains(msg, "before begin_building")) << msg;
}

TEST_F(BuilderView, RefusedWhileCaptureIsInProgress) {
  graph_builder b(dev());
  b.begin_building();
  std::string msg = invalid_argument_message([&] { b.graph_definition(); });
  EXPECT_TRUE(contains(msg, "capture is in progress")) << msg;
  // Conditional bodies too.
  const graph_condition cond = b.create_condition(1u);
  graph_builder body = b.if_then(cond);
  body.begin_building();
  msg = invalid_argument_message([&] { body.graph_definition(); });
  EXPECT_TRUE(contains(msg, "capture is in progress")) << msg;
  body.end_building();
  b.end_building();
  EXPECT_NO_THROW(b.graph_definition());
  EXPECT_NO_THROW(body.graph_definition());
}

TEST_F(BuilderView, RefusedOnAForkedBuilder) {
  graph_builder b(dev());
  b.begin_building();
  std::vector<graph_builder> forks = b.split(2);
  const std::string msg = invalid_argument_message([&] { forks[0].graph_definition(); });
  EXPECT_TRUE(contains(msg, "forked")) << msg;
  EXPECT_FALSE(contains(msg, "capture is in progress")) << msg;  // the forked rule comes first
  b.join(std::move(forks));
  b.end_building();
}

TEST_F(BuilderView, RefusedAfterClose) {
  graph_builder b(dev());
  b.begin_building();
  b.end_building();
  EXPECT_NO_THROW(b.graph_definition());
  b.close();
  const std::string msg = invalid_argument_message([&] { b.graph_definition(); });
  EXPECT_TRUE(contains(msg, "closed")) << msg;
}

TEST_F(BuilderView, ViewSharesOwnershipAndOutlivesTheBuilder) {
  SEED_TRACE();
  auto [x0, x] = random_on_device(seed, s);
  buffer y = poisoned(kN, s);
  std::optional<graph_definition> closed_view;
  std::optional<graph_definition> destroyed_view;
  {
    graph_builder b = capture_twice_plus_one(dev(), x, y);
    closed_view = b.graph_definition();
    b.close();
    destroyed_view = capture_twice_plus_one(dev(), x, y).graph_definition();  // a temporary
  }
  for (auto* view : {&closed_view, &destroyed_view}) {
    EXPECT_EQ((*view)->node_count(), 2u);
    EXPECT_EQ((*view)->edges().size(), 1u);
    graph exec = (*view)->instantiate();
    view->reset();  // the executable graph needs no definition
    y.fill(kPoison, s);
    exec.launch(s);
    EXPECT_TRUE(same(y.to_vector<float>(s), plus(doubled(x0), 1)));
  }
}

TEST_F(BuilderView, NodesAddedThroughTheViewRunWithComplete) {
  SEED_TRACE();
  auto [y0, y] = random_on_device(seed, s);
  buffer z = poisoned(kN, s);
  graph_builder b = capture_add_one(dev(), y);
  graph_definition view = b.graph_definition();
  const std::vector<graph_node> captured = view.nodes();
  ASSERT_EQ(captured.size(), 1u);
  EXPECT_EQ(captured[0].kind(), graph_node_kind::kernel);
  const graph_node second = captured[0].launch(cover(kN), graph_kernel("add_one"), y, kN);
  second.launch(cover(kN), graph_kernel("twice"), y, z, kN);
  EXPECT_EQ(view.node_count(), 3u);
  EXPECT_EQ(b.graph_definition().node_count(), 3u);  // the same graph
  EXPECT_TRUE(b.graph_definition() == view);

  graph exec = b.complete();
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 2)));
  EXPECT_TRUE(same(z.to_vector<float>(s), doubled(plus(y0, 2))));
}

TEST_F(BuilderView, ConditionalBodyViewIsValidBeforeAndAfterCapture) {
  SEED_TRACE();
  auto [y0, y] = random_on_device(seed, s);
  const kernel add_one = graph_kernel("add_one");
  graph_builder b(dev());
  b.begin_building();
  const graph_condition cond = b.create_condition();
  launch(b.stream(), cover(1), graph_kernel("set_condition"), cond, 1u);
  graph_builder body = b.if_then(cond);
  graph_definition before = body.graph_definition();  // the body exists with its node
  EXPECT_EQ(before.node_count(), 0u);
  body.begin_building();
  launch(body.stream(), cover(kN), add_one, y, kN);
  launch(body.stream(), cover(kN), add_one, y, kN);
  body.end_building();
  graph_definition after = body.graph_definition();
  EXPECT_TRUE(after == before);
  EXPECT_EQ(before.node_count(), 2u);
  // Captured, then augmented through the view: a third step after the last captured one.
  graph_node last;
  for (const graph_node& n : after.nodes()) {
    if (n.successors().empty()) last = n;
  }
  ASSERT_TRUE(last.valid());
  last.launch(cover(kN), add_one, y, kN);
  EXPECT_EQ(after.node_count(), 3u);
  b.end_building();
  graph exec = b.complete();
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 3)));
}

TEST_F(BuilderView, HybridConditionalBodyBuiltOnlyThroughItsView) {
  SEED_TRACE();
  auto [y0, y] = random_on_device(seed, s);
  buffer z = poisoned(kN, s);
  buffer flag(sizeof(unsigned), s);
  graph_builder b(dev());
  b.begin_building();
  const graph_condition cond = condition_from(b, flag);
  graph_builder body = b.if_then(cond);
  graph_definition body_view = body.graph_definition();  // never begin_building() on the body
  EXPECT_EQ(body_view.node_count(), 0u);
  const graph_node first = body_view.launch(cover(kN), graph_kernel("add_one"), y, kN);
  first.launch(cover(kN), graph_kernel("twice"), y, z, kN);
  b.end_building();
  EXPECT_EQ(body.builder_state(), bstate::not_started);
  EXPECT_EQ(body_view.node_count(), 2u);
  graph exec = b.complete();

  for (unsigned value : {1u, 0u}) {
    SCOPED_TRACE(value);
    y.copy_from(y0, s);
    z.fill(kPoison, s);
    set_flag(flag, value, s);
    exec.launch(s);
    if (value != 0) {
      EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 1)));
      EXPECT_TRUE(same(z.to_vector<float>(s), doubled(plus(y0, 1))));
    } else {
      EXPECT_TRUE(same(y.to_vector<float>(s), y0));
      EXPECT_TRUE(same(z.to_vector<float>(s), std::vector<float>(kN, kPoison)));
    }
  }
}

// ---- embed --------------------------------------------------------------------------------------

TEST_F(BuilderEmbed, EmbedsAFinishedChildBuilder) {
  SEED_TRACE();
  auto [x0, x] = random_on_device(seed, s);
  buffer y = poisoned(kN, s);
  buffer z = poisoned(kN, s);
  const kernel add_one = graph_kernel("add_one");
  const kernel twice = graph_kernel("twice");

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
  graph exec = parent.complete();
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(doubled(x0), 2)));
  EXPECT_TRUE(same(z.to_vector<float>(s), doubled(plus(doubled(x0), 2))));
}

TEST_F(BuilderEmbed, EmbedsAGraphDefinition) {
  SEED_TRACE();
  auto [x0, x] = random_on_device(seed, s);
  buffer y = poisoned(kN, s);
  buffer z = poisoned(kN, s);
  std::optional<graph_definition> child{std::in_place, dev()};
  const graph_node n = child->launch(cover(kN), graph_kernel("add_one"), y, kN);
  n.launch(cover(kN), graph_kernel("add_one"), y, kN);
  n.successors()[0].launch(cover(kN), graph_kernel("add_one"), y, kN);

  graph_builder parent(dev());
  parent.begin_building();
  launch(parent.stream(), cover(kN), graph_kernel("twice"), x, y, kN);
  parent.embed(*child);
  child.reset();  // the parent holds a clone
  launch(parent.stream(), cover(kN), graph_kernel("twice"), y, z, kN);
  parent.end_building();
  graph exec = parent.complete();
  exec.launch(s);
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
  launch(child.stream(), cover(1), graph_kernel("bump"), counter);
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
  graph exec = parent.complete();
  exec.launch(s);
  EXPECT_EQ(read_ints(counter, s), std::vector<int>{1});  // the refused embeds added nothing
}

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

// ---- capture_guard and abandoned captures -------------------------------------------------------

TEST_F(BuilderGuard, AnExceptionInsideTheGuardEndsTheCapture) {
  SEED_TRACE();
  const kernel add_one = graph_kernel("add_one");
  auto [y0, y] = random_on_device(seed, s);
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
  graph exec = b.complete();
  exec.launch(caller);
  EXPECT_TRUE(same(y.to_vector<float>(caller), plus(y0, 2)));
}

TEST_F(BuilderGuard, EndFinishesTheCaptureNormally) {
  SEED_TRACE();
  auto [y0, y] = random_on_device(seed, s);
  graph_builder b(dev());
  {
    capture_guard guard(b, capture_mode::thread_local_);
    EXPECT_EQ(b.builder_state(), bstate::capturing);
    launch(b.stream(), cover(kN), graph_kernel("add_one"), y, kN);
    guard.end();
    EXPECT_EQ(b.builder_state(), bstate::ended);
    EXPECT_NO_THROW(guard.end());  // once ended, the guard has nothing left to do
  }
  EXPECT_EQ(b.builder_state(), bstate::ended);
  graph exec = b.complete();
  exec.launch(s);
  exec.launch(s);
  EXPECT_TRUE(same(y.to_vector<float>(s), plus(y0, 2)));
  // A guard on a builder that cannot begin throws from its constructor.
  EXPECT_THROW(capture_guard again(b), invalid_argument);
}

TEST_F(BuilderGuard, DestroyingABuilderMidCaptureLeavesItsStreamUsable) {
  SEED_TRACE();
  const kernel add_one = graph_kernel("add_one");
  auto [y0, y] = random_on_device(seed, s);
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
  graph exec = again.complete();
  exec.launch(caller);
  EXPECT_TRUE(same(y.to_vector<float>(caller), plus(y0, 2)));
}

// ---- executable graph update --------------------------------------------------------------------

TEST_F(BuilderUpdate, UpdateFromABuilderRedirectsKernelArguments) {
  SEED_TRACE();
  auto [x0, x] = random_on_device(seed, s);
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
  launch(source.stream(), cover(kN), graph_kernel("twice"), y, y, kN);
  launch(source.stream(), cover(kN), graph_kernel("add_one"), y, kN);
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
  SEED_TRACE();
  auto [x0, x] = random_on_device(seed, s);
  buffer y = poisoned(kN, s);
  buffer other = poisoned(kN, s);
  graph exec = capture_twice_plus_one(dev(), x, y).complete();

  graph_builder three(dev());
  three.begin_building();
  launch(three.stream(), cover(kN), graph_kernel("twice"), x, other, kN);
  launch(three.stream(), cover(kN), graph_kernel("add_one"), other, kN);
  launch(three.stream(), cover(kN), graph_kernel("add_one"), other, kN);
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
  SEED_TRACE();
  auto [x0, x] = random_on_device(seed, s);
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
  const kernel bump = graph_kernel("bump");
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

// ---- split and join that fail part-way leave the capture joinable
// ------------------------------------------------

// The capture b made around a split or join that failed: w = x + 1 on the fork, then 2w on b.
void finish_and_check(graph_builder& b, std::vector<graph_builder>& forks, buffer& x, buffer& w,
                      const stream& s, std::uint64_t seed) {
  const bool with_fork = !forks.empty();
  if (with_fork) {
    launch(forks[0].stream(), cover(kN), graph_kernel("add_one"), w, kN);
    b.join(std::move(forks));
  }
  ASSERT_NO_THROW(b.end_building()) << "the capture cannot end (an unjoined fork)";
  graph exec = b.complete();
  const auto hx = random_values<float>(kN, seed);
  x.copy_from(hx, s);
  exec.launch(s);
  std::vector<float> want(hx.size());
  for (std::size_t i = 0; i < hx.size(); ++i) want[i] = hx[i] + (with_fork ? 1.0f : 0.0f);
  EXPECT_TRUE(same(w.to_vector<float>(s), want));
}

TEST_F(BuilderCapture, ASplitThatFailsPartWayLeavesNoForkInTheCapture) {
  SEED_TRACE();
  buffer x = poisoned(kN, s);
  buffer w = poisoned(kN, s);
  // The second fork's stream cannot be made; then, the second fork's wait is refused (after the
  // first fork joined the capture).
  for (const bool at_wait : {false, true}) {
    SCOPED_TRACE(at_wait ? "wait refused" : "stream refused");
    graph_builder b(dev());
    b.begin_building();
    w.copy_from(x, b.stream());
    std::vector<graph_builder> forks;
    if (at_wait) {
      fail_nth_call<&detail::driver_api::cuStreamWaitEvent> fault(2);
      EXPECT_THROW(forks = b.split(3), cuda_error);
      EXPECT_TRUE(decltype(fault)::fired());
    } else {
      fail_nth_call<&detail::driver_api::cuStreamCreateWithPriority> fault(2);
      EXPECT_THROW(forks = b.split(3), cuda_error);
      EXPECT_TRUE(decltype(fault)::fired());
    }
    EXPECT_TRUE(b.is_building());
    finish_and_check(b, forks, x, w, s, seed);
  }
}

TEST_F(BuilderCapture, AJoinThatFailsLeavesEveryForkToTheCaller) {
  SEED_TRACE();
  buffer x = poisoned(kN, s);
  buffer w = poisoned(kN, s);
  graph_builder b(dev());
  b.begin_building();
  w.copy_from(x, b.stream());
  std::vector<graph_builder> forks = b.split(3);
  {
    // The second fork's event cannot be recorded: the first fork was waited for already.
    fail_nth_call<&detail::driver_api::cuEventRecord> fault(2);
    EXPECT_THROW(b.join(std::move(forks)), cuda_error);
    EXPECT_TRUE(decltype(fault)::fired());
  }
  ASSERT_EQ(forks.size(), 2u) << "the caller keeps the forks";
  for (const graph_builder& f : forks) {
    EXPECT_EQ(f.builder_state(), bstate::capturing);
    EXPECT_TRUE(f.is_join_required());
  }
  finish_and_check(b, forks, x, w, s, seed);  // joins them again, for good
}

}  // namespace
}  // namespace cucore
