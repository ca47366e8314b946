// Corpus kernel (d1): libcu++ <cuda/std/mdspan> from the toolkit.
//
// A five-point stencil over a row-major rows x cols grid (layout_right, dynamic extents), written
// transposed into a column-major (layout_left) view of the output; border cells copy through.
#include <cuda/std/array>
#include <cuda/std/mdspan>

namespace corpus {

using Extents = cuda::std::dextents<int, 2>;
using Grid = cuda::std::mdspan<const float, Extents, cuda::std::layout_right>;
using Transposed = cuda::std::mdspan<float, Extents, cuda::std::layout_left>;

__device__ float stencil(const Grid& g, int r, int c) {
  if (r == 0 || c == 0 || r == g.extent(0) - 1 || c == g.extent(1) - 1) return g(r, c);
  return 0.5f * g(r, c) + 0.125f * (g(r - 1, c) + g(r + 1, c) + g(r, c - 1) + g(r, c + 1));
}

}  // namespace corpus

extern "C" __global__ void mdspan_stencil_transpose(const float* in, float* out, int rows,
                                                    int cols) {
  using namespace corpus;
  Grid grid(in, rows, cols);
  // out is cols x rows, column-major: out_t(c, r) lives at out[c + r * cols].
  Transposed out_t(out, cuda::std::array<int, 2>{cols, rows});
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r >= grid.extent(0) || c >= grid.extent(1)) return;
  out_t(c, r) = stencil(grid, r, c);
}
