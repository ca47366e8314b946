// CUDA devices: enumeration, selection, properties. Needs a GPU and its driver (loaded at run
// time); without one, device::count() is 0 and everything else throws cuda_error or
// library_not_found.
#pragma once

#include <compare>
#include <cstddef>
#include <memory>
#include <string>

struct CUctx_st;  // the driver's context (CUcontext), opaque here

namespace cucore {

class context;
class memory_resource;

// A device's compute capability: {9, 0} for a Hopper H100.
struct compute_capability {
  int major = 0;
  int minor = 0;
  friend auto operator<=>(const compute_capability&, const compute_capability&) = default;
  // "sm_90": the compile default (toolkit::current_device_arch, program_options::arch).
  std::string arch() const;
};

// A snapshot of the properties most programs ask for (cuDeviceGetAttribute, cuDeviceTotalMem).
struct device_properties {
  std::string name = {};
  cucore::compute_capability compute_capability = {};
  int multiprocessor_count = 0;
  std::size_t total_memory = 0;  // bytes
  int max_threads_per_block = 0;
  int max_threads_per_multiprocessor = 0;
  int max_blocks_per_multiprocessor = 0;
  int max_shared_memory_per_block = 0;        // bytes, without opting in
  int max_shared_memory_per_block_optin = 0;  // bytes, with the kernel attribute raised
  int max_shared_memory_per_multiprocessor = 0;
  int max_registers_per_block = 0;
  int warp_size = 0;
  int l2_cache_size = 0;  // bytes
  int clock_rate_khz = 0;
  int memory_bus_width = 0;  // bits
  int pci_bus_id = 0;
  int pci_device_id = 0;
  bool integrated = false;
  bool cooperative_launch = false;
  bool memory_pools_supported = false;
  bool cluster_launch = false;
};

// One CUDA device, by ordinal. A small value type (copyable, comparable); the driver state behind
// it (the retained primary context, the default memory resource) lives for the whole process.
// Thread-safe.
class device {
 public:
  // The device with this ordinal; throws invalid_argument when it is out of range and cuda_error /
  // library_not_found without a GPU or driver.
  explicit device(int ordinal = 0);

  // Number of devices; 0 without a driver or GPU. Never throws.
  static int count() noexcept;
  // The device of the context current on this thread, else device 0.
  static device current();

  int ordinal() const noexcept { return ordinal_; }
  std::string name() const;
  cucore::compute_capability compute_capability() const;
  // "sm_90"; the same as toolkit::current_device_arch() when this device is current.
  std::string arch() const { return compute_capability().arch(); }
  int multiprocessor_count() const;
  std::size_t total_memory() const;
  // Free and total bytes (cuMemGetInfo in this device's primary context).
  struct memory_info {
    std::size_t free = 0;
    std::size_t total = 0;
  };
  memory_info memory() const;
  device_properties properties() const;
  // Any attribute by its CUdevice_attribute value (cuDeviceGetAttribute).
  int attribute(int cu_device_attribute) const;
  // Least and greatest stream priority (numerically: greatest is the smallest number).
  struct priority_range {
    int least = 0;
    int greatest = 0;
  };
  priority_range stream_priority_range() const;

  // The primary context, retained once per process and never released (see docs/runtime.md).
  context primary_context() const;
  // Makes the primary context current on the calling thread (cuCtxSetCurrent).
  void set_current() const;
  // Waits for all work on this device's primary context (cuCtxSynchronize).
  void synchronize() const;

  // Peer access (docs/runtime.md, "Several devices").
  // Whether this device can read and write `other`'s memory directly (cuDeviceCanAccessPeer);
  // false for the same device.
  bool can_access_peer(const device& other) const;
  // Lets kernels and copies running in this device's primary context access memory that
  // `other`'s primary context allocated with cuMemAlloc (cuCtxEnablePeerAccess, one direction:
  // call it on both devices for both). Idempotent and thread-safe: enabling it again is a no-op.
  // Throws invalid_argument naming both devices when `other` is this device or the pair cannot
  // access each other (can_access_peer is false), cuda_error when the driver refuses (e.g.
  // CUDA_ERROR_TOO_MANY_PEERS). It does not cover stream-ordered pool memory (buffer's default):
  // that is pool_memory_resource::set_access.
  void enable_peer_access(const device& other) const;

  // The memory resource buffers use by default: the device's default memory pool
  // (cuDeviceGetDefaultMemPool), one shared object per device for the process's life.
  const std::shared_ptr<memory_resource>& default_memory_resource() const;

  friend bool operator==(const device&, const device&) = default;

 private:
  int ordinal_ = 0;
};

}  // namespace cucore
