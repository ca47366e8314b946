#include "common/sha256.hpp"

#include <openssl/evp.h>

#include <atomic>
#include <cstring>

#include "cucore/error.hpp"

namespace cucore::detail {
namespace {

constexpr std::array<std::uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

constexpr std::array<std::uint32_t, 8> kInitialState = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

constexpr std::uint32_t rotr(std::uint32_t x, int n) noexcept {
  return (x >> n) | (x << (32 - n));
}

std::uint32_t load_be32(const std::byte* p) noexcept {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
         std::uint32_t(p[3]);
}

const EVP_MD* libcrypto_sha256() {
  // Fetched once (an implicit fetch is a locked lookup per digest); leaked on purpose so that it
  // outlives any static destructor that might still hash.
  static const EVP_MD* md = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched != nullptr ? fetched : EVP_sha256();
  }();
  return md;
}

}  // namespace

sha256_hasher::sha256_hasher() noexcept : state_(kInitialState) {}

void sha256_hasher::compress(const std::byte* block) noexcept {
  std::array<std::uint32_t, 64> w;
  for (int i = 0; i < 16; ++i) w[i] = load_be32(block + 4 * i);
  for (int i = 16; i < 64; ++i) {
    const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  std::uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    const std::uint32_t choice = (e & f) ^ (~e & g);
    const std::uint32_t t1 = h + s1 + choice + kRoundConstants[i] + w[i];
    const std::uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    const std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const std::uint32_t t2 = s0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void sha256_hasher::update(std::span<const std::byte> data) noexcept {
  length_ += data.size();
  const std::byte* p = data.data();
  std::size_t n = data.size();
  if (buffered_ > 0) {
    const std::size_t take = std::min(n, buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take;
    p += take;
    n -= take;
    if (buffered_ < buffer_.size()) return;
    compress(buffer_.data());
    buffered_ = 0;
  }
  for (; n >= 64; p += 64, n -= 64) compress(p);
  if (n > 0) {
    std::memcpy(buffer_.data(), p, n);
    buffered_ = n;
  }
}

sha256_digest sha256_hasher::finish() noexcept {
  const std::uint64_t bits = length_ * 8;
  // Padding: 0x80, zeros up to 56 mod 64, then the message length in bits, big-endian.
  std::array<std::byte, 72> pad{};
  pad[0] = std::byte{0x80};
  const std::size_t zeros = (buffered_ < 56 ? 56 - buffered_ : 120 - buffered_) - 1;
  for (int i = 0; i < 8; ++i) pad[1 + zeros + i] = std::byte((bits >> (56 - 8 * i)) & 0xff);
  const std::uint64_t message_length = length_;
  update(std::span<const std::byte>(pad.data(), 1 + zeros + 8));
  length_ = message_length;
  sha256_digest out;
  for (int i = 0; i < 8; ++i) {
    out[4 * i] = std::byte(state_[i] >> 24);
    out[4 * i + 1] = std::byte(state_[i] >> 16);
    out[4 * i + 2] = std::byte(state_[i] >> 8);
    out[4 * i + 3] = std::byte(state_[i]);
  }
  return out;
}

namespace {
// Set once this process has paid libcrypto's start-up; from then on it is the faster choice for
// all but tiny inputs (it uses the CPU's SHA instructions).
std::atomic<bool> libcrypto_started{false};
constexpr std::size_t kSha256WarmLibcryptoThreshold = 512;
}  // namespace

sha256_digest sha256_libcrypto(std::span<const std::byte> data) {
  libcrypto_started.store(true, std::memory_order_relaxed);
  sha256_digest out{};
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), reinterpret_cast<unsigned char*>(out.data()), &size,
                 libcrypto_sha256(), nullptr) != 1 ||
      size != out.size()) {
    throw error("SHA-256 failed in OpenSSL libcrypto (EVP_Digest)");
  }
  return out;
}

sha256_digest sha256(std::span<const std::byte> data) {
  const std::size_t threshold = libcrypto_started.load(std::memory_order_relaxed)
                                    ? kSha256WarmLibcryptoThreshold
                                    : kSha256LibcryptoThreshold;
  if (data.size() >= threshold) return sha256_libcrypto(data);
  sha256_hasher hasher;
  hasher.update(data);
  return hasher.finish();
}

}  // namespace cucore::detail
