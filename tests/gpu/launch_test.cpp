// Kernels from compiled code and typed launches: compile through a real cache, load, launch, check
// on fresh random inputs (label gpu; each test skips without a device).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cucore/cache/in_memory.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"
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

class Launch : public gpu_testing::gpu_test {};
class Kernels : public gpu_testing::gpu_test {};

// Runs everywhere: argument packing needs no GPU.
TEST(KernelArguments, PackCopiesWithTheirSizesAndAlignment) {
  struct alignas(16) wide {
    double a;
    double b;
  };
  const wide w{4.0, -5.5};
  kernel_arguments args(char{7}, 2.5, 3, w, device_address{0x1234}, short{-2});
  ASSERT_EQ(args.count(), 6u);
  const std::size_t sizes[] = {1, 8, 4, 16, 8, 2};
  const std::size_t aligns[] = {1, 8, 4, 16, 8, 2};
  auto pointers = args.pointers();
  ASSERT_EQ(pointers.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(args.size_of(i), sizes[i]);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pointers[i]) % aligns[i], 0u) << i;
  }
  char c = 0;
  double d = 0;
  int n = 0;
  wide got{};
  device_address address = 0;
  short sh = 0;
  std::memcpy(&c, pointers[0], 1);
  std::memcpy(&d, pointers[1], 8);
  std::memcpy(&n, pointers[2], 4);
  std::memcpy(&got, pointers[3], 16);
  std::memcpy(&address, pointers[4], 8);
  std::memcpy(&sh, pointers[5], 2);
  EXPECT_EQ(c, 7);
  EXPECT_EQ(d, 2.5);
  EXPECT_EQ(n, 3);
  EXPECT_EQ(got.a, 4.0);
  EXPECT_EQ(got.b, -5.5);
  EXPECT_EQ(address, 0x1234u);
  EXPECT_EQ(sh, -2);
  EXPECT_TRUE(args.owners().empty());
  kernel_arguments copy = args;  // owned storage: copies are independent
  EXPECT_EQ(copy.count(), 6u);
  EXPECT_NE(copy.pointers()[0], pointers[0]);
}

// Runs only without a GPU (CI): the runtime fails with an error, never a crash.
TEST(RuntimeWithoutGpu, CallsFailWithAClearError) {
  if (toolkit::device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_EQ(device::count(), 0);
  EXPECT_THROW(device(0), error);
  object_code ptx = object_code::from_ptx(".version 8.0\n.target sm_90\n.address_size 64\n");
  object_code copy = ptx;  // usable without a GPU: loading waits for get_kernel
  EXPECT_EQ(copy, ptx);
  EXPECT_THROW(ptx.get_kernel("anything"), error);
}

template <class T>
void check_saxpy(const kernel& k, int n) {
  device dev(0);
  stream s(dev);
  const auto seed = fresh_seed();
  auto x = random_values<T>(n, seed);
  auto y = random_values<T>(n, seed + 1);
  const T a = random_values<T>(1, seed + 2)[0];
  buffer dx(n * sizeof(T), s);
  buffer dy(n * sizeof(T), s);
  dx.copy_from(x, s);
  dy.copy_from(y, s);
  launch(s, {.grid = static_cast<unsigned>((n + 127) / 128), .block = 128}, k, a, dx, dy, n);
  auto result = dy.template to_vector<T>(s);
  // The device rounds once (a fused multiply-add); compare with extended precision.
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    const long double ax = static_cast<long double>(a) * x[i];
    const long double want = ax + y[i];
    const long double scale = std::fabs(ax) + std::fabs(static_cast<long double>(y[i]));
    bad += !(std::fabs(result[i] - want) <= 4 * std::numeric_limits<T>::epsilon() * scale);
  }
  EXPECT_EQ(bad, 0) << "seed " << seed;
}

