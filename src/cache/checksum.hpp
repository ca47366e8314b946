// The entry checksum: XXH3-64 over two byte ranges, as if concatenated. Picks the AVX2 build of
// XXH3 at run time where the CPU has it (2.5x the SSE2 baseline's throughput), since verifying the
// checksum is most of the cost of a large cache hit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace cucore::detail {

std::uint64_t xxh3_64(std::span<const std::byte> first, std::span<const std::byte> second);

// The two builds; use xxh3_64.
std::uint64_t xxh3_64_baseline(std::span<const std::byte> first, std::span<const std::byte> second);
std::uint64_t xxh3_64_avx2(std::span<const std::byte> first, std::span<const std::byte> second);

}  // namespace cucore::detail
