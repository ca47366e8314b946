// Kernel launches: launch(stream, config, kernel, args...).
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"

namespace cucore {

class graph_condition;  // cucore/graph/definition.hpp
class graph;            // cucore/graph/graph.hpp

// Grid, block or cluster extents. Every component must be at least 1.
struct dim3 {
  unsigned x = 1;
  unsigned y = 1;
  unsigned z = 1;
  constexpr dim3() noexcept = default;
  constexpr dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) noexcept  // NOLINT
      : x(x_), y(y_), z(z_) {}
  friend constexpr bool operator==(const dim3&, const dim3&) noexcept = default;
};

struct launch_config {
  dim3 grid = {};                       // blocks
  dim3 block = {};                      // threads per block
  std::size_t shared_memory_bytes = 0;  // dynamic shared memory per block
  // Thread block clusters (compute capability 9.0+); each grid extent must be a multiple.
  std::optional<dim3> cluster = std::nullopt;
  // A cooperative launch (grid-wide sync): all blocks must be resident at once.
  bool cooperative = false;
};

// A kernel's arguments, copied into storage this object owns. Each argument is a trivially
// copyable value (numbers, device_address, plain structs), or a buffer, which passes its device
// address and whose allocation owner is kept (owners(); a graph's kernel node retains them).
class kernel_arguments {
 public:
  kernel_arguments() = default;
  // (The copy and move constructors win over this one for a single kernel_arguments.)
  template <class... Args>
  explicit kernel_arguments(const Args&... args) {
    (push(args), ...);
  }

  template <class T>
  void push(const T& value) {
    static_assert(!std::is_same_v<T, pinned_buffer> && !std::is_same_v<T, stream>,
                  "pass a buffer or a device_address as a kernel argument");
    static_assert(std::is_trivially_copyable_v<T>,
                  "kernel arguments must be trivially copyable (numbers, device_address, plain "
                  "structs) or a cucore::buffer");
    static_assert(!std::is_pointer_v<T> ||
                      !std::is_same_v<std::remove_cv_t<std::remove_pointer_t<T>>, buffer>,
                  "pass the buffer itself, not a pointer to it");
    push_bytes(&value, sizeof(T), alignof(T));
  }
  // A buffer passes its device address and keeps its allocation alive in owners().
  void push(const buffer& b);
  // A conditional node's condition, seen by the kernel as a cudaGraphConditionalHandle.
  void push(const graph_condition& c);
  // An executable graph, seen by the kernel as a cudaGraphExec_t (for a device-side
  // cudaGraphLaunch); owners() keeps it alive, so a graph node launching it keeps it launchable.
  // Throws invalid_argument for an empty graph.
  void push(const graph& g);

  std::size_t count() const noexcept { return slot_count_; }
  std::size_t size_of(std::size_t index) const;
  // Pointers to each argument's bytes, as cuLaunchKernel's kernelParams takes them; valid until
  // the next push or until this object is moved or destroyed.
  std::vector<void*> pointers() const;
  // The same into `out`, which has room for count() pointers (no allocation).
  void pointers(void** out) const noexcept;
  // The owners of the buffers passed.
  std::span<const std::shared_ptr<const void>> owners() const noexcept {
    return owner_count_ <= inline_owners_.size()
               ? std::span<const std::shared_ptr<const void>>(inline_owners_.data(), owner_count_)
               : std::span<const std::shared_ptr<const void>>(heap_owners_);
  }
  // The same, to move from: a graph node given these arguments as an rvalue takes them over
  // (saving a reference-count round trip per owner).
  std::span<std::shared_ptr<const void>> movable_owners() noexcept {
    return owner_count_ <= inline_owners_.size()
               ? std::span<std::shared_ptr<const void>>(inline_owners_.data(), owner_count_)
               : std::span<std::shared_ptr<const void>>(heap_owners_);
  }

 private:
  // The usual launch (a few arguments, a buffer or two) lives inline: building one allocates
  // nothing. Past the inline room everything moves to the heap.
  struct slot {
    std::size_t offset = 0;
    std::size_t size = 0;
  };
  void push_bytes(const void* data, std::size_t size, std::size_t alignment);
  void push_owner(std::shared_ptr<const void> owner);
  std::byte* bytes() noexcept { return heap_bytes_.empty() ? inline_bytes_ : heap_bytes_.data(); }
  const std::byte* bytes() const noexcept {
    return heap_bytes_.empty() ? inline_bytes_ : heap_bytes_.data();
  }
  const slot* slots() const noexcept {
    return heap_slots_.empty() ? inline_slots_.data() : heap_slots_.data();
  }

  alignas(std::max_align_t) std::byte inline_bytes_[128] = {};
  std::vector<std::byte> heap_bytes_;
  std::size_t used_bytes_ = 0;
  std::array<slot, 12> inline_slots_{};
  std::vector<slot> heap_slots_;
  std::size_t slot_count_ = 0;
  std::array<std::shared_ptr<const void>, 2> inline_owners_;
  std::vector<std::shared_ptr<const void>> heap_owners_;
  std::size_t owner_count_ = 0;
};

// Enqueues `k` on `s` (cuLaunchKernelEx) in the primary context of `s`'s device.
// Throws invalid_argument for an empty kernel or a bad configuration (a zero extent, a grid not a
// multiple of the cluster), and when the kernel's parameter list is known (cuKernelGetParamInfo)
// and the argument count or an argument's size differs from it; cuda_error for what the driver
// refuses. Errors of the running kernel surface at the next synchronization.
void launch(stream_ref s, const launch_config& config, const kernel& k,
            const kernel_arguments& args);

template <class... Args>
void launch(stream_ref s, const launch_config& config, const kernel& k, const Args&... args) {
  if constexpr (sizeof...(Args) == 0) {
    launch(s, config, k, kernel_arguments());
  } else {
    launch(s, config, k, kernel_arguments(args...));
  }
}

}  // namespace cucore
