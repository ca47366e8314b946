// The persistent entry format: round trips, every kind of damage detected, and golden files that
// pin the bytes (a change to the format must bump kEntryFormatVersion and add new golden files).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "cache/checksum.hpp"
#include "cache/entry_format.hpp"
#include "cucore/error.hpp"
#include "test_support.hpp"

namespace cucore::detail {
namespace {

std::span<const std::byte> as_key(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

object_code sample() {
  return object_code(code_type::cubin,
                     {std::byte{0x7f}, std::byte{'E'}, std::byte{'L'}, std::byte{'F'}}, "saxpy.cu",
                     symbol_map{{"saxpy<float>", "_Z5saxpyIfEvT_PKS0_PS0_i"},
                                {"saxpy<double>", "_Z5saxpyIdEvT_PKS0_PS0_i"}});
}

// A cubin with the Tile IR NVRTC made in the same compile alongside (object_code::tile_ir()).
object_code sample_with_tile_ir() {
  std::vector<std::byte> ir = {std::byte{0x7f}, std::byte{'T'}, std::byte{'i'}, std::byte{'l'},
                               std::byte{'e'},  std::byte{'I'}, std::byte{'R'}, std::byte{0}};
  return sample().with_tile_ir(object_code(code_type::tile_ir, std::move(ir), "saxpy.cu"));
}

TEST(EntryFormat, RoundTrip) {
  auto bytes = encode_entry(as_key("the-key"), sample());
  auto decoded = decode_entry(bytes, as_key("the-key"));
  ASSERT_EQ(decoded.status, entry_status::ok);
  EXPECT_EQ(*decoded.code, sample());
  EXPECT_EQ(decoded.code->symbol("saxpy<float>"), "_Z5saxpyIfEvT_PKS0_PS0_i");
}

// The Tile IR travels in the same entry (flag bit 0 of byte 13, its bytes before the payload
// length): the payload stays contiguous at the end, every damage is still detected.
TEST(EntryFormat, TileIrAlongsideRoundTripsInTheSameEntry) {
  const object_code code = sample_with_tile_ir();
  auto bytes = encode_entry(as_key("k"), code);
  EXPECT_EQ(bytes[13], std::byte{1});
  auto decoded = decode_entry(bytes, as_key("k"));
  ASSERT_EQ(decoded.status, entry_status::ok);
  EXPECT_EQ(*decoded.code, code);
  ASSERT_TRUE(decoded.code->tile_ir());
  EXPECT_EQ(*decoded.code->tile_ir(), *code.tile_ir());
  EXPECT_EQ(decoded.code->tile_ir()->type(), code_type::tile_ir);
  auto header = read_entry_header(bytes);
  ASSERT_TRUE(header);
  EXPECT_EQ(header->payload_offset + header->payload_length, bytes.size());
  EXPECT_EQ(bytes[header->payload_offset], std::byte{0x7f});
  // Without the Tile IR the entry is another one (operator== compares it too).
  EXPECT_NE(*decoded.code, sample());
  // Every bit flip and truncation is caught, the Tile IR's bytes included.
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    auto cut =
        std::vector<std::byte>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(i));
    EXPECT_NE(decode_entry(cut, as_key("k")).status, entry_status::ok) << "truncated to " << i;
    for (int bit = 0; bit < 8; ++bit) {
      auto flipped = bytes;
      flipped[i] ^= static_cast<std::byte>(1 << bit);
      EXPECT_NE(decode_entry(flipped, as_key("k")).status, entry_status::ok)
          << "byte " << i << " bit " << bit;
    }
  }
}

TEST(EntryFormat, TileIrTargetAndMalformedFlags) {
  const object_code ir(code_type::tile_ir, std::vector<std::byte>(9, std::byte{0x5a}), "t.cu");
  auto bytes = encode_entry(as_key("k"), ir);
  EXPECT_EQ(bytes[12], std::byte{6});
  EXPECT_EQ(bytes[13], std::byte{0});
  auto decoded = decode_entry(bytes, as_key("k"));
  ASSERT_EQ(decoded.status, entry_status::ok);
  EXPECT_EQ(*decoded.code, ir);
  EXPECT_FALSE(decoded.code->tile_ir());
  // Bits other than the Tile IR flag, or the flag on Tile IR itself, are not entries cucore
  // writes (the checksum would pass: it is recomputed here).
  auto with_flags = [](std::vector<std::byte> b, std::byte flags) {
    b[13] = flags;
    return b;
  };
  for (const std::byte flags : {std::byte{2}, std::byte{0x80}}) {
    EXPECT_EQ(
        decode_entry(with_flags(encode_entry(as_key("k"), sample()), flags), std::nullopt).status,
        entry_status::malformed);
  }
  // with_tile_ir refuses what it cannot mean.
  EXPECT_THROW((void)ir.with_tile_ir(ir), invalid_argument);
  EXPECT_THROW((void)sample().with_tile_ir(sample()), invalid_argument);
}

TEST(EntryFormat, EmptyPayloadAndNoSymbols) {
  object_code empty(code_type::ptx, {}, "");
  auto decoded = decode_entry(encode_entry(as_key("k"), empty), std::nullopt);
  ASSERT_EQ(decoded.status, entry_status::ok);
  EXPECT_EQ(decoded.code->size(), 0u);
}

TEST(EntryFormat, HeaderIsReadableWithoutThePayloadCheck) {
  auto bytes = encode_entry(as_key("the-key"), sample());
  auto header = read_entry_header(bytes);
  ASSERT_TRUE(header);
  EXPECT_EQ(header->type, code_type::cubin);
  EXPECT_EQ(header->name, "saxpy.cu");
  EXPECT_EQ(header->symbol_count, 2u);
  EXPECT_EQ(header->payload_length, 4u);
  EXPECT_EQ(header->payload_offset + 4, bytes.size());
}

TEST(EntryFormat, PayloadIsContiguousAtTheEnd) {
  auto bytes = encode_entry(as_key("k"), sample());
  auto header = read_entry_header(bytes);
  ASSERT_TRUE(header);
  EXPECT_EQ(bytes[header->payload_offset], std::byte{0x7f});
}

TEST(EntryFormat, WrongKeyIsDetected) {
  auto bytes = encode_entry(as_key("one"), sample());
  EXPECT_EQ(decode_entry(bytes, as_key("two")).status, entry_status::key_mismatch);
  EXPECT_EQ(decode_entry(bytes, as_key("on")).status, entry_status::key_mismatch);
}

TEST(EntryFormat, EveryTruncationIsDetected) {
  auto bytes = encode_entry(as_key("key"), sample());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    auto status = decode_entry(cut, as_key("key")).status;
    EXPECT_NE(status, entry_status::ok) << "truncated to " << n;
  }
}

