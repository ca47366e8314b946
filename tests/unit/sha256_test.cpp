// The local SHA-256 (used for short inputs, key framing and, with SHA-NI, everything) against
// FIPS 180-4 test vectors and against libcrypto on every length around the block boundaries and on
// random data, through both compress functions (portable and SHA-NI) explicitly.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

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

std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> data(n);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  return data;
}

sha256_digest with(sha256_impl impl, std::span<const std::byte> data) {
  sha256_hasher h(impl);
  h.update(data);
  return h.finish();
}

// Each compress function, named explicitly: the SHA-NI cases skip where the CPU lacks it.
class Sha256Impl : public ::testing::TestWithParam<sha256_impl> {
 protected:
  void SetUp() override {
    if (GetParam() == sha256_impl::shani && !sha256_shani_available()) {
      GTEST_SKIP() << "this CPU (or build) has no SHA-NI";
    }
  }
};

TEST_P(Sha256Impl, KnownVectors) {
  EXPECT_EQ(hex(with(GetParam(), bytes_of(""))),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(with(GetParam(), bytes_of("abc"))),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(
      hex(with(GetParam(), bytes_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      hex(with(GetParam(), bytes_of("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                                    "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"))),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  const std::string million(1'000'000, 'a');
  EXPECT_EQ(hex(with(GetParam(), bytes_of(million))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_P(Sha256Impl, MatchesLibcryptoAtEveryLengthUpTo300) {
  const auto data = random_bytes(300, 13);
  for (std::size_t n = 0; n <= data.size(); ++n) {
    const auto part = std::span<const std::byte>(data).first(n);
    ASSERT_EQ(with(GetParam(), part), sha256_libcrypto(part)) << "length " << n;
  }
}

TEST_P(Sha256Impl, MatchesLibcryptoAroundManyBlockBoundaries) {
  const auto data = random_bytes(64 * 300 + 1, 17);
  for (std::size_t blocks : {1u, 2u, 3u, 7u, 8u, 15u, 16u, 17u, 63u, 64u, 255u, 256u, 300u}) {
    for (std::size_t n : {64 * blocks - 9, 64 * blocks - 8, 64 * blocks - 1, 64 * blocks,
                          64 * blocks + 1, 64 * blocks + 55, 64 * blocks + 56}) {
      if (n > data.size()) continue;
      const auto part = std::span<const std::byte>(data).first(n);
      ASSERT_EQ(with(GetParam(), part), sha256_libcrypto(part)) << "length " << n;
    }
  }
}

TEST_P(Sha256Impl, MatchesLibcryptoOnOneMebibyte) {
  const auto data = random_bytes(1 << 20, 19);
  EXPECT_EQ(with(GetParam(), data), sha256_libcrypto(data));
}

TEST_P(Sha256Impl, IncrementalUpdatesAtOddSplitPointsMatchOneShot) {
  const auto data = random_bytes(5000, 23);
  const auto expected = sha256_libcrypto(data);
  // Fixed odd chunk sizes (tails into the buffer, whole blocks straight from the input, and
  // chunks that both fill the buffer and leave whole blocks).
  for (std::size_t step : {1u, 3u, 7u, 13u, 63u, 65u, 127u, 129u, 191u, 1021u}) {
    sha256_hasher h(GetParam());
    for (std::size_t at = 0; at < data.size(); at += step) {
      h.update(std::span<const std::byte>(data).subspan(at, std::min(step, data.size() - at)));
    }
    ASSERT_EQ(h.finish(), expected) << "step " << step;
  }
  // Two pieces split at every point of the first 300 bytes of a shorter message.
  const auto short_data = std::span<const std::byte>(data).first(300);
  const auto short_expected = sha256_libcrypto(short_data);
  for (std::size_t split = 0; split <= short_data.size(); ++split) {
    sha256_hasher h(GetParam());
    h.update(short_data.first(split));
    h.update(std::span<const std::byte>());  // empty updates change nothing
    h.update(short_data.subspan(split));
    ASSERT_EQ(h.finish(), short_expected) << "split " << split;
  }
  // Random chunk sizes up to a few blocks.
  std::mt19937_64 rng(29);
  for (int round = 0; round < 20; ++round) {
    sha256_hasher h(GetParam());
    for (std::size_t at = 0; at < data.size();) {
      const std::size_t n = std::min<std::size_t>(rng() % 300, data.size() - at);
      h.update(std::span<const std::byte>(data).subspan(at, n));
      at += n;
    }
    ASSERT_EQ(h.finish(), expected) << "round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(Sha256, Sha256Impl,
                         ::testing::Values(sha256_impl::portable, sha256_impl::shani,
                                           sha256_impl::automatic),
                         [](const ::testing::TestParamInfo<sha256_impl>& info) {
                           switch (info.param) {
                             case sha256_impl::portable:
                               return std::string("Portable");
                             case sha256_impl::shani:
                               return std::string("ShaNi");
                             case sha256_impl::automatic:
                               break;
                           }
                           return std::string("Automatic");
                         });

TEST(Sha256, PortableAndShaNiAgreeOnRandomLengths) {
  if (!sha256_shani_available()) GTEST_SKIP() << "this CPU (or build) has no SHA-NI";
  std::mt19937_64 rng(31);
  for (int round = 0; round < 200; ++round) {
    const auto data = random_bytes(rng() % 20000, rng());
    ASSERT_EQ(with(sha256_impl::portable, data), with(sha256_impl::shani, data))
        << "length " << data.size();
  }
}

TEST(Sha256, OneShotMatchesLibcryptoOnEitherSideOfTheThreshold) {
  for (std::size_t n : {kSha256LibcryptoThreshold - 1, kSha256LibcryptoThreshold,
                        kSha256LibcryptoThreshold + 1, 4 * kSha256LibcryptoThreshold + 17}) {
    const auto data = random_bytes(n, n);
    EXPECT_EQ(sha256(data), sha256_libcrypto(data)) << "length " << n;
  }
}

}  // namespace
}  // namespace cucore::detail
