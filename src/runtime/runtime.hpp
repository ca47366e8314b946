// Shared plumbing of the device runtime: the driver table with the exit guard armed, per-device
// state (primary context, default pool), and the scoped context push every call uses. Include only
// from cucore's sources.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "cucore/runtime/device.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/launch.hpp"
#include "loader/libraries.hpp"

namespace cucore::detail {

// detail::driver(feature) (cuInit done, or library_not_found / cuda_error), and arms the exit
// guard: driver_alive() is true from the first call until static destruction reaches the guard.
const driver_api& runtime_driver(std::string_view feature);

// False before the runtime was first used and once the process is exiting (the guard, created
// right after cuInit, is destroyed before anything the driver set up for itself). Destructors
// check it and leak instead of calling into a driver that may be gone.
bool driver_alive() noexcept;

// Friend of kernel: the state that owns its library, read without a copy (graph nodes compare
// owners before they copy them). Null for an empty kernel.
struct kernel_access {
  static const std::shared_ptr<const kernel::state>& owner(const kernel& k) noexcept {
    return k.state_;
  }
};

// Marks a release made on one of cucore's own threads (the graphs' release thread, the deferred
// frees), which run on while the process exits: ok() says whether the driver may be called, and
// while a mark with ok() exists, the exit guard waits for it (up to 2 s) before declaring the
// driver gone, so the release never races the driver's own teardown.
class background_release {
 public:
  background_release() noexcept;
  background_release(const background_release&) = delete;
  background_release& operator=(const background_release&) = delete;
  ~background_release();
  bool ok() const noexcept { return ok_; }

 private:
  bool ok_ = false;
};

// What cucore keeps per device for the process's life (leaked on purpose).
struct device_state {
  int ordinal = 0;
  CUdevice handle = 0;
  std::mutex context_mutex;
  std::atomic<CUcontext> primary{nullptr};  // retained once, never released
  std::mutex resource_mutex;
  std::shared_ptr<memory_resource> default_resource;  // set once, then never changed
};

// The state of `ordinal`; throws invalid_argument when out of range.
device_state& device_at(int ordinal);
// The number of devices (cuDeviceGetCount), throwing what runtime_driver throws.
int runtime_device_count();
// The retained primary context of `ordinal`.
CUcontext primary_context(int ordinal);
// The ordinal of a CUdevice handle.
int ordinal_of(CUdevice handle);

// Makes the primary context of a device current for the scope, when it is not current already
// (pushes it, and pops it at scope exit). The throwing form is for API calls; the nothrow form is
// for destructors (ok() says whether the context is current).
class scoped_context {
 public:
  scoped_context(const driver_api& api, int ordinal);
  scoped_context(const driver_api& api, int ordinal, std::nothrow_t) noexcept;
  scoped_context(const scoped_context&) = delete;
  scoped_context& operator=(const scoped_context&) = delete;
  ~scoped_context();
  bool ok() const noexcept { return ok_; }

 private:
  const driver_api& api_;
  bool pushed_ = false;
  bool ok_ = false;
};

// Logs a failed driver call made where nothing may throw (a destructor). Never throws.
void log_driver_failure(CUresult result, const char* call) noexcept;

// A destructor's release of a driver object: `destroy(api)` (cuStreamDestroy, ...) in device
// `ordinal`'s context, nothing once the driver is gone, a failure logged as `call`.
template <class Destroy>
void destroy_in_context(int ordinal, const char* call, Destroy destroy) noexcept {
  if (!driver_alive()) return;
  const auto& api = *driver_table().api;
  scoped_context scope(api, ordinal, std::nothrow);
  if (const CUresult r = destroy(api); r != CUDA_SUCCESS) log_driver_failure(r, call);
}

// The checks every launch makes before the driver sees it (also used by graph kernel nodes):
// extents, cluster divisibility, and the arguments against the kernel's parameters when known.
void check_launch_config(const launch_config& c);
void check_launch_arguments(const kernel& k, const kernel_arguments& args);

// Copies a launch's extents and dynamic shared memory into the driver's parameters: a
// CUlaunchConfig for a launch, a CUDA_KERNEL_NODE_PARAMS for a graph kernel node (same fields).
template <class Params>
void set_launch_extents(Params& p, const launch_config& config) noexcept {
  p.gridDimX = config.grid.x;
  p.gridDimY = config.grid.y;
  p.gridDimZ = config.grid.z;
  p.blockDimX = config.block.x;
  p.blockDimY = config.block.y;
  p.blockDimZ = config.block.z;
  p.sharedMemBytes = static_cast<unsigned>(config.shared_memory_bytes);
}

// The kernelParams array of a launch: on the stack for the usual few arguments.
class argument_pointers {
 public:
  explicit argument_pointers(const kernel_arguments& args) {
    if (args.count() > few_.size()) {
      many_.resize(args.count());
      pointers_ = many_.data();
    }
    args.pointers(pointers_);
    count_ = args.count();
  }
  argument_pointers(const argument_pointers&) = delete;
  argument_pointers& operator=(const argument_pointers&) = delete;
  // Null when there are no arguments, as the driver wants it.
  void** data() noexcept { return count_ == 0 ? nullptr : pointers_; }

 private:
  std::array<void*, 16> few_{};
  std::vector<void*> many_;
  void** pointers_ = few_.data();
  std::size_t count_ = 0;
};

// cuda_error-style checks for the invalid_argument cases of empty handles.
[[noreturn]] void throw_empty(const char* what);

// The state of a handle object (a stream's, an event's, a buffer's): throw_empty(what) for one
// that has none (moved from).
template <class State>
State& state_of(const std::shared_ptr<State>& state, const char* what) {
  if (!state) throw_empty(what);
  return *state;
}

}  // namespace cucore::detail
