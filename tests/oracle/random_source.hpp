// The generated oracles' random source: std::mt19937_64 seeded from (seed, case index) through
// std::seed_seq (both fully specified by the standard), and no std::*_distribution (whose results
// the standard leaves to the library): the same cases on every platform.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace cucore::oracle {

class random_source {
 public:
  random_source(std::uint64_t seed, std::uint64_t index) {
    std::seed_seq s{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32)};
    engine_.seed(s);
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(engine_() % n); }
  bool chance(unsigned percent) { return below(100) < percent; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace cucore::oracle
