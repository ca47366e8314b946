// The local SHA-256 (used for short inputs and key framing) against FIPS 180-4 test vectors and
// against libcrypto on every length around the block boundaries and on random data.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "common/sha256.hpp"

namespace cucore::detail {
namespace {

std::span<const std::byte> bytes_of(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

std::string hex(const sha256_digest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::byte b : d) {
    out += kHex[static_cast<unsigned>(b) >> 4];
    out += kHex[static_cast<unsigned>(b) & 0xf];
  }
  return out;
}

sha256_digest local(std::span<const std::byte> data) {
  sha256_hasher h;
  h.update(data);
  return h.finish();
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(hex(local(bytes_of(""))),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(local(bytes_of("abc"))),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(local(bytes_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1'000'000, 'a');
  EXPECT_EQ(hex(local(bytes_of(million))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, MatchesLibcryptoAtEveryLengthAroundTheBlocks) {
  std::mt19937_64 rng(7);
  std::vector<std::byte> data(300);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  for (std::size_t n = 0; n <= data.size(); ++n) {
    auto part = std::span<const std::byte>(data).first(n);
    ASSERT_EQ(local(part), sha256_libcrypto(part)) << "length " << n;
    ASSERT_EQ(sha256(part), sha256_libcrypto(part)) << "length " << n;
  }
}

TEST(Sha256, MatchesLibcryptoOnRandomDataInRandomChunks) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 40; ++round) {
    std::vector<std::byte> data(rng() % (3 * kSha256LibcryptoThreshold));
    for (auto& b : data) b = static_cast<std::byte>(rng());
    sha256_hasher chunked;
    for (std::size_t at = 0; at < data.size();) {
      const std::size_t n = std::min<std::size_t>(rng() % 200, data.size() - at);
      chunked.update(std::span<const std::byte>(data).subspan(at, n));
      at += n;
    }
    const auto expected = sha256_libcrypto(data);
    EXPECT_EQ(chunked.finish(), expected) << "length " << data.size();
    EXPECT_EQ(sha256(data), expected) << "length " << data.size();
  }
}

}  // namespace
}  // namespace cucore::detail
