// Devices, primary contexts, streams and events (label gpu; each test skips without a device).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/runtime/context.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/event.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "cucore/toolkit.hpp"
#include "gpu_test_support.hpp"

namespace cucore {
namespace {

using namespace gpu_testing;  // gpu_test_support.hpp

class Device : public gpu_testing::gpu_test {};
class Streams : public gpu_testing::gpu_test {};
class Events : public gpu_testing::gpu_test {};

TEST(DeviceWithoutGpu, CountMatchesTheToolkitProbe) {
  // Runs everywhere: never throws, and agrees with toolkit::device_count().
  EXPECT_EQ(device::count(), toolkit::device_count());
}

TEST_F(Device, PropertiesAreThoseOfARealGpu) {
  device dev(0);
  device_properties p = dev.properties();
  EXPECT_FALSE(p.name.empty());
  EXPECT_EQ(p.name, dev.name());
  EXPECT_GE(p.compute_capability.major, 5);
  EXPECT_EQ(p.compute_capability, dev.compute_capability());
  EXPECT_GT(p.multiprocessor_count, 0);
  EXPECT_EQ(p.multiprocessor_count, dev.multiprocessor_count());
  EXPECT_GT(p.total_memory, std::size_t{1} << 30);
  EXPECT_EQ(p.total_memory, dev.total_memory());
  EXPECT_EQ(p.warp_size, 32);
  EXPECT_GE(p.max_threads_per_block, 512);
  EXPECT_GE(p.max_shared_memory_per_block_optin, p.max_shared_memory_per_block);
  EXPECT_TRUE(p.memory_pools_supported);
  auto mem = dev.memory();
  EXPECT_EQ(mem.total, p.total_memory);
  EXPECT_GT(mem.free, 0u);
  EXPECT_LE(mem.free, mem.total);
  auto range = dev.stream_priority_range();
  EXPECT_LE(range.greatest, range.least);
  std::printf("device 0: %s, %s, %d SMs, %zu MiB\n", p.name.c_str(), dev.arch().c_str(),
              p.multiprocessor_count, p.total_memory >> 20);
}

TEST_F(Device, ArchIsTheCompileDefault) {
  device dev(0);
  EXPECT_EQ(dev.arch(), dev.compute_capability().arch());
  EXPECT_EQ(dev.arch().rfind("sm_", 0), 0u);
  ASSERT_TRUE(toolkit::current_device_arch());
  EXPECT_EQ(dev.arch(), *toolkit::current_device_arch());
  EXPECT_EQ((compute_capability{9, 0}.arch()), "sm_90");
  EXPECT_EQ((compute_capability{12, 1}.arch()), "sm_121");
}

TEST_F(Device, OutOfRangeOrdinalIsAClearError) {
  try {
    device bad(device::count());
    FAIL() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  EXPECT_THROW(device(-1), invalid_argument);
}

TEST_F(Device, PrimaryContextIsSharedAndSettable) {
  device dev(0);
  context a = dev.primary_context();
  context b(dev);
  EXPECT_EQ(a, b);
  EXPECT_NE(a.handle(), nullptr);
  EXPECT_EQ(a.device(), dev);
  a.set_current();
  EXPECT_EQ(device::current(), dev);
  a.synchronize();
  dev.synchronize();
}

TEST_F(Device, ThreadsNeedNoSetup) {
  // Fresh threads have no current context: every call pushes the primary context it needs.
  const auto& code = test_kernels();
  kernel add_one = code.get_kernel("add_one");
  constexpr int kThreads = 4;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, seed = fresh_seed()] {
      try {
        device dev(0);
        EXPECT_EQ(device::current(), dev);
        stream s(dev);
        const int n = 4096 + 17;
        auto in_host = random_values<float>(n, seed);
        buffer in(n * sizeof(float), s);
        buffer out(n * sizeof(float), s);
        in.copy_from(in_host, s);
        out.fill(kPoison, s);
        launch(s, {.grid = (n + 255) / 256, .block = 256}, add_one, in, out, n);
        auto result = out.to_vector<float>(s);
        int bad = 0;
        for (int i = 0; i < n; ++i) bad += result[i] != in_host[i] + 1.0f;
        EXPECT_EQ(bad, 0) << "seed " << seed;
        if (bad == 0) ++ok;
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads);
}

TEST_F(Streams, CreateWithFlagsAndPriority) {
  device dev(0);
  auto range = dev.stream_priority_range();
  stream high(dev, {.non_blocking = true, .priority = range.greatest});
  stream low(dev, {.non_blocking = false, .priority = range.least});
  EXPECT_EQ(high.priority(), range.greatest);
  EXPECT_EQ(low.priority(), range.least);
  EXPECT_TRUE(high.non_blocking());
  EXPECT_FALSE(low.non_blocking());
  EXPECT_NE(high.handle(), low.handle());
  EXPECT_TRUE(high.query());
  high.synchronize();
  EXPECT_EQ(high.device(), dev);
}

TEST_F(Streams, MovedFromAndClosedStreamsAreEmpty) {
  device dev(0);
  stream a(dev);
  stream b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(b.valid());
  EXPECT_THROW(a.synchronize(), invalid_argument);
  EXPECT_THROW(stream_ref{a}, invalid_argument);
  auto owner = b.owner();
  b.close();
  EXPECT_FALSE(b.valid());
  EXPECT_THROW(b.handle(), invalid_argument);
  owner.reset();  // now the CUstream is destroyed
}

TEST_F(Streams, EventsOrderWorkAcrossStreams) {
  // s1 runs a slow kernel that writes `mid`; s2 waits on an event recorded after it and reads
  // `mid`. Without the wait s2 would read the poison.
  const auto& code = test_kernels();
  kernel spin = code.get_kernel("spin_scale");
  kernel add_one = code.get_kernel("add_one");
  device dev(0);
  stream s1(dev);
  stream s2(dev);
  const int n = 1 << 16;
  const auto seed = fresh_seed();
  auto in_host = random_values<float>(n, seed);
  buffer in(n * sizeof(float), s1);
  buffer mid(n * sizeof(float), s1);
  buffer out(n * sizeof(float), s1);
  in.copy_from(in_host, s1);
  mid.fill(kPoison, s1);
  out.fill(kPoison, s1);
  s1.synchronize();  // the allocations and fills are done before s2 touches them

  const long long cycles = 20'000'000;  // ~10 ms on a 2 GHz SM clock
  launch(s1, {.grid = (n + 255) / 256, .block = 256}, spin, in, mid, n, cycles);
  event written = s1.record_event({.timing = false});
  if (!gpu_testing::launches_may_block()) {
    EXPECT_FALSE(written.query()) << "the spin kernel should still run";
  }
  s2.wait(written);
  launch(s2, {.grid = (n + 255) / 256, .block = 256}, add_one, mid, out, n);
  auto result = out.to_vector<float>(s2);
  EXPECT_TRUE(written.query());
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += result[i] != 2.0f * in_host[i] + 1.0f;
  EXPECT_EQ(bad, 0) << "seed " << seed;

  // The same through stream::wait(stream): s1 waits for everything enqueued on s2 so far.
  mid.fill(kPoison, s1);
  s1.synchronize();
  launch(s2, {.grid = (n + 255) / 256, .block = 256}, spin, in, mid, n, cycles);
  s1.wait(s2);
  launch(s1, {.grid = (n + 255) / 256, .block = 256}, add_one, mid, out, n);
  result = out.to_vector<float>(s1);
  bad = 0;
  for (int i = 0; i < n; ++i) bad += result[i] != 2.0f * in_host[i] + 1.0f;
  EXPECT_EQ(bad, 0) << "seed " << seed;
}

TEST_F(Events, TimeAKernel) {
  const auto& code = test_kernels();
  kernel spin = code.get_kernel("spin_scale");
  device dev(0);
  stream s(dev);
  const int n = 1024;
  buffer in(n * sizeof(float), s);
  buffer out(n * sizeof(float), s);
  in.copy_from(random_values<float>(n, fresh_seed()), s);
  const long long cycles = 10'000'000;  // ~5 ms at 2 GHz
  event start(dev);
  event end(dev, {.timing = true, .blocking_sync = true});
  EXPECT_TRUE(start.timing());
  start.record(s);
  launch(s, {.grid = 4, .block = 256}, spin, in, out, n, cycles);
  s.record(end);
  end.synchronize();
  EXPECT_TRUE(end.query());
  EXPECT_TRUE(start.query());
  auto elapsed = elapsed_time(start, end);
  std::printf("spin of %lld cycles took %.3f ms\n", cycles, elapsed.count());
  EXPECT_GT(elapsed.count(), 1.0f);
  EXPECT_LT(elapsed.count(), 5000.0f);

  event untimed(dev, {.timing = false});
  untimed.record(s);
  untimed.synchronize();
  EXPECT_THROW(elapsed_time(start, untimed), invalid_argument);

  // An event recorded but not complete: cuEventElapsedTime's CUDA_ERROR_NOT_READY, as cuda_error.
  event late(dev);
  launch(s, {.grid = 4, .block = 256}, spin, in, out, n, cycles);
  late.record(s);
  if (!gpu_testing::launches_may_block()) {
    try {
      elapsed_time(start, late);
      ADD_FAILURE() << "expected cuda_error (the spin kernel should still run)";
    } catch (const cuda_error& e) {
      EXPECT_EQ(e.call(), "cuEventElapsedTime");
      EXPECT_EQ(e.result_name(), "CUDA_ERROR_NOT_READY");
    }
  }
  s.synchronize();
}

TEST_F(Events, OwnerOutlivesTheEventObject) {
  device dev(0);
  stream s(dev);
  event e(dev);
  e.record(s);
  auto owner = e.owner();
  auto* handle = e.handle();
  e.close();
  EXPECT_FALSE(e.valid());
  EXPECT_THROW(e.synchronize(), invalid_argument);
  EXPECT_NE(handle, nullptr);  // still a live CUevent, held by `owner` (a graph node keeps one)
  owner.reset();
  s.synchronize();
}

}  // namespace
}  // namespace cucore