TEST(EntryFormat, EveryBitFlipIsDetected) {
  auto bytes = encode_entry(as_key("key"), sample());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto flipped = bytes;
      flipped[i] ^= static_cast<std::byte>(1 << bit);
      auto status = decode_entry(flipped, as_key("key")).status;
      EXPECT_NE(status, entry_status::ok) << "byte " << i << " bit " << bit;
    }
  }
}

TEST(EntryFormat, TrailingBytesZerosForeignAndOtherVersions) {
  auto bytes = encode_entry(as_key("key"), sample());
  auto longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_EQ(decode_entry(longer, as_key("key")).status, entry_status::malformed);
  EXPECT_NE(decode_entry(std::vector<std::byte>(bytes.size()), as_key("key")).status,
            entry_status::ok);
  std::string elf =
      "\x7f"
      "ELF not a cucore entry at all";
  std::vector<std::byte> foreign(reinterpret_cast<const std::byte*>(elf.data()),
                                 reinterpret_cast<const std::byte*>(elf.data()) + elf.size());
  EXPECT_EQ(decode_entry(foreign, std::nullopt).status, entry_status::bad_magic);
  auto other_version = bytes;
  other_version[8] = std::byte{2};
  EXPECT_EQ(decode_entry(other_version, std::nullopt).status, entry_status::bad_version);
}

