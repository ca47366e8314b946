// Several devices (labels gpu, multigpu): peer access, cross-device buffer copies, one object_code
// launched on two devices, cross-device graph copies and graph allocations with peer access. Every
// test skips with a reason on a machine with fewer than two GPUs.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cucore/cache/file_stream.hpp"
#include "cucore/error.hpp"
#include "cucore/graph/builder.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/program.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "gpu_test_support.hpp"
#include "graph_test_support.hpp"
#include "loader/libraries.hpp"  // the driver table: a peer query answering "no path"

namespace cucore {
namespace {

using namespace gpu_testing;  // gpu_test_support.hpp, graph_test_support.hpp

class MultiGpu : public gpu_testing::gpu_test {
 protected:
  void SetUp() override {
    gpu_testing::gpu_test::SetUp();
    if (IsSkipped()) return;
    if (device::count() < 2) {
      GTEST_SKIP() << "needs two CUDA devices, this machine has " << device::count()
                   << ": the multigpu tests run on a two-GPU machine";
    }
  }
};

launch_config cover(int n) {
  return {.grid = static_cast<unsigned>((n + 255) / 256), .block = 256};
}

TEST_F(MultiGpu, PeerAccessQueryIsConsistentAndEnablingIsIdempotent) {
  device d0(0), d1(1);
  EXPECT_FALSE(d0.can_access_peer(d0));
  EXPECT_THROW(d0.enable_peer_access(d0), invalid_argument);
  if (!d0.can_access_peer(d1)) {
    EXPECT_THROW(d0.enable_peer_access(d1), invalid_argument);
    GTEST_SKIP() << "devices 0 and 1 have no peer path; checked only the refusal";
  }
  ASSERT_TRUE(d1.can_access_peer(d0)) << "peer capability is expected to be symmetric";
  // Twice, and from several threads at once: all succeed (ALREADY_ENABLED is success).
  d0.enable_peer_access(d1);
  d0.enable_peer_access(d1);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      d1.enable_peer_access(d0);
      d0.enable_peer_access(d1);
    });
  }
  for (auto& t : threads) t.join();
}

