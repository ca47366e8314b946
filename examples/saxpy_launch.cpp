// Compiles examples/saxpy.cu through the default program cache, launches saxpy<float> on fresh
// random inputs and checks the result. Without a GPU it says so and exits 0.
#include <cucore/cucore.hpp>

#include "report_failure.hpp"
#include "saxpy_source.hpp"  // examples/saxpy.cu, embedded at build time (CMakeLists.txt)

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <vector>

int main() try {
  if (cucore::device::count() == 0) {
    std::cout << "no GPU: skipped (saxpy_launch needs a CUDA device)\n";
    return 0;
  }

  cucore::device dev(0);
  cucore::program_options options;
  options.name = "saxpy.cu";
  options.arch = dev.arch();
  options.std = "c++17";

  // $CUCORE_CACHE_DIR, else $XDG_CACHE_HOME/cucore, else ~/.cache/cucore.
  std::unique_ptr<cucore::program_cache> cache = cucore::open_program_cache("");
  cucore::program program(saxpy_source, cucore::source_type::cxx, options);
  std::vector<std::string> names = {"saxpy<float>"};
  cucore::object_code cubin = program.compile(cucore::code_type::cubin, names, cache.get());
  std::cout << "compiled saxpy.cu for " << *options.arch << " (cache "
            << cucore::to_string(program.last_cache_outcome()) << ", "
            << (cache ? cache->description() : std::string("none")) << ")\n";

  cucore::kernel saxpy = cubin.get_kernel("saxpy<float>");
  cucore::stream stream(dev);

  const int n = 1 << 24;
  std::random_device seed_source;
  const unsigned seed = seed_source();
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(n), y(n);
  for (auto& v : x) v = dist(gen);
  for (auto& v : y) v = dist(gen);
  const float a = 1.0f + dist(gen);

  cucore::buffer dx(n * sizeof(float), stream);
  cucore::buffer dy(n * sizeof(float), stream);
  dx.copy_from(x, stream);
  dy.copy_from(y, stream);

  const cucore::launch_config config{.grid = (n + 255) / 256, .block = 256};
  cucore::launch(stream, config, saxpy, a, dx, dy, n);  // warm-up: y = a x + y
  cucore::event start(dev);
  cucore::event end(dev);
  start.record(stream);
  cucore::launch(stream, config, saxpy, a, dx, dy, n);  // y = a x + (a x + y)
  end.record(stream);
  std::vector<float> result = dy.to_vector<float>(stream);

  int bad = 0;
  double worst = 0.0;
  for (int i = 0; i < n; ++i) {
    const double want = 2.0 * double(a) * x[i] + y[i];
    const double err = std::abs(result[i] - want);
    worst = std::max(worst, err);
    bad += !(err <= 1e-5 * (1.0 + std::abs(want)));
  }
  const float ms = cucore::elapsed_time(start, end).count();
  std::printf("saxpy on %s: n = %d, %.3f ms (%.0f GB/s), max abs error %.2e, seed %u\n",
              dev.name().c_str(), n, ms, 3.0 * n * sizeof(float) / (ms * 1e6), worst, seed);
  if (bad != 0) {
    std::printf("saxpy: FAILED (%d of %d elements wrong)\n", bad, n);
    return 1;
  }
  std::printf("saxpy: OK\n");
  return 0;
} catch (...) {
  return report_failure();
}
