// Shared pieces of the explicit graph API tests (graph_definition*_test.cpp): the fixture, the
// inputs of the graph kernels with what they compute, and checks of a graph's structure.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "graph_test_support.hpp"

namespace cucore::graph_definition_testing {

using namespace gpu_testing;  // gpu_test_support.hpp, graph_test_support.hpp

// A stream on device 0 and a fresh seed, named in every failure's trace.
class GraphDefinition : public seeded_stream_test {
 protected:
  // A new executable graph of `def`, launched once on s.
  graph launched(const graph_definition& def, const graph_instantiate_options& options = {}) const {
    graph g = def.instantiate(options);
    g.launch(s);
    return g;
  }
};

// One thread: the condition setters and counters.
inline const launch_config kOne{.grid = 1, .block = 1};

// Elements that differ from the expectation by more than a float rounding or two (the device
// contracts a * x + y into an FMA).
inline int far_off(const std::vector<float>& got, const std::vector<float>& want) {
  int bad = got.size() == want.size() ? 0 : 1;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const float tol = 1e-5f * std::max(1.0f, std::fabs(want[i]));
    bad += !(std::fabs(got[i] - want[i]) <= tol);
  }
  return bad;
}

// Random x and y of n elements, uploaded on `s`, and a random a: the inputs of axpy (y = a * x +
// y).
struct axpy_problem {
  std::vector<float> x0;
  std::vector<float> y0;
  float a;
  buffer x;
  buffer y;

  axpy_problem(int n, std::uint64_t seed, const stream& s)
      : a(random_values<float>(1, seed + 2)[0]) {
    std::tie(x0, x) = random_on_device(n, seed, s);
    std::tie(y0, y) = random_on_device(n, seed + 1, s);
  }

  // Adds to `def` an allocation of x's size (its address in `tmp`), a copy of x into it, and axpy
  // from it into y; returns the axpy node.
  graph_node add_axpy_through_allocation(const graph_definition& def, device_address& tmp) const {
    const std::size_t bytes = x0.size() * sizeof(float);
    graph_node alloc = def.allocate(bytes);
    tmp = alloc.alloc_params().address;
    return alloc.memcpy(tmp, x, bytes).launch(cover(n()), graph_kernel("axpy"), a, tmp, y, n());
  }

  int n() const { return static_cast<int>(x0.size()); }

  // The steps of y = (x + 1) + (y + 1), each added after `from` (the graph, or a node of it).
  template <class From>
  graph_node increment_x(const From& from) const {
    return from.launch(cover(n()), graph_kernel("add_one"), x, n());
  }
  template <class From>
  graph_node increment_y(const From& from) const {
    return from.launch(cover(n()), graph_kernel("add_one"), y, n());
  }
  template <class From>
  graph_node add_x_to_y(const From& from) const {
    return from.launch(cover(n()), graph_kernel("axpy"), 1.0f, x, y, n());
  }
  // y once those steps ran: (x0 + 1) + (y0 + 1).
  std::vector<float> incremented_sum() const {
    std::vector<float> want(y0.size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = (x0[i] + 1.0f) + (y0[i] + 1.0f);
    return want;
  }

  // y after `runs` axpy runs (each a * x0[i] + the previous y[i]).
  std::vector<float> y_after(int runs) const {
    std::vector<float> want = y0;
    for (int r = 0; r < runs; ++r) {
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = a * x0[i] + want[i];
    }
    return want;
  }
};

// A graph of one add_one kernel node over random y (n elements, uploaded on `s`).
struct add_one_graph {
  std::vector<float> y0;
  buffer y;
  graph_definition def;
  graph_node node;

  add_one_graph(const device& dev, const stream& s, int n, std::uint64_t seed)
      : y0(random_values<float>(n, seed)), y(upload(y0, s)), def(dev) {
    node = def.launch(cover(n), graph_kernel("add_one"), y, n);
  }

  // far_off for y against want(y0[i]) at every element.
  template <class Want>
  int y_far_off(const stream& s, Want&& want) const {
    std::vector<float> expected(y0.size());
    for (std::size_t i = 0; i < y0.size(); ++i) expected[i] = want(y0[i]);
    return far_off(y.to_vector<float>(s), expected);
  }
};

inline std::unordered_set<graph_node> as_set(const std::vector<graph_node>& v) {
  return {v.begin(), v.end()};
}

inline bool has_edge(const std::vector<std::pair<graph_node, graph_node>>& edges,
                     const graph_node& from, const graph_node& to) {
  return std::find(edges.begin(), edges.end(), std::make_pair(from, to)) != edges.end();
}

inline int read_int(const buffer& b, const stream& s) {
  return b.to_vector<int>(s).at(0);
}

// A nonzero value from the generator, different from every value in `taken`.
inline std::uint32_t fresh_nonzero(std::mt19937_64& gen, const std::vector<std::uint32_t>& taken) {
  std::uniform_int_distribution<std::uint32_t> dist(1, 0xffffffffu);
  for (;;) {
    const std::uint32_t v = dist(gen);
    if (std::find(taken.begin(), taken.end(), v) == taken.end()) return v;
  }
}

}  // namespace cucore::graph_definition_testing
