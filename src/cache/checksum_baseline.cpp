#include "cache/checksum.hpp"
#include "cache/checksum_impl.inc"

namespace cucore::detail {

std::uint64_t xxh3_64_baseline(std::span<const std::byte> first,
                               std::span<const std::byte> second){CUCORE_XXH3_BODY}

std::uint64_t xxh3_64(std::span<const std::byte> first, std::span<const std::byte> second) {
#if defined(__x86_64__) && defined(CUCORE_HAVE_AVX2_BUILD)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return xxh3_64_avx2(first, second);
#endif
  return xxh3_64_baseline(first, second);
}

}  // namespace cucore::detail
