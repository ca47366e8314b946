// SHA-256 for program cache keys and entry file names.
//
// The FIPS 180-4 algorithm is implemented here, with two compress functions: a portable one and,
// on x86-64 CPUs with the SHA extensions (SHA-NI), one built on them (sha256_shani.cpp, compiled
// with -msha -msse4.1 alone), chosen once per process from CPUID. With SHA-NI the local code is as
// fast as libcrypto, so it hashes every input; without it, long inputs go to OpenSSL libcrypto
// (decision 3). Short ones always stay local: OpenSSL 3 spends ~0.4 ms initialising its provider
// on the first digest of a process, which was most of what a cache hit costs in a fresh process.
// Both compute the same function; tests check them against each other.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace cucore::detail {

using sha256_digest = std::array<std::byte, 32>;

// On CPUs without SHA-NI, inputs at least this long go to libcrypto (and, once libcrypto has
// started in this process, inputs of 512 bytes or more). With SHA-NI nothing does.
inline constexpr std::size_t kSha256LibcryptoThreshold = 16 * 1024;

// FIPS 180-4 round constants K0..K63 (shared by both compress functions).
inline constexpr std::array<std::uint32_t, 64> kSha256RoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

// Whether this process hashes with the SHA extensions: an x86-64 build whose CPU reports SHA,
// SSE4.1 and SSSE3 (CPUID, read once).
bool sha256_shani_available() noexcept;

// Which compress function a hasher uses. Only tests need to pick one.
enum class sha256_impl : std::uint8_t {
  automatic,  // SHA-NI where available, else portable
  portable,   // the plain C++ rounds, whatever the CPU
  shani,      // SHA-NI; falls back to portable where sha256_shani_available() is false
};

// Incremental SHA-256 (the algorithm implemented here, for any length).
class sha256_hasher {
 public:
  sha256_hasher() noexcept;
  explicit sha256_hasher(sha256_impl impl) noexcept;
  void update(std::span<const std::byte> data) noexcept;
  sha256_digest finish() noexcept;  // the hasher is spent afterwards

 private:
  void compress(const std::byte* blocks, std::size_t count) noexcept;  // count 64-byte blocks
  std::array<std::uint32_t, 8> state_;
  bool shani_;
  std::array<std::byte, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t length_ = 0;  // bytes hashed so far
};

// One-shot SHA-256: the local implementation for any length where SHA-NI is available, otherwise
// below the threshold, and libcrypto from it on. All give the same digest, so the choice never
// changes a key.
// Throws cucore::error if libcrypto fails.
sha256_digest sha256(std::span<const std::byte> data);

// Lower-case hex of sha256(data): 64 characters (entry names, remote keys).
std::array<char, 64> sha256_hex(std::span<const std::byte> data);

// libcrypto's SHA-256, for any length (tests compare the two).
sha256_digest sha256_libcrypto(std::span<const std::byte> data);

#if defined(CUCORE_HAVE_SHANI_BUILD)
// The SHA-NI compress function (sha256_shani.cpp): runs `count` 64-byte blocks through `state`.
// Only to be called when sha256_shani_available().
void sha256_compress_shani(std::uint32_t* state, const std::byte* blocks,
                           std::size_t count) noexcept;
#endif

}  // namespace cucore::detail
