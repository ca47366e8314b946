#include <cupy/complex.cuh>
#include <cupy/carray.cuh>
#include <cupy/atomics.cuh>
#include <cupy/math_constants.h>

    // Corpus kernel (e): what CuPy 14's ElementwiseKernel emits (the four preamble includes CuPy
    // prepends to every kernel, the type map's typedefs, the CUPY_FOR loop over a CIndexer, and
    // one reference per non-raw array argument), for the kernel
    //   cupy.ElementwiseKernel('T x, complex<T> z, T a', 'complex<T> w, raw T total',
    //       'w = a * x * exp(complex<T>(0, x)) + z; atomicAdd(&total[0], abs(w))',
    //       'cupy_phase_shift_axpy')
    // called with 1-D contiguous float32 / complex64 arrays (32-bit indexing).
    typedef float T;

    extern "C" __global__ void cupy_phase_shift_axpy(const CArray<T, 1, true, true> _raw_x, const CArray<complex<T>, 1, true, true> _raw_z, const T a, CArray<complex<T>, 1, true, true> _raw_w, CArray<T, 1, true, true> total, CIndexer<1, true> _ind) {
      ;
      #pragma unroll 1
      CUPY_FOR(i, _ind.size()) {
        _ind.set(i);
        const T &x = _raw_x[_ind.get()];
const complex<T> &z = _raw_z[_ind.get()];
complex<T> &w = _raw_w[_ind.get()];
w = a * x * exp(complex<T>(0, x)) + z; atomicAdd(&total[0], abs(w));
      };
      ;
    }
