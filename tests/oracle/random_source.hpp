// The generated oracles' random source: std::mt19937_64 seeded from (seed, case index) through
// std::seed_seq (both fully specified by the standard), and no std::*_distribution (whose results
// the standard leaves to the library): the same cases on every platform.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

namespace cucore::oracle {

// A seed or count from the environment (decimal or 0x...), `fallback` when unset or malformed.
inline std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const std::uint64_t v = std::strtoull(text, &end, 0);
  return end != nullptr && *end == '\0' ? v : fallback;
}

// A default count of generated cases: `sanitized` in a sanitizer build, whose key walk is
// instrumented (NVRTC is not) and slower, else `plain`.
constexpr std::uint64_t default_cases(std::uint64_t plain, std::uint64_t sanitized) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  (void)plain;
  return sanitized;
#else
  (void)sanitized;
  return plain;
#endif
}

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
