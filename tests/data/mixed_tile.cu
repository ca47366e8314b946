// One Tile kernel (a tiled copy, NVRTC 13.1+ with -enable-tile, C++20) and one SIMT kernel: the
// Tile tests' program (tile_test, cli_test, tests/python/test_tile.py).
#include <cuda_tile.h>
namespace ct = ::cuda::tiles;
__tile_global__ void tile_copy(float* out, const float* in, long n) {
  auto bx = ct::bid().x;
  auto src = ct::partition_view{ct::tensor_span{in, ct::extents<long, ct::dynamic_extent>{n}},
                                ct::shape<128>{}};
  auto dst = ct::partition_view{ct::tensor_span{out, ct::extents<long, ct::dynamic_extent>{n}},
                                ct::shape<128>{}};
  dst.store_masked(src.load_masked(bx), bx);
}
__global__ void simt_scale(float* out, const float* in) { out[threadIdx.x] = 2.0f * in[threadIdx.x]; }
