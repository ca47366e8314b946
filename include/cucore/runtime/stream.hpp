// Streams: ordered queues of device work.
#pragma once

#include <memory>
#include <optional>

#include "cucore/runtime/device.hpp"

struct CUstream_st;  // the driver's stream (CUstream), opaque here

namespace cucore {

class event;
class stream;
struct event_options;

struct stream_options {
  // CU_STREAM_NON_BLOCKING: no implicit synchronization with the legacy default stream.
  bool non_blocking = true;
  // Lower numbers run first; see device::stream_priority_range(). Default: the device's default.
  std::optional<int> priority = std::nullopt;
};

// A non-owning reference to a stream: what operations that only enqueue work take. It does not keep
// the stream alive. A null handle is the legacy default stream of its device.
class stream_ref {
 public:
  // Throws invalid_argument when `s` is empty (moved from or closed).
  stream_ref(const stream& s);  // NOLINT(google-explicit-constructor)
  // A stream created elsewhere (another library, cuStreamCreate) on `dev`'s primary context.
  stream_ref(CUstream_st* handle, cucore::device dev) noexcept : handle_(handle), device_(dev) {}

  CUstream_st* handle() const noexcept { return handle_; }
  cucore::device device() const noexcept { return device_; }

  // See the members of the same name in stream.
  void synchronize() const;
  bool query() const;
  void wait(const event& e) const;
  void wait(stream_ref other) const;

  friend bool operator==(const stream_ref& a, const stream_ref& b) noexcept {
    return a.handle_ == b.handle_ && a.device_ == b.device_;
  }

 private:
  CUstream_st* handle_ = nullptr;
  cucore::device device_;
};

// An owned stream (cuStreamCreateWithPriority). Move-only. The CUstream is destroyed when the
// last of its owners lets go: this object, and every shared owner() handed out (a buffer whose
// stream-ordered free is recorded on this stream holds one, so the free is never enqueued on a
// destroyed stream). Destroying a stream with work pending does not wait for it (cuStreamDestroy).
// One stream object may be used from many threads for enqueueing; closing or moving it while
// another thread uses it is a race.
class stream {
 public:
  // An empty stream (valid() is false).
  stream() noexcept = default;
  explicit stream(const cucore::device& dev, stream_options options = {});
  stream(stream&&) noexcept = default;
  stream& operator=(stream&&) noexcept = default;
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  ~stream() = default;

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  // These throw invalid_argument on an empty stream.
  CUstream_st* handle() const;
  cucore::device device() const;
  int priority() const;
  bool non_blocking() const;

  // Waits until all work enqueued so far has finished (cuStreamSynchronize).
  void synchronize() const { stream_ref(*this).synchronize(); }
  // True when all work enqueued so far has finished (cuStreamQuery); never blocks.
  bool query() const { return stream_ref(*this).query(); }
  // Work enqueued from now on waits for the event's last recorded work (cuStreamWaitEvent).
  void wait(const event& e) const { stream_ref(*this).wait(e); }
  // Work enqueued from now on waits for the work enqueued so far on `other` (through an event).
  void wait(stream_ref other) const { stream_ref(*this).wait(other); }
  // Records `e` here (the same as e.record(*this)).
  void record(event& e) const;
  // A new event on this stream's device, recorded here.
  event record_event(const event_options& options) const;
  event record_event() const;

  // A shared owner that keeps the CUstream alive after this object is closed or destroyed.
  std::shared_ptr<const void> owner() const;
  // Gives up this object's ownership now (the destructor does the same). Never throws.
  void close() noexcept { state_.reset(); }

 private:
  struct state;
  std::shared_ptr<const state> state_;
};

}  // namespace cucore
