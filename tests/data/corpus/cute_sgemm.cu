// Corpus kernel (g): a small CuTe GEMM for sm_90 on CUDA cores (no tensor cores).
//
// C = alpha * A * B^T + beta * C in float, A M x K and B N x K row-major ("K-major"), C M x N
// row-major; M and N multiples of 64, K a multiple of 8. A 256-thread block computes a 64 x 64
// tile of C: per K step, tiled copies stage 64 x 8 slices of A and B in shared memory and a
// 16 x 16 TiledMMA of UniversalFMA atoms accumulates into registers. Launch: grid (M / 64,
// N / 64), block 256, no dynamic shared memory.
#include <cute/tensor.hpp>

namespace corpus {

using namespace cute;

constexpr int kBlockM = 64;
constexpr int kBlockN = 64;
constexpr int kBlockK = 8;
constexpr int kThreads = 256;

__device__ void sgemm_tile(int m, int n, int k, float alpha, const float* a, const float* b,
                           float beta, float* c) {
  Tensor mA = make_tensor(make_gmem_ptr(a), make_shape(m, k), make_stride(k, Int<1>{}));
  Tensor mB = make_tensor(make_gmem_ptr(b), make_shape(n, k), make_stride(k, Int<1>{}));
  Tensor mC = make_tensor(make_gmem_ptr(c), make_shape(m, n), make_stride(n, Int<1>{}));

  auto block_tile = make_shape(Int<kBlockM>{}, Int<kBlockN>{}, Int<kBlockK>{});
  auto block_coord = make_coord(static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), _);
  Tensor gA = local_tile(mA, block_tile, block_coord, Step<_1, X, _1>{});  // (64, 8, k / 8)
  Tensor gB = local_tile(mB, block_tile, block_coord, Step<X, _1, _1>{});  // (64, 8, k / 8)
  Tensor gC = local_tile(mC, block_tile, block_coord, Step<_1, _1, X>{});  // (64, 64)

  // Shared slices stored M- (N-) major, so the MMA's reads along M (N) are contiguous.
  __shared__ float smem_a[kBlockM * kBlockK];
  __shared__ float smem_b[kBlockN * kBlockK];
  Tensor sA = make_tensor(make_smem_ptr(smem_a), make_layout(make_shape(Int<kBlockM>{},
                                                                        Int<kBlockK>{})));
  Tensor sB = make_tensor(make_smem_ptr(smem_b), make_layout(make_shape(Int<kBlockN>{},
                                                                        Int<kBlockK>{})));

  // 256 threads as 32 x 8, consecutive threads along K (the contiguous global dimension).
  using CopyThreads = Layout<Shape<_32, _8>, Stride<_8, _1>>;
  auto copy_a = make_tiled_copy(Copy_Atom<UniversalCopy<float>, float>{}, CopyThreads{},
                                Layout<Shape<_1, _1>>{});
  auto copy_b = make_tiled_copy(Copy_Atom<UniversalCopy<float>, float>{}, CopyThreads{},
                                Layout<Shape<_1, _1>>{});
  auto mma = make_tiled_mma(UniversalFMA<float, float, float, float>{},
                            Layout<Shape<_16, _16, _1>>{});

  auto copy_a_slice = copy_a.get_slice(threadIdx.x);
  Tensor tAgA = copy_a_slice.partition_S(gA);
  Tensor tAsA = copy_a_slice.partition_D(sA);
  auto copy_b_slice = copy_b.get_slice(threadIdx.x);
  Tensor tBgB = copy_b_slice.partition_S(gB);
  Tensor tBsB = copy_b_slice.partition_D(sB);

  auto mma_slice = mma.get_slice(threadIdx.x);
  Tensor tCsA = mma_slice.partition_A(sA);
  Tensor tCsB = mma_slice.partition_B(sB);
  Tensor tCgC = mma_slice.partition_C(gC);
  Tensor tCrC = mma_slice.make_fragment_C(tCgC);
  clear(tCrC);

  const int k_tiles = size<2>(gA);
  for (int kt = 0; kt < k_tiles; ++kt) {
    copy(copy_a, tAgA(_, _, _, kt), tAsA);
    copy(copy_b, tBgB(_, _, _, kt), tBsB);
    __syncthreads();
    gemm(mma, tCsA, tCsB, tCrC);
    __syncthreads();
  }
  axpby(alpha, tCrC, beta, tCgC);
}

}  // namespace corpus

extern "C" __global__ void __launch_bounds__(corpus::kThreads)
    cute_sgemm_nt(int m, int n, int k, float alpha, const float* a, const float* b, float beta,
                  float* c) {
  corpus::sgemm_tile(m, n, k, alpha, a, b, beta, c);
}
