// Compiled with -mavx2 (src/CMakeLists.txt); only called when the CPU supports AVX2.
#include "cache/checksum.hpp"
#include "cache/checksum_impl.inc"

namespace cucore::detail {

std::uint64_t xxh3_64_avx2(std::span<const std::byte> first, std::span<const std::byte> second) {
  CUCORE_XXH3_BODY
}

}  // namespace cucore::detail