TEST_F(Launch, CompileThroughTheCacheThenLaunch) {
  gpu_testing::scratch_cache cache;
  program first(kKernels, source_type::cxx, kernel_options());
  object_code compiled = first.compile(code_type::cubin, kernel_names(), &cache.cache());
  EXPECT_EQ(first.last_cache_outcome(), cache_outcome::miss);
  program second(kKernels, source_type::cxx, kernel_options());
  object_code hit = second.compile(code_type::cubin, kernel_names(), &cache.cache());
  EXPECT_EQ(second.last_cache_outcome(), cache_outcome::hit);
  EXPECT_EQ(hit, compiled);
  // The hit carries the symbol mapping: name expressions find the kernels.
  check_saxpy<float>(hit.get_kernel("saxpy<float>"), 100'003);
  check_saxpy<double>(hit.get_kernel("saxpy<double>"), 4097);
  check_saxpy<float>(compiled.get_kernel("saxpy<float>"), 1);
}

TEST_F(Launch, PtxIsCompiledByTheDriverOnLoad) {
  in_memory_program_cache cache;
  program p(kKernels, source_type::cxx, kernel_options());
  object_code ptx = p.compile(code_type::ptx, kernel_names(), &cache);
  ASSERT_EQ(ptx.type(), code_type::ptx);
  check_saxpy<float>(ptx.get_kernel("saxpy<float>"), 65'536);
}

TEST_F(Kernels, CopiesOfObjectCodeLoadOnce) {
  const object_code& code = test_kernels();
  object_code copy = code;
  kernel a = code.get_kernel("saxpy<float>");
  kernel b = copy.get_kernel("saxpy<float>");
  EXPECT_EQ(a, b);  // the same CUkernel: one cuLibraryLoadData for all copies
  EXPECT_EQ(a.handle(), b.handle());
  EXPECT_EQ(a.name(), "saxpy<float>");
  EXPECT_EQ(a.symbol(), "_Z5saxpyIfEvT_PKS0_PS0_i");
  kernel c = code.get_kernel("_Z5saxpyIfEvT_PKS0_PS0_i");  // the mangled name works too
  EXPECT_EQ(a, c);
}

TEST_F(Kernels, TheLibraryStaysLoadedWhileAKernelLives) {
  kernel k;
  {
    program p(kKernels, source_type::cxx, kernel_options());
    object_code code = p.compile(code_type::cubin, kernel_names());
    k = code.get_kernel("saxpy<double>");
  }  // the object_code is gone; `k` keeps the library loaded
  check_saxpy<double>(k, 3000);
  auto owner = k.owner();
  k = kernel();
  EXPECT_FALSE(k.valid());
  EXPECT_THROW(k.handle(), invalid_argument);
  EXPECT_TRUE(owner);
}

TEST_F(Kernels, UnknownNamesAndUnloadableCodeAreClearErrors) {
  const object_code& code = test_kernels();
  try {
    code.get_kernel("saxpy<int>");  // not among the name expressions compiled
    FAIL() << "expected cuda_error";
  } catch (const cuda_error& e) {
    EXPECT_EQ(e.call(), "cuLibraryGetKernel");
    EXPECT_EQ(e.result_name(), "CUDA_ERROR_NOT_FOUND");
    EXPECT_TRUE(contains(e.what(), "saxpy<int>")) << e.what();
    EXPECT_TRUE(contains(e.what(), "name expression")) << e.what();
  }
  // Loading is refused before the driver sees the bytes.
  object_code ltoir = object_code::from_ltoir(std::vector<std::byte>(64, std::byte{0x42}));
  try {
    ltoir.get_kernel("add_one");
    FAIL() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "ltoir")) << e.what();
    EXPECT_TRUE(contains(e.what(), "linker")) << e.what();
  }
  std::vector<std::byte> junk(64, std::byte{0x42});
  junk.back() = std::byte{0};  // the driver reads an image of unknown format up to a NUL
  object_code garbage = object_code::from_cubin(junk);
  EXPECT_THROW(garbage.get_kernel("add_one"), cuda_error);
}

TEST_F(Kernels, Attributes) {
  device dev(0);
  const object_code& code = test_kernels();
  kernel reverse = code.get_kernel("reverse_static_shared");
  kernel_attributes a = reverse.attributes(dev);
  EXPECT_EQ(a.shared_size_bytes, 256 * 4);
  EXPECT_GT(a.num_regs, 0);
  EXPECT_LE(a.num_regs, 255);
  EXPECT_GT(a.max_threads_per_block, 0);
  EXPECT_LE(a.max_threads_per_block, 1024);
  auto cc = dev.compute_capability();
  EXPECT_EQ(a.binary_version, cc.major * 10 + cc.minor);
  EXPECT_EQ(a.local_size_bytes, 0);
  EXPECT_EQ(reverse.attributes().num_regs, a.num_regs);

  auto params = code.get_kernel("spin_scale").parameters();
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[0].size, 8u);
  EXPECT_EQ(params[2].size, 4u);
  EXPECT_EQ(params[3].size, 8u);
  EXPECT_EQ(params[3].offset, 24u);
}

TEST_F(Kernels, SharedMemoryStaticAndDynamic) {
  device dev(0);
  stream s(dev);
  const auto& code = test_kernels();
  const auto seed = fresh_seed();
  // Static: reverse 256 values through shared memory.
  auto in_host = random_values<float>(256, seed);
  buffer in(256 * sizeof(float), s);
  buffer out(256 * sizeof(float), s);
  in.copy_from(in_host, s);
  out.fill(kPoison, s);
  launch(s, {.grid = 1, .block = 256}, code.get_kernel("reverse_static_shared"), in, out);
  auto reversed = out.to_vector<float>(s);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(reversed[i], in_host[255 - i]) << "seed " << seed;

  // Dynamic, above the 48 KiB default: needs the attribute raised first.
  kernel sum = code.get_kernel("sum_dynamic_shared");
  const int n = 80 * 1024 / 4;  // 80 KiB of floats
  auto values = random_values<float>(n, seed + 1);
  buffer big(n * sizeof(float), s);
  buffer total(sizeof(float), s);
  big.copy_from(values, s);
  total.fill(kPoison, s);
  const launch_config config{.grid = 1, .block = 256, .shared_memory_bytes = n * sizeof(float)};
  EXPECT_THROW(launch(s, config, sum, big, total, n), cuda_error);
  sum.set_max_dynamic_shared_memory(n * sizeof(float), dev);
  EXPECT_EQ(sum.attributes(dev).max_dynamic_shared_size_bytes, static_cast<int>(n * sizeof(float)));
  launch(s, config, sum, big, total, n);
  double want = 0.0;
  for (float v : values) want += v;
  float got = total.to_vector<float>(s)[0];
  EXPECT_NEAR(got, want, 1e-3 * (1.0 + std::abs(want))) << "seed " << seed;
}