TEST_F(MultiGpu, ThreadsUseBothDevicesAndKeepTheirCurrentContext) {
  // Each thread makes one device current, then works on both: every call pushes the right
  // primary context, and the thread's own current context is left as it was.
  std::vector<std::thread> threads;
  std::vector<int> failures(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([t, &failures] {
      const device mine(t % 2);
      mine.set_current();
      for (int i = 0; i < 10; ++i) {
        const device d((t + i) % 2);
        stream s(d);
        buffer b(4096 * sizeof(std::uint32_t), s);
        const auto value = static_cast<std::uint32_t>(t * 1000 + i);
        b.fill(value, s);
        for (std::uint32_t x : b.to_vector<std::uint32_t>(s)) failures[t] += x != value;
        failures[t] += b.device() != d;
        failures[t] += device::current() != mine;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

TEST_F(MultiGpu, PoolAccessIsGrantedAndTakenBack) {
  device d0(0), d1(1);
  if (!d1.can_access_peer(d0)) GTEST_SKIP() << "devices 0 and 1 have no peer path";
  auto pool = std::make_shared<pool_memory_resource>(d0);
  EXPECT_FALSE(pool->access(d1));
  pool->set_access(d1);
  EXPECT_TRUE(pool->access(d1));
  pool->set_access(d1, false);
  EXPECT_FALSE(pool->access(d1));
  EXPECT_THROW(pool->set_access(d0), invalid_argument);
}

// Device 0 → device 1 → device 0 on a stream of either device, random data, compared.
void round_trip(const stream& s0, const stream& s1, std::size_t n) {
  const auto seed = fresh_seed();
  const auto host = random_values<float>(n, seed);
  buffer a(n * sizeof(float), s0);
  a.copy_from(host, s0);
  buffer b(n * sizeof(float), s1);
  b.fill(kPoison, s1);
  // a's upload on s0 and b's fill on s1 must be done before s1 copies: synchronize both.
  s0.synchronize();
  s1.synchronize();
  b.copy_from(a, s1);  // ordered on device 1's stream
  buffer c(n * sizeof(float), s0);
  c.fill(kPoison, s0);
  s0.wait(s1);         // the copy into b before s0 reads b
  c.copy_from(b, s0);  // ordered on device 0's stream
  EXPECT_EQ(mismatches(c.to_vector<float>(s0), host), 0) << "seed " << seed;
  EXPECT_EQ(mismatches(b.to_vector<float>(s1), host), 0) << "seed " << seed;
}

TEST_F(MultiGpu, CrossDeviceCopiesRoundTripWithoutPeerAccess) {
  // Fresh pools with no peer access: the driver must still copy (peer to peer or staged).
  device d0(0), d1(1);
  stream s0(d0), s1(d1);
  auto p0 = std::make_shared<pool_memory_resource>(d0);
  auto p1 = std::make_shared<pool_memory_resource>(d1);
  const std::size_t n = (1 << 20) + 7;
  const auto seed = fresh_seed();
  const auto host = random_values<float>(n, seed);
  buffer a(n * sizeof(float), s0, p0);
  a.copy_from(host, s0);
  s0.synchronize();
  buffer b(n * sizeof(float), s1, p1);
  b.copy_from(a, s1);
  EXPECT_EQ(mismatches(b.to_vector<float>(s1), host), 0) << "seed " << seed;
  buffer c(n * sizeof(float), s0, p0);
  c.copy_from(b, s0);
  EXPECT_EQ(mismatches(c.to_vector<float>(s0), host), 0) << "seed " << seed;
}

TEST_F(MultiGpu, CrossDeviceCopiesRoundTripWithPeerAccess) {
  device d0(0), d1(1);
  if (!d0.can_access_peer(d1) || !d1.can_access_peer(d0)) {
    GTEST_SKIP() << "devices 0 and 1 have no peer path";
  }
  d0.enable_peer_access(d1);
  d1.enable_peer_access(d0);
  auto p0 = std::static_pointer_cast<pool_memory_resource>(d0.default_memory_resource());
  auto p1 = std::static_pointer_cast<pool_memory_resource>(d1.default_memory_resource());
  p0->set_access(d1);
  p1->set_access(d0);
  stream s0(d0), s1(d1);
  round_trip(s0, s1, (1 << 22) + 1);
  s0.synchronize();  // the buffers' frees are done before the mappings change
  s1.synchronize();
  p0->set_access(d1, false);  // the default pools are process-wide: put them back
  p1->set_access(d0, false);
}

TEST_F(MultiGpu, CopyIsOrderedOnTheGivenStream) {
  // Several copies back to back on one stream without host synchronization in between: each
  // sees the previous one's result.
  device d0(0), d1(1);
  stream s0(d0), s1(d1);
  const std::size_t n = 1 << 20;
  const auto seed = fresh_seed();
  const auto host = random_values<float>(n, seed);
  buffer a(n * sizeof(float), s1);
  a.copy_from(host, s1);
  buffer b(n * sizeof(float), s1, d0.default_memory_resource());  // on device 0, ordered on s1
  EXPECT_EQ(b.device(), d0);
  b.copy_from(a, s1);
  a.fill(kPoison, s1);
  a.copy_from(b, s1);
  EXPECT_EQ(mismatches(a.to_vector<float>(s1), host), 0) << "seed " << seed;
}

TEST_F(MultiGpu, OneObjectCodeLaunchesOnBothDevices) {
  device d0(0), d1(1);
  if (d0.compute_capability() != d1.compute_capability()) {
    GTEST_SKIP() << "devices 0 and 1 differ in architecture; the test cubin is for device 0";
  }
  const kernel k = test_kernels().get_kernel("add_one");
  const int n = 100003;
  for (int ordinal : {0, 1, 0}) {
    device d(ordinal);
    stream s(d);
    const auto seed = fresh_seed();
    const auto in_host = random_values<float>(static_cast<std::size_t>(n), seed);
    buffer in(n * sizeof(float), s), out(n * sizeof(float), s);
    in.copy_from(in_host, s);
    out.fill(kPoison, s);
    launch(s, cover(n), k, in, out, n);
    auto want = in_host;
    for (auto& x : want) x += 1.0f;
    EXPECT_EQ(mismatches(out.to_vector<float>(s), want), 0)
        << "device " << ordinal << ", seed " << seed;
    EXPECT_GT(k.attributes(d).max_threads_per_block, 0);
  }
}

TEST_F(MultiGpu, GraphCopyBetweenPoolsNeedsAccessAndKeepsBothBuffersAlive) {
  // A copy node runs on one device, which must reach both operands: between two pools that grant
  // no access it is refused with the rule; once device 0 may use device 1's pool it runs, and the
  // graph keeps both buffers alive.
  device d0(0), d1(1);
  if (!d0.can_access_peer(d1)) GTEST_SKIP() << "device 0 cannot reach device 1";
  auto p0 = std::make_shared<pool_memory_resource>(d0);
  auto p1 = std::make_shared<pool_memory_resource>(d1);
  stream s0(d0), s1(d1);
  const std::size_t n = 1 << 18;
  const std::size_t bytes = n * sizeof(float);
  const auto seed = fresh_seed();
  const auto host = random_values<float>(n, seed);
  std::weak_ptr<const void> src_owner, dst_owner;
  graph exec;
  buffer check(bytes, s1, p1);
  {
    buffer src(bytes, s0, p0);
    src.copy_from(host, s0);
    buffer dst(bytes, s1, p1);
    dst.fill(kPoison, s1);
    s0.synchronize();
    s1.synchronize();
    graph_definition g(d0);
    try {
      g.memcpy(dst, src, bytes);
      ADD_FAILURE() << "a copy between pools that grant no access was accepted";
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("set_access"), std::string::npos) << e.what();
    }
    EXPECT_EQ(g.node_count(), 0u) << "the refused copy left a node";
    p1->set_access(d0);
    g.memcpy(dst, src, bytes).memcpy(check, dst, bytes);  // 0 → 1, then 1 → 1
    src_owner = src.owner();
    dst_owner = dst.owner();
    exec = g.instantiate();
  }  // the user's buffers and definition are gone; the executable graph holds both allocations
  EXPECT_FALSE(src_owner.expired());
  EXPECT_FALSE(dst_owner.expired());
  check.fill(kPoison, s1);
  s1.synchronize();
  exec.launch(s0);
  s0.synchronize();
  EXPECT_EQ(mismatches(check.to_vector<float>(s1), host), 0) << "seed " << seed;
  exec = graph();
  EXPECT_TRUE(expires_within(src_owner)) << "the last graph is gone but the source is kept";
  EXPECT_TRUE(expires_within(dst_owner)) << "the last graph is gone but the destination is kept";
  s0.synchronize();
  s1.synchronize();
}

TEST_F(MultiGpu, CapturedCrossDeviceCopyNeedsAccessAndRuns) {
  // A peer copy cannot be captured; buffer::copy_from on a capturing stream captures a plain copy,
  // refused with the rule while the stream's device cannot reach the other pool.
  device d0(0), d1(1);
  if (!d0.can_access_peer(d1)) GTEST_SKIP() << "device 0 cannot reach device 1";
  auto p0 = std::make_shared<pool_memory_resource>(d0);
  auto p1 = std::make_shared<pool_memory_resource>(d1);
  stream s0(d0), s1(d1);
  const std::size_t n = (1 << 16) + 3;
  const std::size_t bytes = n * sizeof(float);
  const auto seed = fresh_seed();
  const auto host = random_values<float>(n, seed);
  buffer src(bytes, s1, p1);
  src.copy_from(host, s1);
  buffer dst(bytes, s0, p0);
  dst.fill(kPoison, s0);
  s0.synchronize();
  s1.synchronize();
  graph_builder b(s0);
  b.begin_building();
  EXPECT_THROW(dst.copy_from(src, s0), invalid_argument);
  p1->set_access(d0);
  dst.copy_from(src, s0);  // the capture survived the refusal
  graph exec = b.end_building().graph_definition().instantiate();
  EXPECT_EQ(mismatches(dst.to_vector<float>(s0), std::vector<float>(n, kPoison)), 0)
      << "the captured copy ran while being captured";
  exec.launch(s0);
  EXPECT_EQ(mismatches(dst.to_vector<float>(s0), host), 0) << "seed " << seed;
  s0.synchronize();
  s1.synchronize();
}

TEST_F(MultiGpu, GraphAllocationWithPeerAccessIsCopiedToTheOtherDevice) {
  device d0(0), d1(1);
  if (!d1.can_access_peer(d0)) GTEST_SKIP() << "devices 0 and 1 have no peer path";
  stream s0(d0), s1(d1);
  const std::size_t n = 1 << 16;
  const std::size_t bytes = n * sizeof(float);
  const auto seed = fresh_seed();
  const auto host = random_values<float>(n, seed);
  buffer in(bytes, s0);
  in.copy_from(host, s0);
  buffer out(bytes, s1);
  out.fill(kPoison, s1);
  s0.synchronize();
  s1.synchronize();
  graph_definition g(d0);
  graph_node alloc = g.allocate(bytes, {.peer_access = {d1}});
  const device_address scratch = alloc.alloc_params().address;
  EXPECT_EQ(alloc.alloc_params().device, 0);
  EXPECT_EQ(alloc.alloc_params().bytes, bytes);
  // Fill the allocation on device 0, then copy it into device 1's buffer, then free it. Device 0
  // cannot reach `out` (device 1's pool grants it nothing); device 1 reaches both, so the second
  // copy runs there.
  alloc.memcpy(scratch, in, bytes).memcpy(out, scratch, bytes).deallocate(scratch);
  graph exec = g.instantiate();
  for (int i = 0; i < 2; ++i) {
    out.fill(kPoison, s1);
    s1.synchronize();
    exec.launch(s0);
    s0.synchronize();
    EXPECT_EQ(mismatches(out.to_vector<float>(s1), host), 0) << "launch " << i << ", seed " << seed;
  }
}

TEST_F(MultiGpu, KernelOnDevice1ReadsAGraphAllocationOnDevice0) {
  // The graph runs on device 1; its allocation lives on device 0 with access for device 1, and a
  // kernel on device 1 reads it directly (no copy).
  device d0(0), d1(1);
  if (!d1.can_access_peer(d0)) GTEST_SKIP() << "devices 0 and 1 have no peer path";
  if (d0.compute_capability() != d1.compute_capability()) {
    GTEST_SKIP() << "devices 0 and 1 differ in architecture; the test cubin is for device 0";
  }
  stream s1(d1);
  const int n = 1 << 16;
  const std::size_t bytes = n * sizeof(float);
  const auto seed = fresh_seed();
  const auto host = random_values<float>(static_cast<std::size_t>(n), seed);
  std::weak_ptr<const void> in_owner, out_owner;
  buffer check(bytes, s1);
  graph exec;
  {
    // Pinned host input (portable to every context), so the first copy needs no device-to-device
    // path: what is tested is the kernel on device 1 reading device 0's graph allocation.
    pinned_buffer in(bytes);
    std::memcpy(in.data(), host.data(), bytes);
    buffer out(bytes, s1);
    graph_definition g(d1);
    graph_node alloc = g.allocate(bytes, {.device = d0, .peer_access = {d1}});
    EXPECT_EQ(alloc.alloc_params().device, 0);
    const device_address scratch = alloc.alloc_params().address;
    alloc.memcpy(scratch, in, bytes)
        .launch(cover(n), test_kernels().get_kernel("add_one"), scratch, out, n)
        .memcpy(check, out, bytes)
        .deallocate(scratch);
    in_owner = in.owner();
    out_owner = out.owner();
    exec = g.instantiate();
  }  // the user's handles are gone; the graph keeps both buffers
  EXPECT_FALSE(in_owner.expired());
  EXPECT_FALSE(out_owner.expired());
  auto want = host;
  for (auto& x : want) x += 1.0f;
  for (int i = 0; i < 2; ++i) {
    check.fill(kPoison, s1);
    exec.launch(s1);
    EXPECT_EQ(mismatches(check.to_vector<float>(s1), want), 0)
        << "launch " << i << ", seed " << seed;
  }
  exec = graph();
  s1.synchronize();
}

TEST_F(MultiGpu, OneGraphRunsKernelsOnBothDevices) {
  // A graph of device 0 with a kernel node on device 0 and one on device 1 (launch_on): device 0
  // adds one into its allocation (mapped for device 1), device 1 reads it and adds one again.
  device d0(0), d1(1);
  if (!d1.can_access_peer(d0)) GTEST_SKIP() << "devices 0 and 1 have no peer path";
  if (d0.compute_capability() != d1.compute_capability()) {
    GTEST_SKIP() << "devices 0 and 1 differ in architecture; the test cubin is for device 0";
  }
  stream s0(d0), s1(d1);
  const int n = 1 << 16;
  const std::size_t bytes = n * sizeof(float);
  const auto seed = fresh_seed();
  const auto host = random_values<float>(static_cast<std::size_t>(n), seed);
  const kernel k = test_kernels().get_kernel("add_one");
  std::weak_ptr<const void> in_owner;
  buffer out(bytes, s1);  // read back on device 1's own stream, not through a node of device 0
  graph exec;
  {
    buffer in(bytes, s0);
    in.copy_from(host, s0);
    s0.synchronize();
    graph_definition g(d0);
    graph_node alloc = g.allocate(bytes, {.peer_access = {d1}});
    const device_address mid = alloc.alloc_params().address;
    graph_node second =
        alloc.launch(cover(n), k, in, mid, n).launch_on(d1, cover(n), k, mid, out, n);
    EXPECT_EQ(second.kind(), graph_node_kind::kernel);
    second.deallocate(mid);
    in_owner = in.owner();
    exec = g.instantiate();
  }  // the user's `in` is gone; the device-0 kernel node keeps it
  EXPECT_FALSE(in_owner.expired());
  auto want = host;
  for (auto& x : want) x = (x + 1.0f) + 1.0f;  // the two kernels' float adds, in order
  for (int i = 0; i < 2; ++i) {
    out.fill(kPoison, s1);
    s1.synchronize();
    exec.launch(s0);
    s0.synchronize();
    EXPECT_EQ(mismatches(out.to_vector<float>(s1), want), 0) << "launch " << i << ", seed " << seed;
  }
  exec = graph();
  s0.synchronize();
}

TEST_F(MultiGpu, GraphAllocationRefusesAPeerWithoutAPath) {
  device d0(0), d1(1);
  if (d1.can_access_peer(d0)) GTEST_SKIP() << "devices 0 and 1 have a peer path";
  graph_definition g(d0);
  EXPECT_THROW(g.allocate(1024, {.peer_access = {d1}}), invalid_argument);
}

// The driver's peer query answering "no path" (swapped in the driver table), so the refusals are
// checked on machines whose GPUs do have one.
class no_peer_path {
 public:
  no_peer_path() : real_(api().cuDeviceCanAccessPeer) { api().cuDeviceCanAccessPeer = &stub; }
  no_peer_path(const no_peer_path&) = delete;
  no_peer_path& operator=(const no_peer_path&) = delete;
  ~no_peer_path() { api().cuDeviceCanAccessPeer = real_; }

 private:
  static detail::driver_api& api() { return *detail::driver_table().api; }
  static CUresult stub(int* can, CUdevice, CUdevice) {
    *can = 0;
    return CUDA_SUCCESS;
  }
  decltype(detail::driver_api::cuDeviceCanAccessPeer) real_;
};

TEST_F(MultiGpu, WithoutAPeerPathPeerCallsAreRefusedAndCopiesStillWork) {
  device d0(0), d1(1);
  stream s0(d0), s1(d1);
  auto p0 = std::make_shared<pool_memory_resource>(d0);
  const std::size_t n = 1 << 12;
  const auto seed = fresh_seed();
  const auto host = random_values<float>(n, seed);
  buffer a(n * sizeof(float), s0, p0);
  a.copy_from(host, s0);
  s0.synchronize();
  buffer b(n * sizeof(float), s1);
  {
    no_peer_path no_path;
    EXPECT_FALSE(d0.can_access_peer(d1));
    try {
      d0.enable_peer_access(d1);
      ADD_FAILURE() << "enable_peer_access without a path was accepted";
    } catch (const invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("device 0"), std::string::npos) << what;
      EXPECT_NE(what.find("device 1"), std::string::npos) << what;
    }
    EXPECT_THROW(p0->set_access(d1), invalid_argument);
    EXPECT_FALSE(p0->access(d1));
    graph_definition g(d0);
    EXPECT_THROW(g.allocate(1024, {.peer_access = {d1}}), invalid_argument);
    EXPECT_EQ(g.node_count(), 0u);
    b.copy_from(a, s1);  // needs no peer path: the driver stages it
    EXPECT_EQ(mismatches(b.to_vector<float>(s1), host), 0) << "seed " << seed;
  }
  EXPECT_EQ(d0.can_access_peer(d1), d1.can_access_peer(d0)) << "the real query is back";
}

// ---- processes pinned to different GPUs sharing one directory cache
// ------------------------------

constexpr const char* kChildCacheVar = "CUCORE_MULTIGPU_CHILD_CACHE";
constexpr const char* kChildReportVar = "CUCORE_MULTIGPU_CHILD_REPORT";

// Runs only as a child of the test below (skipped otherwise): compiles the test kernels through
// the shared directory cache, runs add_one on its one visible device, and reports what
// single-flight did and which GPU it ran on.
TEST(MultiGpuChild, CompileThroughSharedCacheAndRun) {
  const char* root = std::getenv(kChildCacheVar);
  const char* report_path = std::getenv(kChildReportVar);
  if (root == nullptr || report_path == nullptr) {
    GTEST_SKIP() << "runs only as a child of MultiGpu.ProcessesPinnedToEachGpuShareOneCompile";
  }
  ASSERT_EQ(device::count(), 1) << "the parent sets CUDA_VISIBLE_DEVICES to one GPU";
  file_stream_program_cache cache(root);
  program p(kKernels, source_type::cxx, kernel_options());
  const object_code code = p.compile(code_type::cubin, kernel_names(), &cache);
  ASSERT_TRUE(p.last_flight_outcome().has_value());
  const flight_outcome outcome = *p.last_flight_outcome();

  device d(0);
  stream s(d);
  const int n = 4099;
  const auto seed = fresh_seed();
  const auto host = random_values<float>(static_cast<std::size_t>(n), seed);
  buffer in(n * sizeof(float), s), out(n * sizeof(float), s);
  in.copy_from(host, s);
  out.fill(kPoison, s);
  launch(s, cover(n), code.get_kernel("add_one"), in, out, n);
  auto want = host;
  for (auto& x : want) x += 1.0f;
  ASSERT_EQ(mismatches(out.to_vector<float>(s), want), 0) << "seed " << seed;

  std::ofstream report(report_path);
  report << (outcome == flight_outcome::compiled ? "compiled" : "not-compiled") << ' '
         << static_cast<int>(outcome)
         << ' '
         // Bus and device: GPUs of one host can share the bus number (00:06.0 and 00:07.0).
         << d.properties().pci_bus_id * 256 + d.properties().pci_device_id << '\n';
  ASSERT_TRUE(report.good());
}

// What CUDA_VISIBLE_DEVICES names this process's device `ordinal` by: the ordinal itself, or the
// matching entry of this process's own CUDA_VISIBLE_DEVICES when it has one.
std::string visible_device(int ordinal) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr || *visible == '\0') return std::to_string(ordinal);
  std::stringstream list(visible);
  std::string entry;
  for (int i = 0; std::getline(list, entry, ','); ++i) {
    if (i == ordinal) return entry;
  }
  return std::to_string(ordinal);
}

// Spawns this test binary, filtered to the child test, with one GPU visible.
pid_t spawn_child(int gpu, const std::string& root, const std::string& report) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (entry.starts_with("CUDA_VISIBLE_DEVICES=") || entry.starts_with("GTEST_")) continue;
    env_strings.push_back(entry);
  }
  env_strings.push_back("CUDA_VISIBLE_DEVICES=" + visible_device(gpu));
  env_strings.push_back(std::string(kChildCacheVar) + "=" + root);
  env_strings.push_back(std::string(kChildReportVar) + "=" + report);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=MultiGpuChild.*";
  std::vector<char*> argv = {exe.data(), filter.data(), nullptr};
  pid_t pid = 0;
  if (::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  return pid;
}

