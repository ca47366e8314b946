// A tiny JSON writer for the tool's --json output: compact, one object per call of the tool, keys
// in the order written. Strings are escaped per RFC 8259 (control characters as \u00XX) and invalid
// UTF-8 (a compiler log may quote Latin-1 source) becomes U+FFFD, so the output always parses.
#pragma once

#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cucore::cli {

// The length of the valid UTF-8 sequence at the start of `s`, or 0 when it is not one.
inline std::size_t utf8_sequence_length(std::string_view s) {
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  auto continuation = [&](std::size_t i, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return i < s.size() && byte(i) >= lo && byte(i) <= hi;
  };
  const unsigned lead = byte(0);
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return continuation(1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    // No overlong forms (E0 80..9F) and no UTF-16 surrogates (ED A0..BF).
    const unsigned lo = lead == 0xE0 ? 0xA0 : 0x80;
    const unsigned hi = lead == 0xED ? 0x9F : 0xBF;
    return continuation(1, lo, hi) && continuation(2) ? 3 : 0;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    // Nothing overlong (F0 80..8F), nothing past U+10FFFF (F4 90..).
    const unsigned lo = lead == 0xF0 ? 0x90 : 0x80;
    const unsigned hi = lead == 0xF4 ? 0x8F : 0xBF;
    return continuation(1, lo, hi) && continuation(2) && continuation(3) ? 4 : 0;
  }
  return 0;
}

// `text` as a JSON string literal, quotes included.
inline std::string json_quote(std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0xF];
        } else if (std::size_t n = utf8_sequence_length(text.substr(i)); n > 0) {
          out.append(text, i, n);
          i += n;
          continue;
        } else {
          out += "\\ufffd";
        }
    }
    ++i;
  }
  return out + "\"";
}

// Writes values into a string. Containers nest; commas and key/value separators are placed for
// you: writer.begin_object().key("a").value(1).key("b").begin_array().value("x").end_array()
// .end_object() gives {"a":1,"b":["x"]}.
class json_writer {
 public:
  json_writer& begin_object() { return open('{'); }
  json_writer& end_object() { return close('}'); }
  json_writer& begin_array() { return open('['); }
  json_writer& end_array() { return close(']'); }

  json_writer& key(std::string_view name) {
    separate();
    out_ += json_quote(name);
    out_ += ':';
    after_key_ = true;
    return *this;
  }

  json_writer& value(std::string_view text) { return raw(json_quote(text)); }
  json_writer& value(const char* text) { return value(std::string_view(text)); }
  json_writer& value(const std::string& text) { return value(std::string_view(text)); }
  json_writer& value(bool b) { return raw(b ? "true" : "false"); }
  json_writer& value(std::nullptr_t) { return raw("null"); }
  template <std::integral T>
  requires(!std::same_as<T, bool>) json_writer& value(T n) { return raw(std::to_string(n)); }
  // Fixed notation with `decimals` digits; JSON has no NaN or infinity, so those become null.
  json_writer& value(double d, int decimals = 3) {
    if (!std::isfinite(d)) return raw("null");
    char buffer[64];
    auto [end, ec] =
        std::to_chars(buffer, buffer + sizeof buffer, d, std::chars_format::fixed, decimals);
    return raw(ec == std::errc() ? std::string(buffer, end) : std::string("null"));
  }
  // An optional string: its value, or null when unset.
  json_writer& value(const std::optional<std::string>& text) {
    return text ? value(*text) : value(nullptr);
  }

  // The text written so far.
  const std::string& str() const noexcept { return out_; }

 private:
  json_writer& open(char bracket) {
    separate();
    out_ += bracket;
    first_.push_back(true);
    return *this;
  }
  json_writer& close(char bracket) {
    out_ += bracket;
    first_.pop_back();
    return *this;
  }
  json_writer& raw(std::string_view text) {
    separate();
    out_ += text;
    return *this;
  }
  // A comma before every element of a container but the first; none between a key and its value.
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (first_.empty()) return;
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }

  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

}  // namespace cucore::cli