TEST_F(Launch, WrongArgumentCountIsAClearError) {
  device dev(0);
  stream s(dev);
  kernel add_one = test_kernels().get_kernel("add_one");
  buffer in(1024, s);
  buffer out(1024, s);
  try {
    launch(s, {.grid = 1, .block = 256}, add_one, in, out);
    FAIL() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "add_one")) << e.what();
    EXPECT_TRUE(contains(e.what(), "takes 3 parameter(s)")) << e.what();
    EXPECT_TRUE(contains(e.what(), "passed 2 argument(s)")) << e.what();
  }
  EXPECT_THROW(launch(s, {.grid = 1, .block = 256}, add_one, in, out, 256, 1), invalid_argument);
  EXPECT_THROW(launch(s, {.grid = 1, .block = 256}, add_one), invalid_argument);
  // The right count but a double where the kernel takes an int.
  try {
    launch(s, {.grid = 1, .block = 256}, add_one, in, out, 256.0);
    FAIL() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "argument 2")) << e.what();
    EXPECT_TRUE(contains(e.what(), "is 8 bytes")) << e.what();
    EXPECT_TRUE(contains(e.what(), "is 4 bytes")) << e.what();
  }
  s.synchronize();
}

TEST_F(Launch, StructAndSmallArguments) {
  device dev(0);
  stream s(dev);
  kernel k = test_kernels().get_kernel("struct_argument");
  const auto seed = fresh_seed();
  auto r = random_values<double>(2, seed);
  gpu_testing::mixed m{static_cast<int>(r[0] * 1000), r[1], static_cast<float>(r[0])};
  const char c = 7;
  const short sh = -300;
  buffer out(sizeof(double), s);
  out.fill(std::uint32_t{0xffffffff}, s);
  launch(s, {.grid = 1, .block = 1}, k, m, c, sh, out);
  double want = m.i + m.d + m.f + c + sh;
  EXPECT_DOUBLE_EQ(out.to_vector<double>(s)[0], want) << "seed " << seed;
}

TEST_F(Launch, BadConfigurationsAreRefusedBeforeTheDriver) {
  device dev(0);
  stream s(dev);
  kernel add_one = test_kernels().get_kernel("add_one");
  buffer in(1024, s);
  buffer out(1024, s);
  EXPECT_THROW(launch(s, {.grid = 0, .block = 256}, add_one, in, out, 256), invalid_argument);
  EXPECT_THROW(launch(s, {.grid = 1, .block = dim3(16, 0)}, add_one, in, out, 256),
               invalid_argument);
  EXPECT_THROW(launch(s, {.grid = 3, .block = 32, .cluster = dim3(2)}, add_one, in, out, 256),
               invalid_argument);
  EXPECT_THROW(launch(s, {.grid = 1, .block = 32}, kernel(), in, out, 256), invalid_argument);
  // What the driver refuses is a cuda_error naming the call.
  try {
    launch(s, {.grid = 1, .block = 4096}, add_one, in, out, 256);
    FAIL() << "expected cuda_error";
  } catch (const cuda_error& e) {
    EXPECT_EQ(e.call(), "cuLaunchKernelEx");
    EXPECT_EQ(e.result_name(), "CUDA_ERROR_INVALID_VALUE") << e.what();
  }
  s.synchronize();
}

TEST_F(Launch, ClustersAndCooperativeLaunches) {
  device dev(0);
  stream s(dev);
  const auto& code = test_kernels();
  // Cooperative: a plain kernel launched with the attribute runs as usual.
  const int n = 2048;
  kernel_io io(n, s);
  launch(s, {.grid = n / 256, .block = 256, .cooperative = true}, code.get_kernel("add_one"), io.in,
         io.out, n);
  auto result = io.out.to_vector<float>(s);
  for (int i = 0; i < n; ++i) ASSERT_EQ(result[i], io.host[i] + 1.0f) << "seed " << io.seed;

  if (dev.compute_capability().major < 9) {
    GTEST_SKIP() << "thread block clusters need compute capability 9.0";
  }
  buffer ranks(8 * sizeof(unsigned), s);
  ranks.fill(std::uint32_t{0xdeadbeef}, s);
  launch(s, {.grid = 8, .block = 32, .cluster = dim3(4)}, code.get_kernel("cluster_rank"), ranks);
  auto got = ranks.to_vector<unsigned>(s);
  for (unsigned i = 0; i < 8; ++i) EXPECT_EQ(got[i], i % 4);
}

}  // namespace
}  // namespace cucore
