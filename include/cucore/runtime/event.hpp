// Events: markers in a stream, for ordering streams and timing work.
#pragma once

#include <chrono>
#include <memory>

#include "cucore/runtime/device.hpp"
#include "cucore/runtime/stream.hpp"

struct CUevent_st;  // the driver's event (CUevent), opaque here

namespace cucore {

struct event_options {
  // Records timestamps for elapsed_time(); off (CU_EVENT_DISABLE_TIMING) makes waits cheaper.
  bool timing = true;
  // synchronize() yields the CPU thread instead of spinning (CU_EVENT_BLOCKING_SYNC).
  bool blocking_sync = false;
};

// An owned event (cuEventCreate). Move-only; the CUevent is destroyed when the last of its owners
// lets go (this object and every owner() handed out, e.g. to a graph node). Recording the same
// event from two threads at once is a race; waiting on, querying and synchronizing are not.
class event {
 public:
  // An empty event (valid() is false).
  event() noexcept = default;
  explicit event(const cucore::device& dev, event_options options = {});
  event(event&&) noexcept = default;
  event& operator=(event&&) noexcept = default;
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  ~event() = default;

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  // These throw invalid_argument on an empty event.
  CUevent_st* handle() const;
  cucore::device device() const;
  bool timing() const;

  // Captures the work enqueued so far on `s` (cuEventRecord).
  void record(stream_ref s);
  // Waits until the recorded work has finished (cuEventSynchronize). An event never recorded is
  // complete.
  void synchronize() const;
  // True when the recorded work has finished (cuEventQuery); never blocks.
  bool query() const;

  // A shared owner that keeps the CUevent alive after this object is closed or destroyed.
  std::shared_ptr<const void> owner() const;
  // Gives up this object's ownership now (the destructor does the same). Never throws.
  void close() noexcept { state_.reset(); }

 private:
  struct state;
  std::shared_ptr<const state> state_;
};

// Time between two recorded, completed events (cuEventElapsedTime), about 0.5 µs resolution.
// Throws invalid_argument when either was created without timing, cuda_error (CUDA_ERROR_NOT_READY)
// when one has not completed.
std::chrono::duration<float, std::milli> elapsed_time(const event& start, const event& end);

}  // namespace cucore
