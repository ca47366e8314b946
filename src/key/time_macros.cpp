// The clock's names in a unit's text, written or formed by pasting (key/time_macros.hpp).
#include "key/time_macros.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace cucore::detail {

namespace {

bool mentions_time_macros_unspliced(std::string_view text) noexcept {
  // Identifier characters as NVRTC takes them around the name (letters, digits, '_'): a longer
  // identifier such as MY__TIME__ does not expand. '$' and bytes >= 0x80 count as boundaries
  // too, which can only add matches (a superset).
  const auto ident = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  for (std::size_t at = text.find("__"); at != std::string_view::npos;
       at = text.find("__", at + 1)) {
    for (const std::string_view name : {"__TIME__", "__DATE__", "__TIMESTAMP__"}) {
      if (text.substr(at, name.size()) == name && (at == 0 || !ident(text[at - 1])) &&
          (at + name.size() == text.size() || !ident(text[at + name.size()]))) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

bool mentions_time_macros(std::string_view text) {
  if (mentions_time_macros_unspliced(text)) return true;
  // __TI\<newline>ME__ is __TIME__ after line splicing: search the text spliced too, leniently
  // (a backslash or ??/, then blanks, then a newline), which only adds matches.
  if (text.find('\\') == std::string_view::npos && text.find("?\?/") == std::string_view::npos) {
    return false;
  }
  return mentions_time_macros_unspliced(splice_lines(text, /*lenient=*/true));
}

}  // namespace cucore::detail

namespace cucore::detail {

namespace {

constexpr std::string_view kTimeNames[] = {"__TIME__", "__DATE__", "__TIMESTAMP__"};

const std::vector<std::string>& time_pieces() {
  static const std::vector<std::string> pieces = [] {
    std::vector<std::string> out;
    for (const std::string_view name : kTimeNames) {
      for (std::size_t at = 0; at < name.size(); ++at) {
        for (std::size_t n = 1; at + n <= name.size(); ++n) {
          if (n == name.size()) continue;  // the name itself: a literal mention
          out.emplace_back(name.substr(at, n));
        }
      }
    }
    std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }();
  return pieces;
}

std::size_t piece_index(std::string_view ident) {
  const auto& pieces = time_pieces();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i] == ident) return i;
  }
  return SIZE_MAX;
}

bool ident_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Universal character names that spell an ASCII letter, digit or '_' replaced by that character
// (C++ forbids them outside literals, but a front end that accepted one would make an
// identifier of it). Other text is kept.
std::string decode_ucns(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      const char kind = text[i + 1];
      if (kind == 'u' || kind == 'U') {
        const std::size_t digits = kind == 'u' ? 4 : 8;
        if (i + 2 + digits <= text.size()) {
          unsigned long value = 0;
          bool ok = true;
          for (std::size_t k = 0; k < digits; ++k) {
            const int h = hex_value(text[i + 2 + k]);
            if (h < 0) ok = false;
            value = value * 16 + static_cast<unsigned long>(h < 0 ? 0 : h);
          }
          if (ok && value < 0x80 && ident_char(static_cast<char>(value))) {
            out.push_back(static_cast<char>(value));
            i += 2 + digits;
            continue;
          }
        }
      } else if (kind == 'N' && i + 2 < text.size() && text[i + 2] == '{') {
        const std::size_t close = text.find('}', i + 3);
        if (close != std::string_view::npos && close - i < 64) {
          std::string name(text.substr(i + 3, close - i - 3));
          for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
          char decoded = 0;
          constexpr std::string_view capital = "LATIN CAPITAL LETTER ";
          constexpr std::string_view small = "LATIN SMALL LETTER ";
          if (name == "LOW LINE") {
            decoded = '_';
          } else if (name.size() == capital.size() + 1 && name.starts_with(capital)) {
            decoded = name.back();
          } else if (name.size() == small.size() + 1 && name.starts_with(small)) {
            decoded = static_cast<char>(std::tolower(static_cast<unsigned char>(name.back())));
          }
          if (decoded != 0 && ident_char(decoded)) {
            out.push_back(decoded);
            i = close + 1;
            continue;
          }
        }
      }
    }
    out.push_back(text[i++]);
  }
  return out;
}

