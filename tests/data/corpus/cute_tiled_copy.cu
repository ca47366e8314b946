// Corpus kernel (a): CuTe tensors, layouts and tiled copies, for sm_90.
//
// out = alpha * in for a row-major M x N float matrix (M and N multiples of 64, both pointers
// 16-byte aligned). Each 128-thread block owns one 64 x 64 tile: a tiled copy of 128-bit cp.async
// atoms brings it from global to shared memory, the block scales it there, and a second tiled copy
// of plain 128-bit copies writes it back. Launch: grid (M / 64, N / 64), block 128, no dynamic
// shared memory.
#include <cute/tensor.hpp>

namespace corpus {

using namespace cute;

constexpr int kTileRows = 64;
constexpr int kTileCols = 64;
constexpr int kThreads = 128;

// 128 threads as 8 rows of 16, each moving 4 consecutive floats (one 128-bit access) per step.
using ThreadLayout = Layout<Shape<Int<8>, Int<16>>, Stride<Int<16>, Int<1>>>;
using ValueLayout = Layout<Shape<Int<1>, Int<4>>>;

__device__ void scale_tile(const float* in, float* out, int m, int n, float alpha) {
  auto matrix = make_layout(make_shape(m, n), make_stride(n, Int<1>{}));
  Tensor g_in = make_tensor(make_gmem_ptr(in), matrix);
  Tensor g_out = make_tensor(make_gmem_ptr(out), matrix);

  auto tile_shape = make_shape(Int<kTileRows>{}, Int<kTileCols>{});
  auto tile_coord = make_coord(static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y));
  Tensor g_in_tile = local_tile(g_in, tile_shape, tile_coord);
  Tensor g_out_tile = local_tile(g_out, tile_shape, tile_coord);

  __shared__ alignas(128) float smem[kTileRows * kTileCols];
  Tensor s_tile = make_tensor(make_smem_ptr(smem), make_layout(tile_shape, LayoutRight{}));

  auto load = make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEALWAYS<uint128_t>, float>{},
                              ThreadLayout{}, ValueLayout{});
  auto store = make_tiled_copy(Copy_Atom<UniversalCopy<uint128_t>, float>{}, ThreadLayout{},
                               ValueLayout{});

  auto load_slice = load.get_slice(threadIdx.x);
  copy(load, load_slice.partition_S(g_in_tile), load_slice.partition_D(s_tile));
  cp_async_fence();
  cp_async_wait<0>();
  __syncthreads();

  for (int i = threadIdx.x; i < size(s_tile); i += kThreads) {
    s_tile(i) = alpha * s_tile(i);
  }
  __syncthreads();

  auto store_slice = store.get_slice(threadIdx.x);
  copy(store, store_slice.partition_S(s_tile), store_slice.partition_D(g_out_tile));
}

}  // namespace corpus

extern "C" __global__ void __launch_bounds__(corpus::kThreads)
    cute_tile_scale(const float* in, float* out, int m, int n, float alpha) {
  corpus::scale_tile(in, out, m, n, alpha);
}
