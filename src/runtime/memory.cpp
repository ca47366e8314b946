#include "cucore/runtime/memory.hpp"

#include <chrono>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "runtime/runtime.hpp"

namespace cucore {
namespace {

constexpr std::string_view kFeature = "CUDA device memory";

static_assert(std::is_same_v<device_address, CUdeviceptr>,
              "cucore::device_address must be the driver's CUdeviceptr");

std::uint64_t pool_attribute(CUmemoryPool pool, int ordinal, CUmemPool_attribute attr) {
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, ordinal);
  cuuint64_t value = 0;
  detail::check_driver(api.cuMemPoolGetAttribute(pool, attr, &value), "cuMemPoolGetAttribute");
  return value;
}

void check_range(std::size_t offset, std::size_t bytes, std::size_t size, const char* what) {
  if (offset > size || bytes > size - offset) {
    throw invalid_argument(std::string(what) + " of " + std::to_string(bytes) +
                           " bytes at offset " + std::to_string(offset) +
                           " does not fit in a buffer of " + std::to_string(size) + " bytes");
  }
}

// Whether `s` is capturing (or its capture was invalidated and not yet ended). False when the
// driver cannot say: the free then goes ahead as before.
bool capturing(const detail::driver_api& api, stream_ref s) noexcept {
  if (s.handle() == nullptr) return false;  // the legacy stream never captures
  detail::scoped_context scope(api, s.device().ordinal(), std::nothrow);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (api.cuStreamGetCaptureInfo(s.handle(), &status, nullptr, nullptr, nullptr, nullptr,
                                 nullptr) != CUDA_SUCCESS) {
    return false;
  }
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Frees whose release stream was capturing when the last owner let go. Enqueued then, the free
// would become a node of the capture (freeing memory the graph did not allocate, every time the
// graph runs) or invalidate it; so it waits here, and a thread of cucore's own enqueues it once
// the capture has ended, checking every millisecond while any wait.
class deferred_frees {
 public:
  struct entry {
    std::shared_ptr<memory_resource> resource;
    device_address address = 0;
    std::size_t size = 0;
    CUstream stream = nullptr;
    cucore::device dev;
    std::shared_ptr<const void> stream_owner;  // keeps the stream alive until the free
  };

  void add(const detail::driver_api& api, entry e) noexcept {
    try {
      std::call_once(started_,
                     [this, &api] { std::thread([this, api = &api] { run(*api); }).detach(); });
      std::lock_guard lock(mutex_);
      pending_.push_back(std::move(e));
    } catch (...) {
      // No thread or no memory for the entry: leak the allocation rather than free it into a
      // capture.
      log(log_level::warning,
          "cucore: a buffer released while its stream captures could not be queued for a free "
          "after the capture (out of memory or threads); its device memory is leaked");
      return;
    }
    wake_.notify_one();
  }

 private:
  [[noreturn]] void run(const detail::driver_api& api) noexcept {
    // Relaxed: the frees below never invalidate a global-mode capture on another thread.
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    api.cuThreadExchangeStreamCaptureMode(&mode);
    std::vector<entry> batch;
    std::vector<entry> still;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        if (!still.empty()) {
          wake_.wait_for(lock, std::chrono::milliseconds(1));
        } else {
          wake_.wait(lock, [this] { return !pending_.empty(); });
        }
        for (auto& e : pending_) still.push_back(std::move(e));
        pending_.clear();
      }
      batch.swap(still);
      const detail::background_release release;  // the exit waits for this batch
      for (auto& e : batch) {
        if (!release.ok()) continue;  // exiting: leak (the resource's destructor checks)
        const stream_ref s(e.stream, e.dev);
        if (capturing(api, s)) {
          still.push_back(std::move(e));
        } else {
          e.resource->deallocate(e.address, e.size, s);
        }
      }
      batch.clear();
    }
  }

  std::once_flag started_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<entry> pending_;
};

// Never destroyed: the last owner of a buffer may let go during exit.
deferred_frees& deferred() {
  static deferred_frees* d = new deferred_frees;
  return *d;
}

}  // namespace

// ---- pool_memory_resource ----------------------------------------------------------------------

