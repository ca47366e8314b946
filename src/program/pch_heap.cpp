#include "program/pch_heap.hpp"

#include <atomic>

#include "cucore/error.hpp"
#include "program/compiler_handles.hpp"

namespace cucore::detail {
namespace {

std::mutex& heap() {
  static auto* m = new std::mutex;  // leaked: compiles may run during static destruction
  return *m;
}

std::atomic<void (*)()> g_listener{nullptr};
std::atomic<bool> g_resized{false};

}  // namespace

std::unique_lock<std::mutex> lock_pch_heap() {
  return std::unique_lock<std::mutex>(heap());
}

void resize_pch_heap(const nvrtc_api& api, std::size_t bytes) {
  const nvrtcResult r = api.nvrtcSetPCHHeapSize(bytes);
  g_resized = true;
  if (auto* listener = g_listener.load()) listener();
  if (r != NVRTC_SUCCESS) {
    throw library_error("NVRTC", "nvrtcSetPCHHeapSize", api.nvrtcGetErrorString(r));
  }
}

bool pch_heap_resized() noexcept {
  return g_resized;
}

void on_pch_heap_resize(void (*listener)()) noexcept {
  g_listener.store(listener);
}

}  // namespace cucore::detail
