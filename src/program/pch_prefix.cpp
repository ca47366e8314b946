// The prefix NVRTC may precompile (docs/compilation.md, "Precompiled headers"): a conservative
// reading of where NVRTC's "header stop" falls in a program.
#include "program/pch_prefix.hpp"

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

namespace cucore::detail {
namespace {

// `code` with its line splices (a backslash right before a newline, CRLF included) removed, and
// where each remaining character came from.
struct spliced_text {
  std::string text;
  // Where splices were removed: (index in text, characters removed before it, cumulative), in
  // order. Only as many as the code has splices: a long generated source costs one copy.
  std::vector<std::pair<std::size_t, std::size_t>> removed;
  bool unclear = false;  // a splice only some compilers take (backslash or ??/, blanks, newline),
                         // or a carriage return not before a newline
};

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\f' || c == '\v';
}

spliced_text splice(std::string_view code) {
  spliced_text out;
  out.text.reserve(code.size());
  const std::size_t n = code.size();
  for (std::size_t i = 0; i < n;) {
    const char c = code[i];
    if (c == '\\' || (c == '?' && code.substr(i, 3) == "?\?/")) {
      const std::size_t after = i + (c == '\\' ? 1 : 3);
      std::size_t j = after;
      while (j < n && (blank(code[j]) || (code[j] == '\r' && j + 1 < n && code[j + 1] == '\n'))) {
        ++j;
      }
      if (j < n && code[j] == '\n') {
        // Only a backslash right before the newline (or CRLF) splices for certain.
        const bool strict = c == '\\' && (j == after || (j == after + 1 && code[after] == '\r'));
        if (!strict) out.unclear = true;
        out.removed.emplace_back(out.text.size(), j + 1 - out.text.size());
        i = j + 1;
        continue;
      }
    }
    if (c == '\r' && (i + 1 >= n || code[i + 1] != '\n')) out.unclear = true;
    out.text.push_back(c);
    ++i;
  }
  return out;
}

// The offset in the code of text[i].
std::size_t code_offset(const spliced_text& s, std::size_t i) {
  // The last splice removed at or before i: its cumulative count of characters removed.
  auto after = std::upper_bound(s.removed.begin(), s.removed.end(), i,
                                [](std::size_t v, const auto& r) { return v < r.first; });
  if (after == s.removed.begin()) return i;
  return i + std::prev(after)->second;
}

bool identifier_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}

// A lexer over spliced text for the prefix scan: comments, literals and line ends.
class prefix_lexer {
 public:
  explicit prefix_lexer(const std::string& t) : t_(t), n_(t.size()) {}

  // Skips blanks and comments; a newline ends the skip (block comments may hold newlines).
  std::size_t skip_blank(std::size_t i) const {
    while (i < n_) {
      const char c = t_[i];
      if (blank(c) || c == '\r') {
        ++i;
      } else if (c == '/' && i + 1 < n_ && t_[i + 1] == '*') {
        i = block_comment_end(i);
      } else if (c == '/' && i + 1 < n_ && t_[i + 1] == '/') {
        i = line_end_raw(i);
      } else {
        break;
      }
    }
    return i;
  }

  // The newline ending the logical line that `i` is in (or n): comments, literals and raw strings
  // are skipped whole, so a newline inside a block comment or raw string does not end it.
  std::size_t line_end(std::size_t i) const {
    while (i < n_) {
      const char c = t_[i];
      if (c == '\n') return i;
      if (c == '/' && i + 1 < n_ && t_[i + 1] == '*') {
        i = block_comment_end(i);
      } else if (c == '/' && i + 1 < n_ && t_[i + 1] == '/') {
        return line_end_raw(i);
      } else if (c == '"' || c == '\'') {
        i = literal_end(i);
      } else if (identifier_char(c)) {
        const std::size_t start = i;
        while (i < n_ && identifier_char(t_[i])) ++i;
        const std::string_view word(t_.data() + start, i - start);
        if (i < n_ && t_[i] == '"' &&
            (word == "R" || word == "LR" || word == "uR" || word == "UR" || word == "u8R")) {
          i = raw_string_end(i);
        }
      } else {
        ++i;
      }
    }
    return n_;
  }

 private:
  std::size_t block_comment_end(std::size_t i) const {
    const auto end = t_.find("*/", i + 2);
    return end == std::string::npos ? n_ : end + 2;
  }
  std::size_t line_end_raw(std::size_t i) const {
    const auto end = t_.find('\n', i);
    return end == std::string::npos ? n_ : end;
  }
  // A quoted literal: to the matching quote, or to the newline that leaves it unterminated.
  std::size_t literal_end(std::size_t i) const {
    const char q = t_[i];
    for (++i; i < n_; ++i) {
      if (t_[i] == '\\') {
        ++i;
      } else if (t_[i] == q) {
        return i + 1;
      } else if (t_[i] == '\n') {
        return i;
      }
    }
    return n_;
  }
  // i at the '"' of R"delim( ... )delim".
  std::size_t raw_string_end(std::size_t i) const {
    const auto open = t_.find('(', i + 1);
    if (open == std::string::npos || open - i - 1 > 16) return literal_end(i);
    const std::string close = ")" + t_.substr(i + 1, open - i - 1) + "\"";
    const auto end = t_.find(close, open + 1);
    return end == std::string::npos ? n_ : end + close.size();
  }

  const std::string& t_;
  std::size_t n_;
};

}  // namespace

pch_prefix scan_pch_prefix(std::string_view code) {
  pch_prefix out;
  const spliced_text s = splice(code);
  if (s.unclear) {
    out.balanced = false;
    return out;
  }
  const std::string& t = s.text;
  const std::size_t n = t.size();
  const prefix_lexer lex(t);
  std::size_t i = t.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  std::size_t cut = 0;  // in t: just after the last directive so far
  int depth = 0;
  for (;;) {
    i = lex.skip_blank(i);
    if (i >= n) {
      cut = n;
      break;
    }
    if (t[i] == '\n') {
      ++i;
      continue;
    }
    std::size_t introducer = 0;
    if (t[i] == '#') {
      introducer = 1;
    } else if (t.compare(i, 2, "%:") == 0) {
      introducer = 2;
    } else if (t.compare(i, 3, "?\?=") == 0) {
      introducer = 3;  // a trigraph before C++17, else a token: reading a directive reads on
    }
    if (introducer == 0) {
      // A token outside any directive: NVRTC's header stop, unless an #if group holds it (NVRTC
      // skips the groups it does not enter, so read on: the prefix only grows).
      if (depth == 0) break;
      i = lex.line_end(i);
      continue;
    }
    std::size_t j = lex.skip_blank(i + introducer);
    const std::size_t name_start = j;
    while (j < n && identifier_char(t[j])) ++j;
    const std::string_view name(t.data() + name_start, j - name_start);
    if (name == "if" || name == "ifdef" || name == "ifndef") {
      ++depth;
    } else if (name == "endif") {
      if (depth == 0) {
        out.balanced = false;
        return out;
      }
      --depth;
    } else if (name == "include" || name == "include_next" || name == "import") {
      out.includes = true;
    } else if (name == "line" ||
               (!name.empty() && std::isdigit(static_cast<unsigned char>(name.front())) != 0)) {
      out.line_marker = true;
    }
    i = lex.line_end(j);
    if (i < n) ++i;  // the newline ending the directive
    cut = i;
  }
  out.end = cut == 0 ? 0 : (cut >= n ? code.size() : code_offset(s, cut - 1) + 1);
  return out;
}

}  // namespace cucore::detail
