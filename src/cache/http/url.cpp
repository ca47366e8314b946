// http(s) cache URLs and their ccache-style attributes (include/cucore/cache/http.hpp).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <string_view>
#include <tuple>

#include "cache/percent_decoding.hpp"
#include "common/text.hpp"
#include "cucore/cache/http.hpp"
#include "cucore/error.hpp"

namespace cucore {
namespace {

constexpr std::string_view kExpected =
    " (expected http[s]://[USER:PASSWORD@]HOST[:PORT][/PATH][|ATTRIBUTE=VALUE...]; see "
    "docs/cache-http.md)";

// Where the authority (after "://") ends: the first '/' or '|'.
std::size_t authority_end(std::string_view url, std::size_t start) {
  return std::min(url.find('/', start), url.find('|', start));
}

[[noreturn]] void bad_url(std::string_view url, const std::string& what) {
  throw invalid_argument("http cache URL \"" + redact_http_url(url) + "\": " + what +
                         std::string(kExpected));
}

std::string percent_decode(std::string_view url, std::string_view text, std::string_view part) {
  return detail::percent_decode(text, part, [&](const std::string& what) { bad_url(url, what); });
}

std::optional<long long> parse_integer(std::string_view text, long long min, long long max) {
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min ||
      value > max) {
    return std::nullopt;
  }
  return value;
}

std::optional<bool> parse_bool(std::string_view v) {
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return std::nullopt;
}

// HTTP header names are tokens (RFC 9110): no space, no ':', no control character.
bool is_header_name(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 32 && u < 127 && c != ':' && c != '(' && c != ')' && c != ',' && c != ';' &&
           c != '"' && c != '/' && c != '[' && c != ']' && c != '=' && c != '{' && c != '}';
  });
}

void parse_attribute(std::string_view url, std::string_view attribute, http_url& out) {
  const auto eq = attribute.find('=');
  const std::string_view name = attribute.substr(0, eq);
  const std::string value =
      eq == std::string_view::npos
          ? std::string()
          : percent_decode(url, attribute.substr(eq + 1), "attribute " + std::string(name));
  auto timeout = [&] {
    const auto ms = parse_integer(value, 1, 3'600'000);
    if (!ms) {
      bad_url(url, "attribute " + std::string(name) + "=\"" + value +
                       "\" is not a number of milliseconds from 1 to 3600000");
    }
    return std::chrono::milliseconds(*ms);
  };
  auto flag = [&] {
    if (eq == std::string_view::npos) return true;  // "|read-only" alone
    const auto b = parse_bool(value);
    if (!b)
      bad_url(url, "attribute " + std::string(name) + "=\"" + value + "\" is not true or false");
    return *b;
  };
  if (name == "layout") {
    if (value == "subdirs") {
      out.layout = http_layout::subdirs;
    } else if (value == "flat") {
      out.layout = http_layout::flat;
    } else if (value == "bazel") {
      out.layout = http_layout::bazel;
    } else {
      bad_url(url, "layout=\"" + value + "\" is not subdirs, flat or bazel");
    }
  } else if (name == "read-only" || name == "read_only") {
    out.read_only = flag();
  } else if (name == "keep-alive") {
    out.keep_alive = flag();
  } else if (name == "connect-timeout") {
    out.connect_timeout = timeout();
  } else if (name == "operation-timeout") {
    out.operation_timeout = timeout();
  } else if (name == "bearer-token") {
    if (value.empty()) bad_url(url, "bearer-token= is empty");
    for (char c : value) {
      if (static_cast<unsigned char>(c) < 33 || c == 127)
        bad_url(url, "the bearer token has a space or control character");
    }
    out.bearer_token = value;
  } else if (name == "header") {
    const auto sep = value.find('=');
    const std::string header = value.substr(0, sep);
    if (sep == std::string::npos || !is_header_name(header)) {
      bad_url(url, "header=NAME=VALUE: \"" + header + "\" is not a header name followed by '='");
    }
    const std::string header_value = value.substr(sep + 1);
    if (header_value.find_first_of("\r\n") != std::string::npos)
      bad_url(url, "the value of header " + header + " has a line break");
    out.headers.emplace_back(header, header_value);
  } else {
    bad_url(url, "unknown attribute \"" + std::string(name) +
                     "\": use layout, read-only, connect-timeout, operation-timeout, bearer-token, "
                     "header or keep-alive");
  }
}

}  // namespace