// The lines whose directive names a header (#include <a/*b.h> is not a comment): their rest is
// taken as code.
bool header_directive_at(std::string_view t, std::size_t hash) {
  std::size_t i = hash + (t[hash] == '#' ? 1 : 2);
  while (i < t.size() && (t[i] == ' ' || t[i] == '\t')) ++i;
  for (const std::string_view d : {"include", "import", "embed"}) {
    if (t.substr(i, d.size()) == d) return true;
  }
  return false;
}

// Identifier pieces of one spliced view. Comments are skipped; literals are read as code (a
// superset). An unterminated literal is one character of code.
void scan_view(std::string_view t, time_tokens& out) {
  const std::size_t n = t.size();
  bool line_start = true;    // only blanks (and comments) so far on this line
  bool header_line = false;  // #include ... : no comments on the rest of the line
  for (std::size_t i = 0; i < n;) {
    const char c = t[i];
    if (c == '\n') {
      line_start = true;
      header_line = false;
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && (t[i + 1] == '/' || t[i + 1] == '*') && !header_line) {
      if (t[i + 1] == '/') {
        const std::size_t e = t.find('\n', i);
        i = e == std::string_view::npos ? n : e;
      } else {
        const std::size_t e = t.find("*/", i + 2);
        i = e == std::string_view::npos ? n : e + 2;
      }
      continue;
    }
    if (c == '#' || (c == '%' && i + 1 < n && t[i + 1] == ':')) {
      if (line_start && header_directive_at(t, i)) header_line = true;
      line_start = false;
      i += c == '#' ? 1 : 2;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      ++i;
      continue;
    }
    line_start = false;
    if (c == '"' || c == '\'') {
      std::size_t j = i + 1;
      while (j < n && t[j] != c && t[j] != '\n') j += t[j] == '\\' ? 2 : 1;
      if (j < n && t[j] == c) {
        // The contents as code (a _Pragma operand is lexed again): identifiers only.
        scan_view(t.substr(i + 1, j - i - 1), out);
        i = j + 1;
      } else {
        ++i;
      }
      continue;
    }
    if (c >= '0' && c <= '9') {  // a pp-number: digits, letters, '.', e+ p- and ' separators
      std::size_t j = i + 1;
      while (j < n) {
        const char d = t[j];
        if ((d == 'e' || d == 'E' || d == 'p' || d == 'P') && j + 1 < n &&
            (t[j + 1] == '+' || t[j + 1] == '-')) {
          j += 2;
        } else if (ident_char(d) || d == '.') {
          ++j;
        } else if (d == '\'' && j + 1 < n && ident_char(t[j + 1])) {
          j += 2;
        } else {
          break;
        }
      }
      i = j;
      continue;
    }
    if (ident_char(c)) {
      std::size_t j = i;
      while (j < n && ident_char(t[j])) ++j;
      const std::string_view ident = t.substr(i, j - i);
      // A raw string literal: its text runs to )delim" whatever it holds.
      if (j < n && t[j] == '"' && !ident.empty() && ident.back() == 'R' && ident.size() <= 3) {
        const std::size_t open = t.find('(', j + 1);
        if (open != std::string_view::npos && open - j - 1 <= 16) {
          const std::string close = ")" + std::string(t.substr(j + 1, open - j - 1)) + "\"";
          const std::size_t end = t.find(close, open + 1);
          if (end != std::string_view::npos) {
            scan_view(t.substr(open + 1, end - open - 1), out);
            i = end + close.size();
            continue;
          }
        }
      }
      if (ident.size() < 13) {
        const std::size_t index = piece_index(ident);
        if (index != SIZE_MAX) out.pieces[index / 64] |= std::uint64_t{1} << (index % 64);
      }
      i = j;
      continue;
    }
    ++i;
  }
}

