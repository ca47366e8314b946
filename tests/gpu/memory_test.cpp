// Device memory: pools, buffers, shared owners, stream-ordered frees, pinned host memory
// (label gpu; each test skips without a device).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/event.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "gpu_test_support.hpp"

namespace cucore {
namespace {

using namespace gpu_testing;  // gpu_test_support.hpp

class Memory : public gpu_testing::gpu_test {};

launch_config cover(int n) {
  return {.grid = static_cast<unsigned>((n + 255) / 256), .block = 256};
}

TEST_F(Memory, CopiesRoundTripRandomData) {
  device dev(0);
  stream s(dev);
  const auto seed = fresh_seed();
  const std::size_t n = (1 << 20) + 3;
  auto host = random_values<float>(n, seed);
  buffer a(n * sizeof(float), s);
  EXPECT_EQ(a.size(), n * sizeof(float));
  EXPECT_NE(a.address(), 0u);
  EXPECT_EQ(a.device(), dev);
  a.copy_from(host, s);
  buffer b(n * sizeof(float), s);
  b.fill(kPoison, s);
  b.copy_from(a, s);
  std::vector<float> back(n, kPoison);
  b.copy_to(back, s);
  s.synchronize();
  EXPECT_EQ(mismatches(back, host), 0) << "seed " << seed;

  // Partial copies at an offset.
  std::vector<float> part(100, kPoison);
  b.copy_to(part.data(), part.size() * sizeof(float), s, 1000 * sizeof(float));
  s.synchronize();
  EXPECT_EQ(mismatches(part, std::vector<float>(host.begin() + 1000, host.begin() + 1100)), 0);
}

TEST_F(Memory, FillWritesEveryElement) {
  device dev(0);
  stream s(dev);
  buffer b(4096 * 4, s);
  b.fill(1.5f, s);
  auto floats = b.to_vector<float>(s);
  for (float f : floats) ASSERT_EQ(f, 1.5f);
  b.fill(std::uint16_t{0xbeef}, s);
  for (auto v : b.to_vector<std::uint16_t>(s)) ASSERT_EQ(v, 0xbeef);
  b.fill(std::uint8_t{0x5a}, s);
  for (auto v : b.to_vector<std::uint8_t>(s)) ASSERT_EQ(v, 0x5a);

  buffer odd(7, s);
  EXPECT_THROW(odd.fill(1.0f, s), invalid_argument);
  odd.fill(std::uint8_t{1}, s);
  s.synchronize();
}

TEST_F(Memory, OutOfRangeCopiesAreRefused) {
  device dev(0);
  stream s(dev);
  buffer b(64, s);
  std::vector<float> big(17, 1.0f);
  EXPECT_THROW(b.copy_from(big, s), invalid_argument);
  EXPECT_THROW(b.copy_to(big, s), invalid_argument);
  std::vector<float> small(4, 1.0f);
  EXPECT_THROW(b.copy_from(small, s, 60), invalid_argument);
  buffer bigger(128, s);
  EXPECT_THROW(b.copy_from(bigger, s), invalid_argument);
  buffer empty;
  EXPECT_THROW(empty.size(), invalid_argument);
  EXPECT_THROW(empty.copy_from(small, s), invalid_argument);
  s.synchronize();
}

TEST_F(Memory, ZeroByteBuffers) {
  device dev(0);
  stream s(dev);
  buffer b(0, s);
  EXPECT_TRUE(b.valid());
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(b.address(), 0u);
  std::vector<float> none;
  b.copy_from(none, s);
  b.fill(1.0f, s);
  b.close();
  EXPECT_FALSE(b.valid());
}

TEST_F(Memory, OwnerKeepsTheAllocationAfterTheBufferIsGone) {
  // A kernel reads memory whose buffer object was destroyed, through the shared owner alone.
  const auto& code = test_kernels();
  kernel add_one = code.get_kernel("add_one");
  device dev(0);
  stream s(dev);
  const int n = 50'000;
  const auto seed = fresh_seed();
  auto host = random_values<float>(n, seed);
  std::shared_ptr<const void> owner;
  device_address address = 0;
  {
    buffer in(n * sizeof(float), s);
    in.copy_from(host, s);
    owner = in.owner();
    address = in.address();
  }  // `in` is destroyed; the memory is not freed: `owner` holds it
  ASSERT_TRUE(owner);
  // Allocations made now must not reuse that memory.
  buffer other(n * sizeof(float), s);
  other.fill(kPoison, s);
  EXPECT_NE(other.address(), address);
  buffer out(n * sizeof(float), s);
  out.fill(kPoison, s);
  launch(s, cover(n), add_one, address, out, n);
  auto result = out.to_vector<float>(s);
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += result[i] != host[i] + 1.0f;
  EXPECT_EQ(bad, 0) << "seed " << seed;
  owner.reset();  // freed now, ordered on `s`
  s.synchronize();
}

TEST_F(Memory, KernelArgumentsKeepTheirBuffersAlive) {
  const auto& code = test_kernels();
  kernel add_one = code.get_kernel("add_one");
  device dev(0);
  stream s(dev);
  const int n = 10'000;
  const auto seed = fresh_seed();
  auto host = random_values<float>(n, seed);
  buffer out(n * sizeof(float), s);
  out.fill(kPoison, s);
  kernel_arguments args;
  {
    buffer in(n * sizeof(float), s);
    in.copy_from(host, s);
    args = kernel_arguments(in, out, n);
    EXPECT_EQ(args.owners().size(), 2u);
    EXPECT_EQ(args.count(), 3u);
  }
  launch(s, cover(n), add_one, args);
  auto result = out.to_vector<float>(s);
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += result[i] != host[i] + 1.0f;
  EXPECT_EQ(bad, 0) << "seed " << seed;
}

TEST_F(Memory, CloseWhileALaunchStillRunsFreesInStreamOrder) {
  const auto& code = test_kernels();
  kernel spin = code.get_kernel("spin_scale");
  device dev(0);
  stream s(dev);
  const int n = 1 << 18;
  kernel_io io(n, s);
  const long long cycles = 40'000'000;  // ~20 ms at 2 GHz
  launch(s, cover(n), spin, io.in, io.out, n, cycles);
  io.in.close();  // the free is enqueued after the kernel, which still reads `in`
  EXPECT_FALSE(io.in.valid());
  if (!gpu_testing::launches_may_block()) {
    EXPECT_FALSE(s.query()) << "the spin kernel should still run when the buffer is closed";
  }
  // New allocations on the same stream may reuse the memory only after the free: overwrite it.
  buffer scribble(n * sizeof(float), s);
  scribble.fill(kPoison, s);
  EXPECT_EQ(mismatches(io.out.to_vector<float>(s), doubled(io.host)), 0) << "seed " << io.seed;
}

TEST_F(Memory, CloseOnTheStreamThatLastUsesTheBuffer) {
  // Allocated on s1, used by a long kernel on s2, closed with s2 as the release stream; the
  // stream object s2 is even destroyed before the free runs (the allocation keeps it alive).
  const auto& code = test_kernels();
  kernel spin = code.get_kernel("spin_scale");
  device dev(0);
  stream s1(dev);
  const int n = 1 << 16;
  kernel_io io(n, s1);
  s1.synchronize();
  event done(dev, {.timing = false});
  {
    stream s2(dev);
    launch(s2, cover(n), spin, io.in, io.out, n, 20'000'000LL);
    io.in.close(s2);
    done.record(s2);
  }  // s2's object is gone; its CUstream lives until the free was enqueued
  s1.wait(done);
  EXPECT_EQ(mismatches(io.out.to_vector<float>(s1), doubled(io.host)), 0) << "seed " << io.seed;
}

TEST_F(Memory, OwnPoolOutlivesItsResourceObject) {
  const auto& code = test_kernels();
  kernel add_one = code.get_kernel("add_one");
  device dev(0);
  stream s(dev);
  auto pool = std::make_shared<pool_memory_resource>(
      dev, pool_options{.release_threshold = 64 << 20, .max_size = 0});
  EXPECT_FALSE(pool->is_default_pool());
  EXPECT_EQ(pool->release_threshold(), 64u << 20);
  const int n = 100'000;
  const auto seed = fresh_seed();
  auto host = random_values<float>(n, seed);
  buffer in(n * sizeof(float), s, pool);
  buffer out(n * sizeof(float), s, pool);
  EXPECT_EQ(in.resource(), pool);
  s.synchronize();
  EXPECT_GE(pool->used_bytes(), 2 * n * sizeof(float));
  EXPECT_GE(pool->reserved_bytes(), pool->used_bytes());
  std::weak_ptr<pool_memory_resource> watch = pool;
  pool.reset();  // the buffers keep the resource (and its CUmemoryPool) alive
  EXPECT_FALSE(watch.expired());
  in.copy_from(host, s);
  out.fill(kPoison, s);
  launch(s, cover(n), add_one, in, out, n);
  auto result = out.to_vector<float>(s);
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += result[i] != host[i] + 1.0f;
  EXPECT_EQ(bad, 0) << "seed " << seed;
  in.close();
  out.close();
  EXPECT_TRUE(watch.expired());  // pool destroyed after its frees were enqueued
  s.synchronize();
}

TEST_F(Memory, DefaultResourceIsTheDevicesDefaultPool) {
  device dev(0);
  auto& a = dev.default_memory_resource();
  auto& b = device(0).default_memory_resource();
  EXPECT_EQ(a, b);
  auto pool = std::dynamic_pointer_cast<pool_memory_resource>(a);
  ASSERT_TRUE(pool);
  EXPECT_TRUE(pool->is_default_pool());
  EXPECT_EQ(pool->device(), dev);
  stream s(dev);
  buffer x(1000, s);
  EXPECT_EQ(x.resource(), a);
}

TEST_F(Memory, AnImpossibleAllocationIsACudaError) {
  device dev(0);
  stream s(dev);
  auto pool = std::make_shared<pool_memory_resource>(dev, pool_options{.max_size = 64 << 20});
  try {
    buffer huge(std::size_t{256} << 20, s, pool);
    s.synchronize();
    FAIL() << "expected cuda_error";
  } catch (const cuda_error& e) {
    EXPECT_EQ(e.call(), "cuMemAllocFromPoolAsync");
    EXPECT_EQ(e.result_name(), "CUDA_ERROR_OUT_OF_MEMORY") << e.what();
    EXPECT_NE(std::string(e.what()).find("cuMemAllocFromPoolAsync"), std::string::npos);
  }
}

TEST_F(Memory, PinnedHostMemoryCopies) {
  device dev(0);
  stream s(dev);
  const std::size_t n = 1 << 20;
  const auto seed = fresh_seed();
  auto host = random_values<float>(n, seed);
  pinned_buffer up(n * sizeof(float));
  pinned_buffer down(n * sizeof(float));
  ASSERT_TRUE(up.valid());
  EXPECT_EQ(up.size(), n * sizeof(float));
  auto up_span = up.span<float>();
  ASSERT_EQ(up_span.size(), n);
  std::memcpy(up_span.data(), host.data(), n * sizeof(float));
  auto down_span = down.span<float>();
  std::fill(down_span.begin(), down_span.end(), kPoison);
  buffer d(n * sizeof(float), s);
  d.copy_from(up_span, s);
  d.copy_to(down_span, s);
  auto owner = down.owner();
  s.synchronize();
  int bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += down_span[i] != host[i];
  EXPECT_EQ(bad, 0) << "seed " << seed;
  pinned_buffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
  down.close();
  EXPECT_EQ(down.data(), nullptr);
  EXPECT_EQ(down_span[0], host[0]);  // still pinned and mapped: `owner` holds it
}

}  // namespace
}  // namespace cucore