pool_memory_resource::pool_memory_resource(const cucore::device& dev, pool_options options)
    : device_(dev), owned_(true) {
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, dev.ordinal());
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev.ordinal();
  props.maxSize = options.max_size;
  CUmemoryPool pool = nullptr;
  detail::check_driver(api.cuMemPoolCreate(&pool, &props), "cuMemPoolCreate");
  pool_ = pool;
  if (options.release_threshold != 0) {
    try {
      set_release_threshold(options.release_threshold);
    } catch (...) {
      api.cuMemPoolDestroy(pool_);
      throw;
    }
  }
}

pool_memory_resource::pool_memory_resource(adopt_default, const cucore::device& dev)
    : device_(dev), owned_(false) {
  const auto& api = detail::runtime_driver(kFeature);
  CUmemoryPool pool = nullptr;
  detail::check_driver(
      api.cuDeviceGetDefaultMemPool(&pool, detail::device_at(dev.ordinal()).handle),
      "cuDeviceGetDefaultMemPool");
  pool_ = pool;
}

std::shared_ptr<pool_memory_resource> pool_memory_resource::default_pool(
    const cucore::device& dev) {
  return std::shared_ptr<pool_memory_resource>(new pool_memory_resource(adopt_default{}, dev));
}

pool_memory_resource::~pool_memory_resource() {
  if (!owned_ || pool_ == nullptr || !detail::driver_alive()) return;
  const auto& api = *detail::driver_table().api;
  detail::scoped_context scope(api, device_.ordinal(), std::nothrow);
  // Returns at once when frees are still pending; the driver releases the pool after them.
  if (CUresult r = api.cuMemPoolDestroy(pool_); r != CUDA_SUCCESS) {
    detail::log_driver_failure(r, "cuMemPoolDestroy");
  }
}

device_address pool_memory_resource::allocate(std::size_t bytes, stream_ref s) {
  if (bytes == 0) throw invalid_argument("pool_memory_resource::allocate needs at least one byte");
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, s.device().ordinal());
  CUdeviceptr address = 0;
  detail::check_driver(api.cuMemAllocFromPoolAsync(&address, bytes, pool_, s.handle()),
                       "cuMemAllocFromPoolAsync");
  return address;
}

void pool_memory_resource::deallocate(device_address address, std::size_t /*bytes*/,
                                      stream_ref s) noexcept {
  if (address == 0 || !detail::driver_alive()) return;
  const auto& api = *detail::driver_table().api;
  detail::scoped_context scope(api, s.device().ordinal(), std::nothrow);
  if (CUresult r = api.cuMemFreeAsync(address, s.handle()); r != CUDA_SUCCESS) {
    detail::log_driver_failure(r, "cuMemFreeAsync");
  }
}

std::uint64_t pool_memory_resource::release_threshold() const {
  return pool_attribute(pool_, device_.ordinal(), CU_MEMPOOL_ATTR_RELEASE_THRESHOLD);
}

void pool_memory_resource::set_release_threshold(std::uint64_t bytes) {
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, device_.ordinal());
  cuuint64_t value = bytes;
  detail::check_driver(api.cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value),
                       "cuMemPoolSetAttribute");
}

