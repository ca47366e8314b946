#include "common/sha256.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#if defined(CUCORE_HAVE_SHANI_BUILD)
#include <cpuid.h>
#endif

#include "cucore/error.hpp"

namespace cucore::detail {
namespace {

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

bool detect_shani() noexcept {
#if defined(CUCORE_HAVE_SHANI_BUILD)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool ssse3 = (ecx & (1u << 9)) != 0;
  const bool sse41 = (ecx & (1u << 19)) != 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool sha = (ebx & (1u << 29)) != 0;
  return ssse3 && sse41 && sha;
#else
  return false;
#endif
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

bool sha256_shani_available() noexcept {
  static const bool available = detect_shani();
  return available;
}

sha256_hasher::sha256_hasher() noexcept : sha256_hasher(sha256_impl::automatic) {}

sha256_hasher::sha256_hasher(sha256_impl impl) noexcept
    : state_(kInitialState), shani_(impl != sha256_impl::portable && sha256_shani_available()) {}

namespace {

void compress_portable(std::array<std::uint32_t, 8>& state, const std::byte* block) noexcept {
  std::array<std::uint32_t, 64> w;
  for (int i = 0; i < 16; ++i) w[i] = load_be32(block + 4 * i);
  for (int i = 16; i < 64; ++i) {
    const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  std::uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  std::uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    const std::uint32_t choice = (e & f) ^ (~e & g);
    const std::uint32_t t1 = h + s1 + choice + kSha256RoundConstants[i] + w[i];
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
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

}  // namespace

void sha256_hasher::compress(const std::byte* blocks, std::size_t count) noexcept {
#if defined(CUCORE_HAVE_SHANI_BUILD)
  if (shani_) {
    sha256_compress_shani(state_.data(), blocks, count);
    return;
  }
#endif
  for (; count > 0; --count, blocks += 64) compress_portable(state_, blocks);
}

void sha256_hasher::update(std::span<const std::byte> data) noexcept {
  if (data.empty()) return;  // an empty span may carry a null pointer, which memcpy must not see
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
    compress(buffer_.data(), 1);
    buffered_ = 0;
  }
  if (n >= 64) {  // whole blocks straight from the input, in one call
    const std::size_t blocks = n / 64;
    compress(p, blocks);
    p += 64 * blocks;
    n -= 64 * blocks;
  }
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

std::array<char, 64> sha256_hex(std::span<const std::byte> data) {
  const sha256_digest digest = sha256(data);
  static constexpr char kHex[] = "0123456789abcdef";
  std::array<char, 64> out{};
  for (unsigned i = 0; i < 32; ++i) {
    const auto b = static_cast<unsigned>(digest[i]);
    out[2 * i] = kHex[b >> 4];
    out[2 * i + 1] = kHex[b & 0xf];
  }
  return out;
}

sha256_digest sha256(std::span<const std::byte> data) {
  if (sha256_shani_available()) {  // as fast as libcrypto, without its start-up
    sha256_hasher hasher;
    hasher.update(data);
    return hasher.finish();
  }
  const std::size_t threshold = libcrypto_started.load(std::memory_order_relaxed)
                                    ? kSha256WarmLibcryptoThreshold
                                    : kSha256LibcryptoThreshold;
  if (data.size() >= threshold) return sha256_libcrypto(data);
  sha256_hasher hasher;
  hasher.update(data);
  return hasher.finish();
}

}  // namespace cucore::detail
