#include "cucore/runtime/stream.hpp"

#include "cucore/error.hpp"
#include "cucore/runtime/event.hpp"
#include "runtime/runtime.hpp"

namespace cucore {
namespace {

constexpr std::string_view kFeature = "CUDA streams and events";

// True for CUDA_SUCCESS, false for CUDA_ERROR_NOT_READY; throws for anything else.
bool ready(CUresult result, const char* call) {
  if (result == CUDA_ERROR_NOT_READY) return false;
  detail::check_driver(result, call);
  return true;
}

}  // namespace

// Owns the CUstream; destroyed when the stream object and every owner() are gone.
struct stream::state {
  CUstream handle = nullptr;
  cucore::device device;
  int priority = 0;
  bool non_blocking = true;

  state(const cucore::device& dev, const stream_options& options) : device(dev) {
    const auto& api = detail::runtime_driver(kFeature);
    detail::scoped_context scope(api, dev.ordinal());
    unsigned flags = options.non_blocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT;
    int prio = options.priority.value_or(0);
    detail::check_driver(api.cuStreamCreateWithPriority(&handle, flags, prio),
                         "cuStreamCreateWithPriority");
    if (api.cuStreamGetPriority(handle, &priority) != CUDA_SUCCESS) priority = prio;
    non_blocking = options.non_blocking;
  }
  state(const state&) = delete;
  state& operator=(const state&) = delete;
  ~state() {
    if (handle == nullptr) return;
    detail::destroy_in_context(device.ordinal(), "cuStreamDestroy",
                               [this](const auto& api) { return api.cuStreamDestroy(handle); });
  }
};

stream::stream(const cucore::device& dev, stream_options options)
    : state_(std::make_shared<const state>(dev, options)) {}

CUstream_st* stream::handle() const {
  return detail::state_of(state_, "stream").handle;
}
cucore::device stream::device() const {
  return detail::state_of(state_, "stream").device;
}
int stream::priority() const {
  return detail::state_of(state_, "stream").priority;
}
bool stream::non_blocking() const {
  return detail::state_of(state_, "stream").non_blocking;
}

void stream::record(event& e) const {
  e.record(*this);
}

event stream::record_event(const event_options& options) const {
  event e(device(), options);
  e.record(*this);
  return e;
}

event stream::record_event() const {
  return record_event(event_options{});
}

std::shared_ptr<const void> stream::owner() const {
  if (!state_) detail::throw_empty("stream");
  return state_;
}

stream_ref::stream_ref(const stream& s) : handle_(s.handle()), device_(s.device()) {}

void stream_ref::synchronize() const {
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, device_.ordinal());
  detail::check_driver(api.cuStreamSynchronize(handle_), "cuStreamSynchronize");
}

bool stream_ref::query() const {
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, device_.ordinal());
  return ready(api.cuStreamQuery(handle_), "cuStreamQuery");
}

void stream_ref::wait(const event& e) const {
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, device_.ordinal());
  detail::check_driver(api.cuStreamWaitEvent(handle_, e.handle(), CU_EVENT_WAIT_DEFAULT),
                       "cuStreamWaitEvent");
}

void stream_ref::wait(stream_ref other) const {
  if (other == *this) return;
  event marker(other.device(), event_options{.timing = false});
  marker.record(other);
  wait(marker);
}

// Owns the CUevent; destroyed when the event object and every owner() are gone.
struct event::state {
  CUevent handle = nullptr;
  cucore::device device;
  bool timing = true;

  state(const cucore::device& dev, const event_options& options)
      : device(dev), timing(options.timing) {
    const auto& api = detail::runtime_driver(kFeature);
    detail::scoped_context scope(api, dev.ordinal());
    unsigned flags = CU_EVENT_DEFAULT;
    if (!options.timing) flags |= CU_EVENT_DISABLE_TIMING;
    if (options.blocking_sync) flags |= CU_EVENT_BLOCKING_SYNC;
    detail::check_driver(api.cuEventCreate(&handle, flags), "cuEventCreate");
  }
  state(const state&) = delete;
  state& operator=(const state&) = delete;
  ~state() {
    if (handle == nullptr) return;
    detail::destroy_in_context(device.ordinal(), "cuEventDestroy",
                               [this](const auto& api) { return api.cuEventDestroy(handle); });
  }
};

event::event(const cucore::device& dev, event_options options)
    : state_(std::make_shared<const state>(dev, options)) {}

CUevent_st* event::handle() const {
  return detail::state_of(state_, "event").handle;
}
cucore::device event::device() const {
  return detail::state_of(state_, "event").device;
}
bool event::timing() const {
  return detail::state_of(state_, "event").timing;
}

void event::record(stream_ref s) {
  const auto& api = detail::runtime_driver(kFeature);
  CUevent e = handle();
  detail::scoped_context scope(api, s.device().ordinal());
  detail::check_driver(api.cuEventRecord(e, s.handle()), "cuEventRecord");
}

void event::synchronize() const {
  const auto& api = detail::runtime_driver(kFeature);
  CUevent e = handle();
  detail::scoped_context scope(api, state_->device.ordinal());
  detail::check_driver(api.cuEventSynchronize(e), "cuEventSynchronize");
}

bool event::query() const {
  const auto& api = detail::runtime_driver(kFeature);
  CUevent e = handle();
  detail::scoped_context scope(api, state_->device.ordinal());
  return ready(api.cuEventQuery(e), "cuEventQuery");
}

std::shared_ptr<const void> event::owner() const {
  if (!state_) detail::throw_empty("event");
  return state_;
}

std::chrono::duration<float, std::milli> elapsed_time(const event& start, const event& end) {
  if (!start.timing() || !end.timing()) {
    throw invalid_argument(
        "elapsed_time needs two events created with timing (event_options::timing = true)");
  }
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, start.device().ordinal());
  float ms = 0.0f;
  detail::check_driver(api.cuEventElapsedTime(&ms, start.handle(), end.handle()),
                       "cuEventElapsedTime");
  return std::chrono::duration<float, std::milli>(ms);
}

}  // namespace cucore
