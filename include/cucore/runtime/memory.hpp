// Device memory: a small memory-resource interface, a stream-ordered pool resource, `buffer` (an
// owned device allocation whose memory is a shared handle) and pinned host memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <ranges>
#include <span>
#include <type_traits>
#include <vector>

#include "cucore/runtime/device.hpp"
#include "cucore/runtime/stream.hpp"

struct CUmemPoolHandle_st;  // the driver's memory pool (CUmemoryPool), opaque here

namespace cucore {

// A device address (the driver's CUdeviceptr).
using device_address = unsigned long long;

// Where buffers get their memory. Implementations are stream-ordered: an allocation is usable by
// work enqueued on its stream after allocate() returns, and deallocate() frees after the work
// enqueued on its stream so far. A resource is shared (std::shared_ptr): every allocation keeps its
// resource alive until the allocation is freed.
class memory_resource {
 public:
  virtual ~memory_resource() = default;
  // `bytes` (> 0) ordered on `s`. Throws cuda_error (CUDA_ERROR_OUT_OF_MEMORY, ...).
  virtual device_address allocate(std::size_t bytes, stream_ref s) = 0;
  // Frees ordered on `s`. Must never throw, and must not call the driver once the process is
  // exiting (see docs/runtime.md); failures are logged.
  virtual void deallocate(device_address address, std::size_t bytes, stream_ref s) noexcept = 0;
  // The device the memory lives on.
  virtual cucore::device device() const noexcept = 0;
};

struct pool_options {
  // Bytes of unused memory the pool keeps reserved at synchronization points instead of returning
  // them to the system (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD). 0 returns everything.
  std::uint64_t release_threshold = 0;
  // The most the pool may hold (CUmemPoolProps::maxSize); 0: the system's default.
  std::size_t max_size = 0;
};

// A stream-ordered memory pool (cuMemAllocFromPoolAsync / cuMemFreeAsync): the device's default
// pool, or a pool of its own. Thread-safe.
class pool_memory_resource final : public memory_resource {
 public:
  // A new pool on `dev` (cuMemPoolCreate). Destroyed (cuMemPoolDestroy) once this resource and
  // every allocation from it are gone.
  explicit pool_memory_resource(const cucore::device& dev, pool_options options = {});
  // The device's default pool (cuDeviceGetDefaultMemPool); device::default_memory_resource() is
  // the one shared instance. Never destroyed. Its attributes are process-wide state shared with
  // other libraries that use the default pool.
  static std::shared_ptr<pool_memory_resource> default_pool(const cucore::device& dev);

  pool_memory_resource(const pool_memory_resource&) = delete;
  pool_memory_resource& operator=(const pool_memory_resource&) = delete;
  ~pool_memory_resource() override;

  device_address allocate(std::size_t bytes, stream_ref s) override;
  void deallocate(device_address address, std::size_t bytes, stream_ref s) noexcept override;
  cucore::device device() const noexcept override { return device_; }

  CUmemPoolHandle_st* handle() const noexcept { return pool_; }
  bool is_default_pool() const noexcept { return !owned_; }
  std::uint64_t release_threshold() const;
  void set_release_threshold(std::uint64_t bytes);
  // Memory the pool holds from the system, and the part of it allocations use.
  std::uint64_t reserved_bytes() const;
  std::uint64_t used_bytes() const;
  // Returns unused memory to the system, keeping at least `min_bytes_to_keep` (cuMemPoolTrimTo).
  void trim_to(std::size_t min_bytes_to_keep);
  // Lets kernels on `peer` read and write this pool's allocations, past and future
  // (cuMemPoolSetAccess; pool memory ignores device::enable_peer_access), or takes that away with
  // `enabled` false. Throws invalid_argument for the pool's own device or a device that
  // cannot access this one (device::can_access_peer). The default pool is shared process-wide.
  void set_access(const cucore::device& peer, bool enabled = true);
  // Whether `peer` may read and write this pool's allocations (cuMemPoolGetAccess).
  bool access(const cucore::device& peer) const;

 private:
  struct adopt_default {};
  pool_memory_resource(adopt_default, const cucore::device& dev);
  cucore::device device_;
  CUmemPoolHandle_st* pool_ = nullptr;
  bool owned_ = false;
};

// A contiguous range of trivially copyable elements (std::vector, std::array, std::span, ...).
template <class R>
concept trivially_copyable_range = std::ranges::contiguous_range<R> &&
    std::ranges::sized_range<R> && std::is_trivially_copyable_v<std::ranges::range_value_t<R>>;

// Device memory from a memory_resource, allocated and freed in stream order. Move-only.
//
// The allocation is a shared handle: owner() hands out std::shared_ptr<const void> owners (a graph
// node keeps one) and the memory stays valid while any owner lives, even after this buffer was
// closed or destroyed. The free (memory_resource::deallocate, cuMemFreeAsync for pools) happens
// when the last owner lets go, ordered on the buffer's release stream: the stream it was allocated
// on, or the one given to close(stream). That stream is kept alive until then. Work on other
// streams that uses the buffer must be ordered before that stream (stream::wait) or have finished
// when the last owner lets go.
//
// Copies take any stream; copies to and from pageable host memory are synchronous with respect to
// the host (the driver stages them), copies with pinned memory (pinned_buffer) are asynchronous.
// A buffer object is not meant for concurrent close/move from several threads; copies and fills
// on it may be enqueued from many.
class buffer {
 public:
  // An empty buffer (valid() is false).
  buffer() noexcept = default;
  // `bytes` from the default memory resource of `s`'s device, ordered on `s`.
  buffer(std::size_t bytes, const stream& s);
  // `bytes` from `resource`, ordered on `s`.
  buffer(std::size_t bytes, const stream& s, std::shared_ptr<memory_resource> resource);
  buffer(buffer&&) noexcept = default;
  buffer& operator=(buffer&&) noexcept = default;
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  ~buffer() = default;

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  // These throw invalid_argument on an empty buffer.
  std::size_t size() const;
  device_address address() const;
  cucore::device device() const;
  const std::shared_ptr<memory_resource>& resource() const;

