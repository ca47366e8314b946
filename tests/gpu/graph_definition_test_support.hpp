// The graph definition tests' shared pieces (graph_definition*_test.cpp): the fixture, and small
// problems and readers the tests build graphs from and check them with.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/linker.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/event.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "cucore/toolkit.hpp"
#include "graph_test_support.hpp"

namespace cucore::graph_definition_testing {

using namespace gpu_testing;  // gpu_test_support.hpp, graph_test_support.hpp

// A fresh seed for every test, named in every failure's trace.
class GraphDefinition : public gpu_testing::gpu_test {
 protected:
  const std::uint64_t seed = fresh_seed();

 private:
  const ::testing::ScopedTrace seed_trace_{__FILE__, __LINE__, "seed " + std::to_string(seed)};
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
      : x0(random_values<float>(n, seed)),
        y0(random_values<float>(n, seed + 1)),
        a(random_values<float>(1, seed + 2)[0]),
        x(upload(x0, s)),
        y(upload(y0, s)) {}

  // y after `runs` axpy runs (each a * x0[i] + the previous y[i]).
  std::vector<float> y_after(int runs) const {
    std::vector<float> want = y0;
    for (int r = 0; r < runs; ++r) {
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = a * x0[i] + want[i];
    }
    return want;
  }
};

// Random y and z of n elements, uploaded on `s`.
struct y_and_z {
  std::vector<float> y0;
  std::vector<float> z0;
  buffer y;
  buffer z;

  y_and_z(int n, std::uint64_t seed, const stream& s)
      : y0(random_values<float>(n, seed)),
        z0(random_values<float>(n, seed + 1)),
        y(upload(y0, s)),
        z(upload(z0, s)) {}

  // y once both were incremented and z was added to y: (z0 + 1) + (y0 + 1).
  std::vector<float> incremented_sum() const {
    std::vector<float> want(y0.size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = (z0[i] + 1.0f) + (y0[i] + 1.0f);
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

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
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
