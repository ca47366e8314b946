// SHA-256 for program cache keys and entry file names.
//
// Long inputs go to OpenSSL libcrypto (decision 3; hardware-accelerated, ~2 GB/s here). Short
// ones, and the incremental hasher (which only ever sees a key's small framed fields), use the
// FIPS 180-4 algorithm implemented here: OpenSSL 3 spends ~0.4 ms initialising its provider on the
// first digest of a process, which was most of what a cache hit costs in a fresh process. Both
// compute the same function; tests check them against each other.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace cucore::detail {

using sha256_digest = std::array<std::byte, 32>;

// Inputs at least this long go to libcrypto (and, once libcrypto has started in this process,
// inputs of 512 bytes or more).
inline constexpr std::size_t kSha256LibcryptoThreshold = 16 * 1024;

// Incremental SHA-256 (the algorithm implemented here, for any length).
class sha256_hasher {
 public:
  sha256_hasher() noexcept;
  void update(std::span<const std::byte> data) noexcept;
  sha256_digest finish() noexcept;  // the hasher is spent afterwards

 private:
  void compress(const std::byte* block) noexcept;
  std::array<std::uint32_t, 8> state_;
  std::array<std::byte, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t length_ = 0;  // bytes hashed so far
};

// One-shot SHA-256: the local implementation below the threshold, libcrypto from it on. Both give
// the same digest, so the choice never changes a key.
// Throws cucore::error if libcrypto fails.
sha256_digest sha256(std::span<const std::byte> data);

// libcrypto's SHA-256, for any length (tests compare the two).
sha256_digest sha256_libcrypto(std::span<const std::byte> data);

}  // namespace cucore::detail
