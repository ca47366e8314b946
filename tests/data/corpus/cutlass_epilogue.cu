// Corpus kernel (b): a CUTLASS epilogue functor applied outside a GEMM.
//
// d[i] = max(alpha * acc[i] + beta * c[i], floor) with float accumulators and half-precision
// source and destination, eight elements per thread: the thread-level LinearCombination epilogue
// (cutlass/epilogue/thread/linear_combination.h) over cutlass::Array fragments, then
// cutlass::maximum from cutlass/functional.h. n must be a multiple of 8, pointers 16-byte aligned.
#include <cutlass/cutlass.h>
#include <cutlass/array.h>
#include <cutlass/functional.h>
#include <cutlass/numeric_types.h>
#include <cutlass/epilogue/thread/linear_combination.h>

namespace corpus {

constexpr int kElements = 8;

using Epilogue =
    cutlass::epilogue::thread::LinearCombination<cutlass::half_t, kElements, float, float>;
using AccumulatorFragment = Epilogue::FragmentAccumulator;  // Array<float, 8>
using SourceFragment = Epilogue::FragmentSource;            // Array<half_t, 8>
using OutputFragment = Epilogue::FragmentOutput;            // Array<half_t, 8>

}  // namespace corpus

extern "C" __global__ void cutlass_epilogue_lincomb(const float* acc, const cutlass::half_t* c,
                                                    cutlass::half_t* d, int n, float alpha,
                                                    float beta, float floor) {
  using namespace corpus;
  const int first = (blockIdx.x * blockDim.x + threadIdx.x) * kElements;
  if (first + kElements > n) return;

  Epilogue::Params params(alpha, beta);
  Epilogue epilogue(params);

  AccumulatorFragment accumulators;
  SourceFragment source;
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < kElements; ++i) {
    accumulators[i] = acc[first + i];
    source[i] = c[first + i];
  }

  OutputFragment result = epilogue(accumulators, source);
  cutlass::maximum<OutputFragment> clamp;
  result = clamp(result, cutlass::half_t(floor));

  *reinterpret_cast<OutputFragment*>(d + first) = result;
}
