// A device's primary context. cucore uses only primary contexts: each is retained once per process
// (cuDevicePrimaryCtxRetain) and never released, and every cucore call that needs a context pushes
// the right one for its duration when the calling thread has another (or none) current, so
// threads need no setup and a context the caller made current is left as it was.
#pragma once

#include "cucore/runtime/device.hpp"

namespace cucore {

// A value type naming the primary context of one device. Thread-safe.
class context {
 public:
  // The primary context of `dev`, retained on first use.
  explicit context(const cucore::device& dev);

  cucore::device device() const noexcept { return device_; }
  // The CUcontext, for interoperation with other CUDA code.
  CUctx_st* handle() const noexcept { return handle_; }
  // Makes this context current on the calling thread (cuCtxSetCurrent).
  void set_current() const;
  // Waits for all work in this context (cuCtxSynchronize).
  void synchronize() const;

  friend bool operator==(const context& a, const context& b) noexcept {
    return a.handle_ == b.handle_;
  }

 private:
  cucore::device device_;
  CUctx_st* handle_ = nullptr;
};

}  // namespace cucore
