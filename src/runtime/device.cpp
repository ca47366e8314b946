#include "cucore/runtime/device.hpp"

#include <string>

#include "cucore/error.hpp"
#include "cucore/runtime/context.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/toolkit.hpp"
#include "runtime/runtime.hpp"

namespace cucore {
namespace {

constexpr std::string_view kFeature = "the CUDA device runtime";

int get_attribute(const detail::driver_api& api, CUdevice_attribute attr, CUdevice dev) {
  int value = 0;
  detail::check_driver(api.cuDeviceGetAttribute(&value, attr, dev), "cuDeviceGetAttribute");
  return value;
}

}  // namespace

std::string compute_capability::arch() const {
  return "sm_" + std::to_string(major * 10 + minor);
}

device::device(int ordinal) : ordinal_(ordinal) {
  detail::device_at(ordinal);  // validates
}

int device::count() noexcept {
  return toolkit::device_count();
}

device device::current() {
  const auto& api = detail::runtime_driver(kFeature);
  CUcontext ctx = nullptr;
  detail::check_driver(api.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx == nullptr) return device(0);
  CUdevice handle = 0;
  detail::check_driver(api.cuCtxGetDevice(&handle), "cuCtxGetDevice");
  return device(detail::ordinal_of(handle));
}

std::string device::name() const {
  const auto& api = detail::runtime_driver(kFeature);
  char name[256] = {};
  detail::check_driver(api.cuDeviceGetName(name, sizeof(name), detail::device_at(ordinal_).handle),
                       "cuDeviceGetName");
  return name;
}

cucore::compute_capability device::compute_capability() const {
  return {attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
          attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)};
}

int device::multiprocessor_count() const {
  return attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
}

std::size_t device::total_memory() const {
  const auto& api = detail::runtime_driver(kFeature);
  std::size_t bytes = 0;
  detail::check_driver(api.cuDeviceTotalMem(&bytes, detail::device_at(ordinal_).handle),
                       "cuDeviceTotalMem");
  return bytes;
}

device::memory_info device::memory() const {
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, ordinal_);
  memory_info info;
  detail::check_driver(api.cuMemGetInfo(&info.free, &info.total), "cuMemGetInfo");
  return info;
}

int device::attribute(int cu_device_attribute) const {
  const auto& api = detail::runtime_driver(kFeature);
  return get_attribute(api, static_cast<CUdevice_attribute>(cu_device_attribute),
                       detail::device_at(ordinal_).handle);
}

device_properties device::properties() const {
  device_properties p;
  p.name = name();
  p.compute_capability = compute_capability();
  p.total_memory = total_memory();
  p.multiprocessor_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  p.max_threads_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  p.max_threads_per_multiprocessor = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  p.max_blocks_per_multiprocessor = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  p.max_shared_memory_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  p.max_shared_memory_per_block_optin =
      attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  p.max_shared_memory_per_multiprocessor =
      attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  p.max_registers_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  p.warp_size = attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  p.l2_cache_size = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  p.clock_rate_khz = attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  p.memory_bus_width = attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  p.pci_bus_id = attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
  p.pci_device_id = attribute(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
  p.integrated = attribute(CU_DEVICE_ATTRIBUTE_INTEGRATED) != 0;
  p.cooperative_launch = attribute(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH) != 0;
  p.memory_pools_supported = attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) != 0;
  p.cluster_launch = attribute(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH) != 0;
  return p;
}

device::priority_range device::stream_priority_range() const {
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, ordinal_);
  priority_range range;
  detail::check_driver(api.cuCtxGetStreamPriorityRange(&range.least, &range.greatest),
                       "cuCtxGetStreamPriorityRange");
  return range;
}

namespace {

std::string pair_name(const device& from, const device& to) {
  return "device " + std::to_string(from.ordinal()) + " (" + from.name() + ") and device " +
         std::to_string(to.ordinal()) + " (" + to.name() + ")";
}

}  // namespace

bool device::can_access_peer(const device& other) const {
  if (other.ordinal_ == ordinal_) return false;
  const auto& api = detail::runtime_driver(kFeature);
  int can = 0;
  detail::check_driver(api.cuDeviceCanAccessPeer(&can, detail::device_at(ordinal_).handle,
                                                 detail::device_at(other.ordinal_).handle),
                       "cuDeviceCanAccessPeer");
  return can != 0;
}

void device::enable_peer_access(const device& other) const {
  if (other.ordinal_ == ordinal_) {
    throw invalid_argument("device::enable_peer_access: device " + std::to_string(ordinal_) +
                           " cannot be its own peer; pass another device");
  }
  if (!can_access_peer(other)) {
    throw invalid_argument("device::enable_peer_access: " + pair_name(*this, other) +
                           " cannot access each other's memory (cuDeviceCanAccessPeer is 0, e.g. "
                           "no NVLink or PCIe peer path); copy through buffer::copy_from, which "
                           "the driver stages, instead");
  }
  const auto& api = detail::runtime_driver(kFeature);
  const CUcontext peer = detail::primary_context(other.ordinal_);
  detail::scoped_context scope(api, ordinal_);
  // The driver keeps the state per context pair; a second enable (from any thread) answers
  // ALREADY_ENABLED, which is what the caller asked for.
  const CUresult r = api.cuCtxEnablePeerAccess(peer, 0);
  if (r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) return;
  if (r == CUDA_SUCCESS) return;
  const char* text = nullptr;
  api.cuGetErrorString(r, &text);
  detail::check_driver(r, "cuCtxEnablePeerAccess",
                       "enabling peer access from " + pair_name(*this, other) +
                           " failed: " + (text ? text : "unknown error"));
}

context device::primary_context() const {
  return context(*this);
}

void device::set_current() const {
  primary_context().set_current();
}

void device::synchronize() const {
  primary_context().synchronize();
}

const std::shared_ptr<memory_resource>& device::default_memory_resource() const {
  detail::device_state& state = detail::device_at(ordinal_);
  std::lock_guard lock(state.resource_mutex);
  if (!state.default_resource) state.default_resource = pool_memory_resource::default_pool(*this);
  return state.default_resource;
}

context::context(const cucore::device& dev)
    : device_(dev), handle_(detail::primary_context(dev.ordinal())) {}

void context::set_current() const {
  const auto& api = detail::runtime_driver(kFeature);
  detail::check_driver(api.cuCtxSetCurrent(handle_), "cuCtxSetCurrent");
}

void context::synchronize() const {
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, device_.ordinal());
  detail::check_driver(api.cuCtxSynchronize(), "cuCtxSynchronize");
}

}  // namespace cucore