std::uint64_t pool_memory_resource::reserved_bytes() const {
  return pool_attribute(pool_, device_.ordinal(), CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
}

std::uint64_t pool_memory_resource::used_bytes() const {
  return pool_attribute(pool_, device_.ordinal(), CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
}

void pool_memory_resource::trim_to(std::size_t min_bytes_to_keep) {
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, device_.ordinal());
  detail::check_driver(api.cuMemPoolTrimTo(pool_, min_bytes_to_keep), "cuMemPoolTrimTo");
}

void pool_memory_resource::set_access(const cucore::device& peer, bool enabled) {
  if (peer == device_) {
    throw invalid_argument("pool_memory_resource::set_access: device " +
                           std::to_string(peer.ordinal()) +
                           " owns this pool and always has access; pass another device");
  }
  if (!peer.can_access_peer(device_)) {
    throw invalid_argument("pool_memory_resource::set_access: device " +
                           std::to_string(peer.ordinal()) + " cannot access device " +
                           std::to_string(device_.ordinal()) +
                           "'s memory (cuDeviceCanAccessPeer is 0); copy with buffer::copy_from");
  }
  const auto& api = detail::runtime_driver(kFeature);
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = detail::device_at(peer.ordinal()).handle;
  desc.flags = enabled ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  detail::scoped_context scope(api, device_.ordinal());
  detail::check_driver(api.cuMemPoolSetAccess(pool_, &desc, 1), "cuMemPoolSetAccess");
}

bool pool_memory_resource::access(const cucore::device& peer) const {
  const auto& api = detail::runtime_driver(kFeature);
  CUmemLocation location{};
  location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = detail::device_at(peer.ordinal()).handle;
  CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  detail::scoped_context scope(api, device_.ordinal());
  detail::check_driver(api.cuMemPoolGetAccess(&flags, pool_, &location), "cuMemPoolGetAccess");
  return flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

// ---- buffer
// --------------------------------------------------------------------------------------

// The allocation: shared by the buffer and every owner() handed out. The last owner frees it,
// ordered on the release stream, which it keeps alive until then (and the resource too).
struct buffer::state {
  device_address address = 0;
  std::size_t size = 0;
  std::shared_ptr<memory_resource> resource;
  std::mutex mutex;  // guards the release stream
  CUstream release_stream = nullptr;
  cucore::device release_device;
  std::shared_ptr<const void> release_owner;

  state(std::size_t bytes, const stream& s, std::shared_ptr<memory_resource> mr)
      : size(bytes),
        resource(std::move(mr)),
        release_stream(s.handle()),
        release_device(s.device()),
        release_owner(s.owner()) {
    if (bytes != 0) address = resource->allocate(bytes, s);
  }
  state(const state&) = delete;
  state& operator=(const state&) = delete;
  // Members are destroyed after the body: the free is enqueued before the stream and the resource
  // are let go. Never into a capture: while the release stream captures, the free waits for the
  // capture to end (the last owner may let go on any thread, the graphs' release thread included).
  ~state() {
    if (address == 0) return;
    const stream_ref s(release_stream, release_device);
    if (detail::driver_alive()) {
      const auto& api = *detail::driver_table().api;
      if (capturing(api, s)) {
        deferred().add(api, {std::move(resource), address, size, release_stream, release_device,
                             std::move(release_owner)});
        return;
      }
    }
    resource->deallocate(address, size, s);
  }
};

buffer::buffer(std::size_t bytes, const stream& s)
    : buffer(bytes, s, s.device().default_memory_resource()) {}

buffer::buffer(std::size_t bytes, const stream& s, std::shared_ptr<memory_resource> resource) {
  if (!resource) throw invalid_argument("buffer needs a memory resource (got a null pointer)");
  if (!s.valid()) detail::throw_empty("stream");
  state_ = std::make_shared<state>(bytes, s, std::move(resource));
}

std::size_t buffer::size() const {
  return detail::state_of(state_, "buffer").size;
}
device_address buffer::address() const {
  return detail::state_of(state_, "buffer").address;
}
cucore::device buffer::device() const {
  return detail::state_of(state_, "buffer").resource->device();
}
const std::shared_ptr<memory_resource>& buffer::resource() const {
  return detail::state_of(state_, "buffer").resource;
}

void buffer::copy_from(const void* host, std::size_t bytes, stream_ref s, std::size_t offset) {
  if (!state_) detail::throw_empty("buffer");
  check_range(offset, bytes, state_->size, "a copy from the host");
  if (bytes == 0) return;
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, s.device().ordinal());
  detail::check_driver(api.cuMemcpyAsync(state_->address + offset,
                                         reinterpret_cast<CUdeviceptr>(host), bytes, s.handle()),
                       "cuMemcpyAsync");
}

void buffer::copy_to(void* host, std::size_t bytes, stream_ref s, std::size_t offset) const {
  if (!state_) detail::throw_empty("buffer");
  check_range(offset, bytes, state_->size, "a copy to the host");
  if (bytes == 0) return;
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, s.device().ordinal());
  detail::check_driver(api.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(host),
                                         state_->address + offset, bytes, s.handle()),
                       "cuMemcpyAsync");
}

