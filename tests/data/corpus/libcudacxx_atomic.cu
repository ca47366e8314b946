// Corpus kernel (d3): libcu++ atomics from the toolkit (<cuda/std/atomic>, <cuda/atomic>).
//
// A 256-bin byte histogram: each block counts into a shared-memory histogram through block-scoped
// cuda::atomic_ref, then adds its bins to the global histogram through device-scoped
// cuda::std::atomic_ref; the last block to finish (a cuda::std::atomic_ref ticket counter)
// publishes the total count.
#include <cuda/atomic>
#include <cuda/std/atomic>
#include <cuda/std/cstdint>

extern "C" __global__ void atomic_histogram(const cuda::std::uint8_t* bytes, int n,
                                            unsigned int* histogram, unsigned int* blocks_done,
                                            unsigned int* total) {
  __shared__ unsigned int bins[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) bins[i] = 0;
  __syncthreads();

  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    cuda::atomic_ref<unsigned int, cuda::thread_scope_block> bin(bins[bytes[i]]);
    bin.fetch_add(1, cuda::std::memory_order_relaxed);
  }
  __syncthreads();

  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    if (bins[i] != 0) {
      cuda::std::atomic_ref<unsigned int> global(histogram[i]);
      global.fetch_add(bins[i], cuda::std::memory_order_relaxed);
    }
  }
  __syncthreads();

  if (threadIdx.x == 0) {
    cuda::std::atomic_ref<unsigned int> done(*blocks_done);
    if (done.fetch_add(1, cuda::std::memory_order_acq_rel) == gridDim.x - 1) {
      cuda::std::atomic_ref<unsigned int> out(*total);
      out.store(static_cast<unsigned int>(n), cuda::std::memory_order_release);
    }
  }
}
