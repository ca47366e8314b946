#pragma once
// NVRTC's precompiled-header heap is one per process: a compile that creates or uses a PCH (the
// caller's own, or cucore's automatic one), and a resize (nvrtcSetPCHHeapSize frees every image),
// hold its lock for their whole call.

#include <cstddef>
#include <mutex>

namespace cucore::detail {

struct nvrtc_api;

std::unique_lock<std::mutex> lock_pch_heap();

// Resizes NVRTC's PCH heap (the caller holds lock_pch_heap()), then tells the listener: no image
// made before a resize can be used after it.
void resize_pch_heap(const nvrtc_api& api, std::size_t bytes);

// Whether the heap was resized in this process (by the caller, or by cucore growing it).
bool pch_heap_resized() noexcept;

// Who forgets the images a resize voids (automatic PCH, pch/auto_pch.cpp, registers itself when
// it first keeps state); called with the heap held.
void on_pch_heap_resize(void (*listener)()) noexcept;

}  // namespace cucore::detail