  // Host → device: `bytes` from `host` to this buffer at byte `offset`.
  void copy_from(const void* host, std::size_t bytes, stream_ref s, std::size_t offset = 0);
  // Device → host: `bytes` at byte `offset` of this buffer to `host`.
  void copy_to(void* host, std::size_t bytes, stream_ref s, std::size_t offset = 0) const;
  // The whole range (element count × size); throws invalid_argument when it does not fit.
  template <trivially_copyable_range R>
  void copy_from(const R& host, stream_ref s, std::size_t offset = 0) {
    copy_from(std::ranges::data(host), range_bytes(host), s, offset);
  }
  template <trivially_copyable_range R>
  void copy_to(R&& host, stream_ref s, std::size_t offset = 0) const {
    copy_to(std::ranges::data(host), range_bytes(host), s, offset);
  }
  // Device → device: all of `source` (no larger than this buffer) to the start of this buffer,
  // ordered on `s` (in `s`'s device's context). `source` may live on another device: then the copy
  // is cuMemcpyPeerAsync between the two primary contexts, peer to peer where the pair can, else
  // staged by the driver; no peer access needs enabling. On a capturing stream (the driver cannot
  // capture a peer copy) it is a plain copy run by `s`'s device, which must reach both buffers
  // (pool_memory_resource::set_access), else invalid_argument says so. Work on other streams that
  // writes `source` (or uses this buffer) must be complete or ordered before `s` (stream::wait).
  void copy_from(const buffer& source, stream_ref s);
  // Sets every element of the buffer, viewed as an array of T, to `value` (cuMemsetD8/16/32Async).
  // T is 1, 2 or 4 bytes; the size must be a multiple of sizeof(T).
  template <class T>
  void fill(T value, stream_ref s) {
    static_assert(
        std::is_trivially_copyable_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4),
        "buffer::fill takes a trivially copyable value of 1, 2 or 4 bytes");
    std::uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    fill_bits(bits, sizeof(T), s);
  }
  // The whole buffer as a vector of T: copies on `s` and synchronizes `s`.
  template <class T>
  std::vector<T> to_vector(stream_ref s) const {
    static_assert(std::is_trivially_copyable_v<T>);
    std::vector<T> out(size() / sizeof(T));
    copy_to(out, s);
    s.synchronize();
    return out;
  }

  // A shared owner of the allocation: the memory stays valid while it lives.
  std::shared_ptr<const void> owner() const;
  // Gives up this object's ownership; the memory is freed, ordered on the release stream, when no
  // other owner holds it. Never throws.
  void close() noexcept { state_.reset(); }
  // The same, with `s` as the release stream (the stream that last uses the memory).
  void close(const stream& s);

 private:
  template <class R>
  static std::size_t range_bytes(const R& r) noexcept {
    return std::ranges::size(r) * sizeof(std::ranges::range_value_t<R>);
  }
  void fill_bits(std::uint32_t bits, std::size_t width, stream_ref s);
  struct state;
  std::shared_ptr<state> state_;
};

// Page-locked (pinned) host memory (cuMemHostAlloc, portable to every context), for fast and truly
// asynchronous copies. Move-only; freed (cuMemFreeHost) when the last owner lets go. Keep it, or an
// owner(), alive until the copies that use it have finished.
class pinned_buffer {
 public:
  pinned_buffer() noexcept = default;
  explicit pinned_buffer(std::size_t bytes);
  pinned_buffer(pinned_buffer&&) noexcept = default;
  pinned_buffer& operator=(pinned_buffer&&) noexcept = default;
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  ~pinned_buffer() = default;

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  std::size_t size() const noexcept;
  void* data() const noexcept;
  // The memory as an array of T (size() / sizeof(T) elements).
  template <class T>
  std::span<T> span() const noexcept {
    static_assert(std::is_trivially_copyable_v<T>);
    return {static_cast<T*>(data()), size() / sizeof(T)};
  }
  std::shared_ptr<const void> owner() const;
  void close() noexcept { state_.reset(); }

 private:
  struct state;
  std::shared_ptr<const state> state_;
};

}  // namespace cucore
