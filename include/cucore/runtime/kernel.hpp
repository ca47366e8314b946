// Kernels from compiled code: object_code::get_kernel loads the code into the driver once
// (cuLibraryLoadData, context-independent) and looks the kernel up (cuLibraryGetKernel).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "cucore/object_code.hpp"
#include "cucore/runtime/device.hpp"

struct CUkern_st;  // the driver's kernel (CUkernel), opaque here

namespace cucore {

// Per-device attributes of a kernel (cuKernelGetAttribute).
struct kernel_attributes {
  int max_threads_per_block = 0;
  int shared_size_bytes = 0;  // static shared memory
  int const_size_bytes = 0;
  int local_size_bytes = 0;  // per thread
  int num_regs = 0;          // per thread
  int ptx_version = 0;       // 90 for PTX ISA 9.0 targets
  int binary_version = 0;    // 90 for sm_90 machine code
  int max_dynamic_shared_size_bytes = 0;
};

// Where one parameter sits in the kernel's parameter buffer (cuKernelGetParamInfo).
struct kernel_parameter {
  std::size_t offset = 0;
  std::size_t size = 0;
};

namespace detail {
struct kernel_access;
}

// A kernel of a loaded library. A cheap, copyable shared handle: every copy (and every owner()
// handed out, e.g. to a graph node) keeps the library loaded; the library is unloaded
// (cuLibraryUnload) when the object_code and every kernel from it are gone. Thread-safe.
class kernel {
 public:
  // An empty kernel (valid() is false).
  kernel() noexcept = default;

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  // These throw invalid_argument on an empty kernel.
  // The name asked for, and the symbol looked up (its mangled name for a name expression).
  const std::string& name() const;
  const std::string& symbol() const;
  CUkern_st* handle() const;

  // Attributes on `dev` (loads the kernel into its primary context if needed).
  kernel_attributes attributes(const device& dev) const;
  kernel_attributes attributes() const { return attributes(device::current()); }
  // Any attribute by its CUfunction_attribute value.
  int attribute(int cu_function_attribute, const device& dev) const;
  // Allows launches with more than 48 KiB of dynamic shared memory on `dev`
  // (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
  void set_max_dynamic_shared_memory(std::size_t bytes, const device& dev) const;

  // The parameters, in order (cuKernelGetParamInfo; asked once, then remembered). Throws
  // cuda_error when the driver cannot tell.
  const std::vector<kernel_parameter>& parameters() const;

  // A shared owner that keeps the kernel's library loaded.
  std::shared_ptr<const void> owner() const;

  friend bool operator==(const kernel& a, const kernel& b) noexcept;

 private:
  friend class object_code;
  friend struct detail::kernel_access;
  struct state;
  explicit kernel(std::shared_ptr<const state> s) noexcept : state_(std::move(s)) {}
  std::shared_ptr<const state> state_;
};

}  // namespace cucore