void buffer::copy_from(const buffer& source, stream_ref s) {
  if (!state_) detail::throw_empty("buffer");
  if (!source.state_) detail::throw_empty("source buffer");
  check_range(0, source.state_->size, state_->size, "a device-to-device copy");
  if (source.state_->size == 0) return;
  const auto& api = detail::runtime_driver(kFeature);
  const int to = state_->resource->device().ordinal();
  const int from = source.state_->resource->device().ordinal();
  detail::scoped_context scope(api, s.device().ordinal());
  if (to == from) {
    detail::check_driver(
        api.cuMemcpyAsync(state_->address, source.state_->address, source.state_->size, s.handle()),
        "cuMemcpyAsync");
    return;
  }
  if (capturing(api, s)) {
    // A peer copy cannot be captured (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the capture is
    // invalidated); a plain copy can, where the stream's device reaches both buffers.
    const CUresult r =
        api.cuMemcpyAsync(state_->address, source.state_->address, source.state_->size, s.handle());
    if (r == CUDA_ERROR_INVALID_VALUE) {
      throw invalid_argument(
          "buffer::copy_from device " + std::to_string(from) + " to device " + std::to_string(to) +
          " on a capturing stream of device " + std::to_string(s.device().ordinal()) +
          ": a captured copy runs on the stream's device, which cannot reach both buffers. Grant "
          "it access to the other device's pool (pool_memory_resource::set_access), or copy "
          "outside the capture");
    }
    detail::check_driver(r, "cuMemcpyAsync");
    return;
  }
  // Between devices: cuMemcpyAsync on unified addresses is not reliable for stream-ordered pool
  // memory (NVIDIA bug 3446335: NVIDIA's advice is the peer copy), so name both contexts.
  detail::check_driver(
      api.cuMemcpyPeerAsync(state_->address, detail::primary_context(to), source.state_->address,
                            detail::primary_context(from), source.state_->size, s.handle()),
      "cuMemcpyPeerAsync");
}

void buffer::fill_bits(std::uint32_t bits, std::size_t width, stream_ref s) {
  if (!state_) detail::throw_empty("buffer");
  if (state_->size % width != 0) {
    throw invalid_argument("buffer::fill with a " + std::to_string(width) +
                           "-byte value needs a size that is a multiple of " +
                           std::to_string(width) + "; this buffer has " +
                           std::to_string(state_->size) + " bytes");
  }
  const std::size_t count = state_->size / width;
  if (count == 0) return;
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, s.device().ordinal());
  CUdeviceptr dst = state_->address;
  switch (width) {
    case 1:
      detail::check_driver(
          api.cuMemsetD8Async(dst, static_cast<unsigned char>(bits), count, s.handle()),
          "cuMemsetD8Async");
      break;
    case 2:
      detail::check_driver(
          api.cuMemsetD16Async(dst, static_cast<unsigned short>(bits), count, s.handle()),
          "cuMemsetD16Async");
      break;
    default:
      detail::check_driver(api.cuMemsetD32Async(dst, bits, count, s.handle()), "cuMemsetD32Async");
      break;
  }
}

std::shared_ptr<const void> buffer::owner() const {
  if (!state_) detail::throw_empty("buffer");
  return state_;
}

void buffer::close(const stream& s) {
  if (!state_) return;
  auto owner = s.owner();  // throws for an empty stream, before anything changes
  {
    std::lock_guard lock(state_->mutex);
    state_->release_stream = s.handle();
    state_->release_device = s.device();
    state_->release_owner = std::move(owner);
  }
  state_.reset();
}

// ---- pinned_buffer
// -------------------------------------------------------------------------------

struct pinned_buffer::state {
  void* data = nullptr;
  std::size_t size = 0;
  int ordinal = 0;  // the context it was allocated in (portable: usable from every context)

  explicit state(std::size_t bytes) : size(bytes) {
    if (bytes == 0) return;
    const auto& api = detail::runtime_driver(kFeature);
    ordinal = cucore::device::current().ordinal();
    detail::scoped_context scope(api, ordinal);
    detail::check_driver(api.cuMemHostAlloc(&data, bytes, CU_MEMHOSTALLOC_PORTABLE),
                         "cuMemHostAlloc");
  }
  state(const state&) = delete;
  state& operator=(const state&) = delete;
  ~state() {
    if (data == nullptr) return;
    detail::destroy_in_context(ordinal, "cuMemFreeHost",
                               [this](const auto& api) { return api.cuMemFreeHost(data); });
  }
};

pinned_buffer::pinned_buffer(std::size_t bytes) : state_(std::make_shared<const state>(bytes)) {}

std::size_t pinned_buffer::size() const noexcept {
  return state_ ? state_->size : 0;
}
void* pinned_buffer::data() const noexcept {
  return state_ ? state_->data : nullptr;
}
std::shared_ptr<const void> pinned_buffer::owner() const {
  if (!state_) detail::throw_empty("pinned_buffer");
  return state_;
}

}  // namespace cucore