// The overload that adopts a buffer read without zero-filling decodes only the bytes it is told
// are valid: the same entry in a larger buffer is a truncation (or trailing garbage), not a hit.
TEST(EntryFormat, UninitializedBufferDecodesOnlyItsValidBytes) {
  const auto bytes = encode_entry(as_key("key"), sample());
  auto copy_into = [&](std::size_t size) {
    uninitialized_bytes buffer(size);
    std::memcpy(buffer.data, bytes.data(), std::min(size, bytes.size()));
    return buffer;
  };
  auto decoded = decode_entry(copy_into(bytes.size()), bytes.size(), as_key("key"));
  ASSERT_EQ(decoded.status, entry_status::ok);
  EXPECT_EQ(*decoded.code, sample());
  EXPECT_EQ(decode_entry(copy_into(bytes.size()), bytes.size() - 1, as_key("key")).status,
            entry_status::truncated);
  uninitialized_bytes larger = copy_into(bytes.size() + 16);
  std::memset(larger.data + bytes.size(), 0, 16);
  EXPECT_EQ(decode_entry(std::move(larger), bytes.size() + 16, as_key("key")).status,
            entry_status::malformed);
  EXPECT_EQ(decode_entry(copy_into(bytes.size()), bytes.size(), as_key("kex")).status,
            entry_status::key_mismatch);
  EXPECT_THROW(uninitialized_bytes(SIZE_MAX), std::bad_alloc) << "the size with its slack wraps";
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(uninitialized_bytes(100).data) % 64, 0u);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    uninitialized_bytes flipped = copy_into(bytes.size());
    flipped.data[i] ^= std::byte{0x10};
    EXPECT_NE(decode_entry(std::move(flipped), bytes.size(), as_key("key")).status,
              entry_status::ok)
        << "byte " << i;
  }
}

// Symbols the encoder would never write (out of order, or one twice), under a valid checksum: not
// an entry (found by the fuzzer: such bytes decoded, then encoded to other bytes).
TEST(EntryFormat, SymbolsOutOfOrderOrRepeatedAreMalformed) {
  const object_code code(code_type::cubin, {std::byte{1}, std::byte{2}}, "k.cu",
                         symbol_map{{"a", "x"}, {"b", "y"}});
  const auto good = encode_entry(as_key("the-key"), code);
  ASSERT_EQ(decode_entry(good, as_key("the-key")).status, entry_status::ok);
  // The names are "a" and "b", each behind a 4-byte length; the checksum is the 8 bytes before
  // the payload and covers everything else.
  const std::size_t payload_offset = good.size() - code.code().size();
  const std::size_t checksum_offset = payload_offset - 8;
  const auto reseal = [&](std::vector<std::byte> bytes) {
    const std::uint64_t sum = xxh3_64(std::span<const std::byte>(bytes).first(checksum_offset),
                                      std::span<const std::byte>(bytes).subspan(payload_offset));
    std::memcpy(bytes.data() + checksum_offset, &sum, sizeof sum);  // little-endian host
    return bytes;
  };
  ASSERT_EQ(decode_entry(reseal(good), as_key("the-key")).status, entry_status::ok);
  const std::byte name_a[] = {std::byte{1}, std::byte{0}, std::byte{0}, std::byte{0},
                              std::byte{'a'}};
  const auto at = std::search(good.begin(), good.end(), std::begin(name_a), std::end(name_a));
  ASSERT_NE(at, good.end());
  const auto a = static_cast<std::size_t>(at - good.begin()) + 4;
  const std::size_t b = a + 1 + 4 + 1 + 4;  // past "a", the length and "x", the length
  ASSERT_EQ(good[b], std::byte{'b'});
  auto swapped = good;  // "b" first, then "a"
  std::swap(swapped[a], swapped[b]);
  EXPECT_NE(decode_entry(reseal(swapped), as_key("the-key")).status, entry_status::ok);
  EXPECT_FALSE(read_entry_header(reseal(swapped)).has_value());
  auto repeated = good;  // "a" twice
  repeated[b] = std::byte{'a'};
  EXPECT_NE(decode_entry(reseal(repeated), as_key("the-key")).status, entry_status::ok);
}

