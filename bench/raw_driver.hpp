// The raw-driver side of the GPU benchmarks: driver entry points resolved as cucore resolves its
// own (dlopen libcuda.so.1 from the loader path, then cuGetProcAddress for the newest version of
// each name up to the toolkit's CUDA_VERSION, so each pointer has the type cuda.h declares).
// Failures abort with the benchmark's name: a baseline that cannot run must not print a number.
#pragma once

#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace cucore::bench {

inline void check_raw(const char* program, CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "%s: %s failed with CUresult %d\n", program, call, static_cast<int>(r));
    std::abort();
  }
}

// The address of driver function `name`.
inline void* raw_driver_symbol(const char* program, const char* name) {
  static void* const lib = [program] {
    void* l = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);  // never unloaded
    if (l == nullptr) {
      std::fprintf(stderr, "%s: dlopen(libcuda.so.1): %s\n", program, ::dlerror());
      std::abort();
    }
    return l;
  }();
  using get_proc_address = decltype(&::cuGetProcAddress);  // cuGetProcAddress_v2
  static const auto gpa = [program] {
    auto f = reinterpret_cast<get_proc_address>(::dlsym(lib, "cuGetProcAddress_v2"));
    if (f == nullptr) {
      std::fprintf(stderr, "%s: libcuda.so.1 has no cuGetProcAddress_v2\n", program);
      std::abort();
    }
    return f;
  }();
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (gpa(name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
      status != CU_GET_PROC_ADDRESS_SUCCESS || fn == nullptr) {
    std::fprintf(stderr, "%s: cuGetProcAddress(%s) failed\n", program, name);
    std::abort();
  }
  return fn;
}

}  // namespace cucore::bench

// Declares, in a struct, one member per name of the X-list FUNCTIONS and a constructor that
// resolves them all and calls cuInit; PROGRAM names the benchmark in failures.
#define CUCORE_BENCH_RAW_DRIVER(FUNCTIONS, PROGRAM)           \
  FUNCTIONS(CUCORE_BENCH_RAW_MEMBER)                          \
  raw_driver() {                                              \
    FUNCTIONS(CUCORE_BENCH_RAW_RESOLVE)                       \
    ::cucore::bench::check_raw(PROGRAM, cuInit(0), "cuInit"); \
  }
#define CUCORE_BENCH_RAW_MEMBER(name) decltype(&::name) name = nullptr;
#define CUCORE_BENCH_RAW_RESOLVE(name) \
  name = reinterpret_cast<decltype(name)>(::cucore::bench::raw_driver_symbol(kProgram, #name));
