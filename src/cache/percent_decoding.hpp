#pragma once
// RFC 3986 percent-decoding and the authority's host and port, for the remote tiers' URLs (Redis,
// HTTP): each tier says what is wrong.

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

// A URL's HOST[:PORT] or [IPV6][:PORT]: the host as written (an IPv6 address in its brackets) and
// the port's text (empty without one), checked only for their form.
struct host_and_port {
  std::string_view host;
  std::string_view port;
};
template <class BadUrl>
host_and_port split_host_port(std::string_view authority, BadUrl&& bad_url) {
  host_and_port out;
  if (authority.starts_with('[')) {  // [IPv6]:port
    const auto close = authority.find(']');
    if (close == std::string_view::npos) bad_url("the IPv6 address has no closing ']'");
    out.host = authority.substr(0, close + 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') bad_url("expected ':PORT' after the IPv6 address");
      out.port = after.substr(1);
      if (out.port.empty()) bad_url("the port after ':' is empty");
    }
    if (close <= 1) bad_url("it names no host");
  } else if (const auto colon = authority.rfind(':'); colon != std::string_view::npos) {
    out.host = authority.substr(0, colon);
    out.port = authority.substr(colon + 1);
    if (out.port.empty()) bad_url("the port after ':' is empty");
  } else {
    out.host = authority;
  }
  if (out.host.empty()) bad_url("it names no host");
  return out;
}

}  // namespace cucore::detail
