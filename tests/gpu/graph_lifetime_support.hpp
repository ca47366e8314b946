// Shared pieces of the graph lifetime tests (graph_lifetime*_test.cpp): fresh random data for every
// launch, the fixtures, and a sample graph whose owners the tests drop and then watch through weak
// references.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "graph_test_support.hpp"

namespace cucore::graph_lifetime_testing {

using namespace gpu_testing;  // gpu_test_support.hpp, graph_test_support.hpp

inline constexpr int kN = 3000;  // not a multiple of the block size
inline constexpr std::size_t kBytes = kN * sizeof(float);
inline constexpr int kRounds = 3;  // launches per executable graph, each on fresh data

// Fresh data for launch `round`.
inline std::vector<float> round_data(std::uint64_t seed, int round) {
  return random_values<float>(kN, seed + 0x9e3779b97f4a7c15ull * static_cast<unsigned>(round + 1));
}

// Every element matches (exactly, or within a relative tolerance).
inline ::testing::AssertionResult all_match(const std::vector<float>& got,
                                            const std::vector<float>& want,
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
inline std::vector<float> launch_with(const graph& exec, buffer& in, buffer& out,
                                      const std::vector<float>& data, const stream& s) {
  in.copy_from(data, s);
  out.fill(kPoison, s);
  exec.launch(s);
  return out.to_vector<float>(s);
}

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

inline sample add_sample(const graph_definition& g, const stream& s) {
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
inline void run_sample(const graph& exec, sample& smp, const stream& s, std::uint64_t seed) {
  each_round(seed, [&](const std::vector<float>& data, int) {
    const int before = smp.calls->load();
    EXPECT_TRUE(all_match(launch_with(exec, smp.in, smp.out, data, s), doubled(data)));
    EXPECT_EQ(smp.calls->load(), before + 1);
  });
}

// A device, a stream (synchronized at the end) and a fresh seed, named in every failure's trace.
class GraphLifetime : public seeded_gpu_test {
 protected:
  void SetUp() override {
    seeded_gpu_test::SetUp();
    if (IsSkipped()) return;
    dev_.emplace(0);
    stream_.emplace(*dev_);
  }
  void TearDown() override {
    if (stream_) stream_->synchronize();
  }
  const device& dev() const { return *dev_; }
  const stream& s() const { return *stream_; }

  // A new definition, emplaced in `g`, with a sample whose owners it alone holds.
  sample new_sample(std::optional<graph_definition>& g) const {
    g.emplace(dev());
    return add_sample(*g, s());
  }
  // run_sample on `exec`, with this test's seed (plus `offset`, for a second sample).
  void run(const graph& exec, sample& smp, std::uint64_t offset = 0) const {
    run_sample(exec, smp, s(), seed + offset);
  }
  // run() on a new executable graph of `def`, destroyed again at the end.
  void run(const graph_definition& def, sample& smp) const {
    graph exec = def.instantiate();
    run(exec, smp);
  }
  // A new executable graph of `def`, which is destroyed.
  static graph executable_without(std::optional<graph_definition>& def) {
    graph exec = def->instantiate();
    def.reset();
    return exec;
  }
  // run() on a new executable graph of `def`, which is destroyed first; the executable graph goes
  // at the end.
  void run_without(std::optional<graph_definition>& def, sample& smp) const {
    run(executable_without(def), smp);
  }
  // The checks for `last`, the last holder of a sample's owners (an executable graph, or a
  // definition run through a new executable graph): they are alive (`why`), live through its
  // launches, and go with it.
  template <class Holder>
  void expect_last_holder(sample& smp, const char* why, Holder& last) const {
    EXPECT_TRUE(smp.all_alive()) << why;
    if constexpr (std::is_same_v<Holder, graph>) {
      run(last, smp);
    } else {
      run(*last, smp);
    }
    EXPECT_TRUE(smp.all_alive()) << why;
    last = Holder();
    EXPECT_TRUE(smp.all_expire());
  }

 private:
  std::optional<device> dev_;
  std::optional<stream> stream_;
};

// For tests that watch one buffer, `z`, used by several nodes (copied from `in`, doubled into
// `out` by `k`): the test drops `z` and watches it through `wz`.
class GraphLifetimeWatched : public GraphLifetime {
 protected:
  void SetUp() override {
    GraphLifetime::SetUp();
    if (IsSkipped()) return;
    in.emplace(kBytes, s());
    out.emplace(kBytes, s());
    z.emplace(kBytes, s());
    wz = z->owner();
    k = graph_kernel("twice");
  }
  // kRounds launches of `exec` on fresh data: out must be 2 * in.
  void expect_doubles(const graph& exec) {
    each_round(seed, [&](const std::vector<float>& data, int) {
      EXPECT_TRUE(all_match(launch_with(exec, *in, *out, data, s()), doubled(data)));
    });
  }

  std::optional<buffer> in;
  std::optional<buffer> out;
  std::optional<buffer> z;
  std::weak_ptr<const void> wz;
  kernel k;
};

}  // namespace cucore::graph_lifetime_testing
