// Corpus kernel (d2): libcu++ <cuda/std/complex> from the toolkit.
//
// One radix-2 butterfly stage of an in-place FFT over n complex<float> values: pairs half_span
// apart are combined with the twiddle factor exp(-2 pi i k / (2 half_span)) (cuda::std::polar), and
// the magnitude of each output is recorded with cuda::std::abs.
#include <cuda/std/cmath>
#include <cuda/std/complex>

extern "C" __global__ void complex_butterfly(cuda::std::complex<float>* data, float* magnitude,
                                             int n, int half_span) {
  using complex = cuda::std::complex<float>;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n / 2) return;
  const int group = t / half_span;
  const int k = t % half_span;
  const int top = group * 2 * half_span + k;
  const int bottom = top + half_span;

  const float angle = -3.14159265358979f * static_cast<float>(k) / static_cast<float>(half_span);
  const complex twiddle = cuda::std::polar(1.0f, angle);
  const complex a = data[top];
  const complex b = twiddle * data[bottom];
  data[top] = a + b;
  data[bottom] = a - b;
  magnitude[top] = cuda::std::abs(a + b);
  magnitude[bottom] = cuda::std::abs(a - b);
}
