// Stream capture into CUDA graphs (graph_builder): building and its lifecycle, splits and joins
// (also when they fail part-way), capture modes, closing, and DOT output; adapted from cuda.core's
// test_graph_builder.py (label gpu; each test skips without a device). The other
// graph_builder_*_test.cpp files cover conditionals and views, embeds, callbacks, capture_guard and
// executable graph update.
//
// Capture retains nothing but host callbacks (the documented contract): every buffer captured
// here outlives the graphs that use it. Buffers are allocated and filled on a separate work stream
// before any capture, so no allocation or free is ever captured by accident.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
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
#include "graph_builder_support.hpp"

namespace cucore {
namespace {

using namespace graph_builder_testing;  // graph_builder_support.hpp

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
  auto [y0, y] = random_on_device(kN, seed, s);
  graph_builder b = capture_add_one(dev(), y);
  graph exec = launched(b, s);
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
  graph exec = launched(b, s);
  for (std::size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(same(ys[i].to_vector<float>(s), plus(y0[i], 1)));
    EXPECT_TRUE(same(outs[i].to_vector<float>(s), doubled(plus(y0[i], 1))));
  }
}

TEST_F(BuilderCapture, EveryCaptureModeCaptures) {
  auto [y0, y] = random_on_device(kN, seed, s);
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
  auto [y0, y] = random_on_device(kN, seed, s);
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
  graph_builder none;  // default-constructed: like a closed one
  EXPECT_FALSE(none.valid());
  EXPECT_EQ(none.builder_state(), bstate::closed);
  EXPECT_THROW(none.begin_building(), invalid_argument);
  EXPECT_NO_THROW(none.close());

  auto [y0, y] = random_on_device(kN, seed, s);
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
    const std::string text = read_text(path);
    EXPECT_TRUE(contains(text, "digraph")) << text.substr(0, 200);
    std::filesystem::remove(path);
  }
}

// ---- split and join that fail part-way leave the capture joinable

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