bool has_paste(std::string_view t) {
  // Two adjacent hash tokens in any spelling: #, %: and the trigraph ??=.
  const auto hash_at = [&](std::size_t i) -> std::size_t {
    if (i < t.size() && t[i] == '#') return 1;
    if (t.substr(i, 2) == "%:") return 2;
    if (t.substr(i, 3) == "?\?=") return 3;
    return 0;
  };
  for (std::size_t i = 0; i < t.size(); ++i) {
    const std::size_t a = hash_at(i);
    if (a != 0 && hash_at(i + a) != 0) return true;
  }
  return false;
}

}  // namespace

std::size_t time_macro_piece_count() noexcept {
  return time_pieces().size();
}

std::string_view time_macro_piece(std::size_t i) noexcept {
  return time_pieces().at(i);
}

std::string splice_lines(std::string_view text, bool lenient) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::size_t after = std::string_view::npos;
    if (text[i] == '\\') after = i + 1;
    if (lenient && text.substr(i, 3) == "?\?/") after = i + 3;
    if (after != std::string_view::npos) {
      std::size_t j = after;
      while (lenient && j < text.size() &&
             (text[j] == ' ' || text[j] == '\t' || text[j] == '\f' || text[j] == '\v' ||
              text[j] == '\r')) {
        ++j;
      }
      if (!lenient && j < text.size() && text[j] == '\r' && j + 1 < text.size() &&
          text[j + 1] == '\n') {
        ++j;
      }
      if (j < text.size() && text[j] == '\n') {
        i = j + 1;
        continue;
      }
    }
    out.push_back(text[i++]);
  }
  return out;
}

time_tokens scan_time_tokens(std::string_view text) {
  time_tokens out;
  const bool has_ucn = text.find("\\u") != std::string_view::npos ||
                       text.find("\\U") != std::string_view::npos ||
                       text.find("\\N{") != std::string_view::npos;
  std::string decoded;
  if (has_ucn) decoded = decode_ucns(text);
  const std::string_view base = has_ucn ? std::string_view(decoded) : text;
  out.literal = mentions_time_macros(text) || (has_ucn && mentions_time_macros(base));
  // The spliced views: strict (backslash, newline) and lenient (blanks between; ??/). A lenient
  // splice the compiler does not make could hide a // comment's end: both views count.
  if (base.find('\\') == std::string_view::npos && base.find("?\?/") == std::string_view::npos) {
    scan_view(base, out);
    out.paste = has_paste(base);
  } else {
    for (const bool lenient : {false, true}) {
      const std::string view = splice_lines(base, lenient);
      scan_view(view, out);
      out.paste = out.paste || has_paste(view);
    }
  }
  return out;
}

bool may_use_time_macros(const time_tokens& unit) noexcept {
  if (unit.literal) return true;
  if (!unit.paste) return false;
  const auto& pieces = time_pieces();
  const auto present = [&](std::string_view s) {
    // One-character pieces are left out (docs/cache-keys.md, "The clock": the known gap).
    if (s.size() < 2) return false;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i] == s) return ((unit.pieces[i / 64] >> (i % 64)) & 1) != 0;
    }
    return false;
  };
  for (const std::string_view name : kTimeNames) {
    // reach[k]: name[0, k) splits into pieces present (each proper: >= 2 of them in all).
    std::array<bool, 14> reach{};
    reach[0] = true;
    for (std::size_t k = 0; k < name.size(); ++k) {
      if (!reach[k]) continue;
      for (std::size_t e = k + 1; e <= name.size(); ++e) {
        if (e - k < name.size() && present(name.substr(k, e - k))) reach[e] = true;
      }
    }
    if (reach[name.size()]) return true;
  }
  return false;
}

}  // namespace cucore::detail
