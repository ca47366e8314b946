#pragma once
// RFC 3986 percent-decoding for the remote tiers' URLs (Redis, HTTP): each tier says what is wrong.

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace cucore::detail {

// "%41" is "A"; nullopt where a '%' is not followed by two hex digits.
inline std::optional<std::string> percent_decode(std::string_view text) {
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    const int hi = i + 2 < text.size() ? hex(text[i + 1]) : -1;
    const int lo = i + 2 < text.size() ? hex(text[i + 2]) : -1;
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// `text` decoded, where `bad_url(what)` (which throws) is how the tier reports what is wrong with
// its URL: here, that `part` has a bad '%'.
template <class BadUrl>
std::string percent_decode(std::string_view text, std::string_view part, BadUrl&& bad_url) {
  auto decoded = percent_decode(text);
  if (!decoded) bad_url("the " + std::string(part) + " has a '%' not followed by two hex digits");
  return std::move(*decoded);
}

// The user and the password of a URL's user information ("USER:PASSWORD", each percent-encoded).
// Without the ':', bad_url(no_colon) (the tier's advice on writing it).
template <class BadUrl>
std::pair<std::string, std::string> decode_userinfo(std::string_view userinfo,
                                                    std::string_view no_colon, BadUrl&& bad_url) {
  const auto colon = userinfo.find(':');
  if (colon == std::string_view::npos) bad_url(std::string(no_colon));
  return {percent_decode(userinfo.substr(0, colon), "user name", bad_url),
          percent_decode(userinfo.substr(colon + 1), "password", bad_url)};
}

}  // namespace cucore::detail