TEST(EntryFormat, RandomGarbageNeverDecodes) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 2000; ++i) {
    std::vector<std::byte> junk(rng() % 300);
    for (auto& b : junk) b = static_cast<std::byte>(rng());
    if (i % 2 == 0 && junk.size() >= 8) std::memcpy(junk.data(), kEntryMagic.data(), 8);
    EXPECT_NE(decode_entry(junk, std::nullopt).status, entry_status::ok);
  }
}

// Golden files: tests/data/golden/*.entry hold bytes written by format version 1. Regenerate
// (only when deliberately changing the format, together with a version bump) with
// CUCORE_REGENERATE_GOLDEN=1.
struct golden_case {
  const char* file;
  std::string key;
  object_code code;
};

std::vector<golden_case> golden_cases() {
  std::vector<std::byte> digest(32);
  for (std::size_t i = 0; i < digest.size(); ++i) digest[i] = static_cast<std::byte>(i * 7 + 1);
  std::string binary_key(reinterpret_cast<const char*>(digest.data()), digest.size());
  std::string ptx = ".version 9.0\n.target sm_90\n.address_size 64\n";
  std::vector<std::byte> ptx_bytes(reinterpret_cast<const std::byte*>(ptx.data()),
                                   reinterpret_cast<const std::byte*>(ptx.data()) + ptx.size());
  return {
      {"v1_cubin_with_symbols.entry", binary_key, sample()},
      {"v1_ptx_string_key.entry", "a string key",
       object_code(code_type::ptx, ptx_bytes, "default_program")},
      {"v1_ltoir_empty_name.entry", "k",
       object_code(code_type::ltoir, std::vector<std::byte>(17, std::byte{0xab}), "")},
      // Format version 1 with the Tile IR flag (older entries are unchanged by it).
      {"v1_cubin_with_tile_ir.entry", binary_key, sample_with_tile_ir()},
      {"v1_tile_ir.entry", "k",
       object_code(code_type::tile_ir, std::vector<std::byte>(11, std::byte{0x5a}), "t.cu")},
  };
}

TEST(EntryFormat, GoldenFilesPinTheFormat) {
  const auto dir = std::filesystem::path(CUCORE_TEST_DATA_DIR) / "golden";
  const bool regenerate = std::getenv("CUCORE_REGENERATE_GOLDEN") != nullptr;
  for (const auto& c : golden_cases()) {
    SCOPED_TRACE(c.file);
    auto encoded = encode_entry(as_key(c.key), c.code);
    if (regenerate) {
      std::ofstream(dir / c.file, std::ios::binary)
          .write(reinterpret_cast<const char*>(encoded.data()),
                 static_cast<std::streamsize>(encoded.size()));
    }
    auto golden_text = cucore::testing::read_text(dir / c.file);
    std::vector<std::byte> golden(
        reinterpret_cast<const std::byte*>(golden_text.data()),
        reinterpret_cast<const std::byte*>(golden_text.data()) + golden_text.size());
    ASSERT_FALSE(golden.empty()) << "missing golden file";
    EXPECT_EQ(encoded, golden) << "the encoder no longer writes format version 1's bytes";
    auto decoded = decode_entry(golden, as_key(c.key));
    ASSERT_EQ(decoded.status, entry_status::ok);
    EXPECT_EQ(*decoded.code, c.code);
  }
}

}  // namespace
}  // namespace cucore::detail
