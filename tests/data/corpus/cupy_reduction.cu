#include <cupy/complex.cuh>
#include <cupy/carray.cuh>
#include <cupy/atomics.cuh>
#include <cupy/math_constants.h>

// Corpus kernel (f): what CuPy 14's ReductionKernel emits (the preamble includes, the type map,
// REDUCE/POST_MAP macros around a shared-memory tree reduction with CIndexers for the input and
// the output), for
//   cupy.ReductionKernel('T x', 'T y', 'x * x', 'a + b', 'y = sqrt(a)', '0', 'cupy_l2norm')
// reducing one axis of a 2-D float32 array (a strided view: c_contiguous false), block size 512.
typedef float T;
typedef float type_in0_raw;
typedef float type_out0_raw;

#define REDUCE(a, b) (a + b)
#define POST_MAP(a) (y = sqrt(a))
#define _REDUCE(_offset) if (_tid < _offset) { \
  _type_reduce _a = _sdata[_tid], _b = _sdata[(_tid + _offset)]; \
  _sdata[_tid] = REDUCE(_a, _b); \
}

typedef T _type_reduce;
extern "C" __global__ void cupy_l2norm(const CArray<T, 2, false, true> _raw_x, CArray<T, 1, true, true> _raw_y, CIndexer<2, true> _in_ind, CIndexer<1, true> _out_ind, const int _block_stride) {
  __shared__ char _sdata_raw[512 * sizeof(_type_reduce)];
  _type_reduce *_sdata = reinterpret_cast<_type_reduce*>(_sdata_raw);

  // Threads of a block form _J_stride rows of _block_stride columns: a column per output, the
  // rows split the reduced axis.
  const int _J_stride = 512 / _block_stride;
  const ptrdiff_t _j_stride = static_cast<ptrdiff_t>(_J_stride) * _out_ind.size();
  const unsigned int _thread_row = threadIdx.x / _block_stride;
  const unsigned int _thread_col = threadIdx.x % _block_stride;
  const unsigned int _tid = _thread_row * _block_stride + _thread_col;
  const int _J_offset = _thread_row;
  const ptrdiff_t _j_offset = static_cast<ptrdiff_t>(_J_offset) * _out_ind.size();

  for (ptrdiff_t _i_base = static_cast<ptrdiff_t>(blockIdx.x) * _block_stride;
       _i_base < _out_ind.size();
       _i_base += static_cast<ptrdiff_t>(gridDim.x) * _block_stride) {
    _type_reduce _s = _type_reduce(0);
    const ptrdiff_t _i = _i_base + _thread_col;
    for (ptrdiff_t _j = _i + _j_offset, _J = _J_offset;
         _j < _in_ind.size();
         _j += _j_stride, _J += _J_stride) {
      _in_ind.set(_j);
      const T x = _raw_x[_in_ind.get()];
      _type_reduce _a = static_cast<_type_reduce>(x * x);
      _s = REDUCE(_s, _a);
    }
    _sdata[_tid] = _s;
    __syncthreads();
    for (unsigned int _block = 512 / 2; _block >= static_cast<unsigned int>(_block_stride);
         _block >>= 1) {
      _REDUCE(_block);
      __syncthreads();
    }
    if (_J_offset == 0 && _i < _out_ind.size()) {
      _s = _sdata[_tid];
      _out_ind.set(_i);
      T &y = _raw_y[_out_ind.get()];
      POST_MAP(_s);
    }
    __syncthreads();
  }
}