TEST_F(MultiGpu, ProcessesPinnedToEachGpuShareOneCompile) {
  if (device(0).compute_capability() != device(1).compute_capability()) {
    GTEST_SKIP() << "devices 0 and 1 differ in architecture: their compiles have different keys";
  }
  gpu_testing::scratch_cache scratch;  // a fresh directory; the children open their own caches
  const std::string root = scratch.cache().root().string();
  const std::filesystem::path base = scratch.cache().root();
  const std::string reports[2] = {base.string() + "-child0.report",
                                  base.string() + "-child1.report"};
  // Both at once: the directory cache's single-flight lets one compile and the other wait.
  const pid_t pids[2] = {spawn_child(0, root, reports[0]), spawn_child(1, root, reports[1])};
  int compiled = 0;
  int pci_ids[2] = {-1, -2};  // bus * 256 + device
  for (int i = 0; i < 2; ++i) {
    ASSERT_GT(pids[i], 0) << "posix_spawn failed for child " << i;
    int status = 0;
    ASSERT_EQ(::waitpid(pids[i], &status, 0), pids[i]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child on GPU " << i << " failed (status " << status << "): see its output above";
    std::ifstream in(reports[i]);
    std::string what;
    int outcome = -1;
    in >> what >> outcome >> pci_ids[i];
    ASSERT_TRUE(in) << "child on GPU " << i << " wrote no report";
    compiled += what == "compiled";
    std::filesystem::remove(reports[i]);
  }
  EXPECT_EQ(compiled, 1) << "exactly one process compiles; the other reads its entry";
  EXPECT_NE(pci_ids[0], pci_ids[1]) << "the children ran on different GPUs";
  // The oracle: the cached entry equals an uncached compile of the same inputs.
  program p(kKernels, source_type::cxx, kernel_options());
  const object_code cached = p.compile(code_type::cubin, kernel_names(), &scratch.cache());
  EXPECT_EQ(p.last_cache_outcome(), cache_outcome::hit);
  const object_code fresh = program(kKernels, source_type::cxx, kernel_options())
                                .compile(code_type::cubin, kernel_names(), nullptr);
  EXPECT_TRUE(std::ranges::equal(cached.code(), fresh.code()));
}

}  // namespace
}  // namespace cucore
