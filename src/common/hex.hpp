// Lower-case hexadecimal of bytes (keys, digests and names in messages and file names).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace cucore::detail {

inline std::string to_hex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const std::byte b : bytes) {
    out += kDigits[std::to_integer<unsigned>(b) >> 4];
    out += kDigits[std::to_integer<unsigned>(b) & 0xF];
  }
  return out;
}

inline std::string to_hex(std::string_view bytes) {
  return to_hex(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())));
}

}  // namespace cucore::detail
