// The slow kernel the single-flight stampedes compile (tests/stress/single_flight_stress_test.cpp,
// bench/stampede_bench.cpp): long enough to compile that a fleet of processes misses it at once.
#pragma once

namespace cucore::testing {

// NVRTC spends ~0.7 s on this on an idle 2-core machine: SLOW_CHAINS chains of SLOW_N noinline
// device functions to code-generate (one chain deeper than ~190 would pass the template depth
// limit, 200). -DSLOW_CHAINS=3 takes ~1.3 s: time to kill the holder mid-compile.
inline constexpr const char* kSlowSource = R"(
#ifndef SLOW_N
#define SLOW_N 120
#endif
#ifndef SLOW_CHAINS
#define SLOW_CHAINS 2
#endif
template <int I, int C>
__device__ __noinline__ float step(float x) {
  if constexpr (I == 0) {
    return x;
  } else {
    return step<I - 1, C>(x) * 1.0001f + static_cast<float>(I + C) * __sinf(x);
  }
}
template <int C>
__device__ float chains(float x) {
  if constexpr (C == 0) {
    return 0.0f;
  } else {
    return step<SLOW_N, C>(x) + chains<C - 1>(x);
  }
}
extern "C" __global__ void slow_kernel(float* p) { p[threadIdx.x] = chains<SLOW_CHAINS>(p[threadIdx.x]); }
)";

}  // namespace cucore::testing
