// Shared pieces of the stream capture tests (graph_builder*_test.cpp): the fixtures, buffers of
// random or poisoned data, comparisons of results, and builders that capture small graphs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "cucore/graph/builder.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "graph_test_support.hpp"

namespace cucore::graph_builder_testing {

using namespace gpu_testing;  // gpu_test_support.hpp, graph_test_support.hpp

using bkind = graph_builder::kind;
using bstate = graph_builder::state;

inline constexpr int kN = 4099;  // not a multiple of the block size

// The fixture of every test here: a device, a work stream (allocations, uploads, launches of the
// executable graphs) and a fresh seed, named in every failure's trace.
class builder_test : public seeded_stream_test {
 protected:
  void SetUp() override {
    seeded_stream_test::SetUp();
    if (IsSkipped()) return;
    add_one = graph_kernel("add_one");
    twice = graph_kernel("twice");
    axpy = graph_kernel("axpy");
    bump = graph_kernel("bump");
  }
  // The executable graph of the finished builder `b`, launched once on `on`.
  static graph launched(graph_builder& b, const stream& on) {
    graph exec = b.complete();
    exec.launch(on);
    return exec;
  }

  // The graph kernels most tests capture.
  kernel add_one;
  kernel twice;
  kernel axpy;
  kernel bump;
};

class BuilderCapture : public builder_test {};
class BuilderConditional : public builder_test {};
class BuilderView : public builder_test {};
class BuilderEmbed : public builder_test {};
class BuilderCallback : public builder_test {};
class BuilderGuard : public builder_test {};
class BuilderUpdate : public builder_test {};

inline buffer ints(std::size_t n, const stream& s, int value = 0) {
  buffer b(n * sizeof(int), s);
  b.fill(value, s);
  return b;
}

// The address of element `index` of a buffer of 4-byte elements.
inline device_address element(const buffer& b, std::size_t index) {
  return b.address() + index * 4;
}

inline void set_flag(buffer& flag, unsigned value, const stream& s) {
  flag.copy_from(&value, sizeof(value), s);
}

inline std::vector<float> plus(const std::vector<float>& v, int times) {
  std::vector<float> out = v;
  for (float& x : out) {
    for (int i = 0; i < times; ++i) x = x + 1.0f;
  }
  return out;
}

// Whether match(got[i], want[i]) holds for every element; reports the first difference.
template <class Want, class Match>
inline ::testing::AssertionResult every_element(const std::vector<float>& got,
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
inline ::testing::AssertionResult same(const std::vector<float>& got,
                                       const std::vector<float>& want) {
  return every_element(got, want, [](float g, float w) { return g == w; });
}

// Within `tolerance` (for axpy, which the device may fuse).
inline ::testing::AssertionResult near(const std::vector<float>& got,
                                       const std::vector<double>& want, double tolerance) {
  return every_element(got, want,
                       [tolerance](float g, double w) { return std::fabs(g - w) <= tolerance; });
}

// got = a * u + rest, computed in double, within 8 float epsilons of the terms' magnitudes (the
// device may fuse the multiply and the add).
inline ::testing::AssertionResult near_axpy(const std::vector<float>& got, float a,
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

inline std::vector<int> read_ints(const buffer& b, const stream& s) {
  return b.to_vector<int>(s);
}

// A new condition of the builder's graph, set (by a captured kernel) from the unsigned in `from`
// at every launch.
inline graph_condition condition_from(const graph_builder& b, const buffer& from) {
  const graph_condition cond = b.create_condition();
  launch(b.stream(), cover(1), graph_kernel("set_condition_from"), cond, from);
  return cond;
}

// A finished builder capturing `y += 1` (one kernel node).
inline graph_builder capture_add_one(const device& d, const buffer& y) {
  graph_builder b(d);
  b.begin_building();
  launch(b.stream(), cover(kN), graph_kernel("add_one"), y, kN);
  b.end_building();
  return b;
}

// A finished builder capturing `out = 2 * in; out += 1` (two kernel nodes).
inline graph_builder capture_twice_plus_one(const device& d, const buffer& in, const buffer& out) {
  graph_builder b(d);
  b.begin_building();
  launch(b.stream(), cover(kN), graph_kernel("twice"), in, out, kN);
  launch(b.stream(), cover(kN), graph_kernel("add_one"), out, kN);
  b.end_building();
  return b;
}

}  // namespace cucore::graph_builder_testing