std::string http_url::base() const {
  return scheme + "://" + host + (port != 0 ? ":" + std::to_string(port) : std::string()) + path;
}

std::string redact_http_url(std::string_view url) {
  std::string out;
  std::size_t start = url.find("://");
  start = start == std::string_view::npos ? 0 : start + 3;
  const std::size_t end = std::min(authority_end(url, start), url.size());
  const std::size_t at = url.substr(0, end).rfind('@');
  if (at != std::string_view::npos && at >= start) {
    const std::string_view userinfo = url.substr(start, at - start);
    const std::size_t colon = userinfo.find(':');
    // userinfo without ':' is most likely a password someone forgot the ':' before.
    out = std::string(url.substr(0, start)) +
          (colon == std::string_view::npos ? std::string("***")
                                           : std::string(userinfo.substr(0, colon)) + ":***") +
          std::string(url.substr(at, end - at));
  } else {
    out = std::string(url.substr(0, end));
  }
  // Attributes: the secret ones' values go.
  std::string_view rest = url.substr(end);
  while (!rest.empty()) {
    std::size_t next = rest.find('|', 1);
    const std::string_view part = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view() : rest.substr(next);
    if (part.starts_with("|bearer-token=")) {
      out += "|bearer-token=***";
    } else if (part.starts_with("|header=")) {
      const std::size_t eq = part.find('=', 8);
      out += std::string(part.substr(0, eq == std::string_view::npos ? part.size() : eq)) + "=***";
    } else {
      out += part;
    }
  }
  return out;
}

http_url parse_http_url(std::string_view url) {
  http_url out;
  const std::size_t sep = url.find("://");
  if (sep == std::string_view::npos) bad_url(url, "it does not start with http:// or https://");
  out.scheme = detail::lower_case(url.substr(0, sep));
  if (out.scheme != "http" && out.scheme != "https")
    bad_url(url, "it does not start with http:// or https://");
  const std::size_t start = sep + 3;
  const std::size_t end = std::min(authority_end(url, start), url.size());
  std::string_view authority = url.substr(start, end - start);
  // Path, then attributes after the first '|'.
  const std::size_t bar = std::min(url.find('|', end), url.size());
  std::string_view path = url.substr(end, bar - end);
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    std::tie(out.user, out.password) = detail::decode_userinfo(
        authority.substr(0, at),
        "the part before '@' has no ':': write USER:PASSWORD@HOST (or use a bearer token)",
        [&](const std::string& what) { bad_url(url, what); });
    authority = authority.substr(at + 1);
  }
  const auto [host, port_text] =
      detail::split_host_port(authority, [&](const std::string& what) { bad_url(url, what); });
  out.host = std::string(host);  // an IPv6 address in its brackets
  for (char c : out.host) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 32 || u == 127 || c == '#' || c == '?' || c == '@' || c == '%' || c == '\\') {
      bad_url(url, "the host \"" + out.host + "\" is not a host name or address");
    }
  }
  if (!port_text.empty()) {
    const auto port = parse_integer(port_text, 1, 65535);
    if (!port) bad_url(url, "the port \"" + std::string(port_text) + "\" is not a number 1-65535");
    out.port = static_cast<int>(*port);
  }
  for (char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 32 || u == 127 || c == '?' || c == '#') {
      bad_url(url, "the path has a space, control character, '?' or '#' (percent-encode it)");
    }
  }
  out.path = path.empty() ? "/" : std::string(path);
  if (!out.path.ends_with('/')) out.path += '/';
  std::string_view attributes = url.substr(bar);
  while (!attributes.empty()) {
    attributes.remove_prefix(1);  // the '|'
    const std::size_t next = attributes.find('|');
    const std::string_view attribute = attributes.substr(0, next);
    attributes = next == std::string_view::npos ? std::string_view() : attributes.substr(next);
    if (!attribute.empty()) parse_attribute(url, attribute, out);
  }
  if ((!out.user.empty() || !out.password.empty()) && out.bearer_token) {
    bad_url(url, "both a user:password and a bearer token: give one of them");
  }
  return out;
}

}  // namespace cucore
