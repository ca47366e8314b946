// The prefix NVRTC may precompile (docs/compilation.md, "Precompiled headers"): a conservative
// reading of where NVRTC's "header stop" falls in a program; and what of the program's name an
// image of it depends on (docs/compile-server.md, "Images across program names").
#include "pch/pch_prefix.hpp"

#include <algorithm>
#include <array>
#include <bitset>
#include <cctype>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/sha256.hpp"
#include "key/compiler_environment.hpp"
#include "key/include_scanner.hpp"
#include "key/time_macros.hpp"

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

// ---- What of the program name an image depends on.

namespace {

constexpr std::string_view kBaseFile = "__BASE_FILE__";
constexpr std::string_view kFixedName = "cucore-pch-prefix.cu";

bool ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The proper substrings of __BASE_FILE__ of two or more characters, each once: the pieces a paste
// could form it from (one-character pieces left out, the clock's known gap).
const std::vector<std::string_view>& pieces() {
  static const std::vector<std::string_view> all = [] {
    std::vector<std::string_view> out;
    for (std::size_t at = 0; at < kBaseFile.size(); ++at) {
      for (std::size_t n = 2; at + n <= kBaseFile.size(); ++n) {
        const auto p = kBaseFile.substr(at, n);
        if (n < kBaseFile.size() && std::find(out.begin(), out.end(), p) == out.end()) {
          out.push_back(p);
        }
      }
    }
    return out;
  }();
  return all;
}

struct base_file_tokens {
  bool literal = false;  // __BASE_FILE__ as an identifier
  bool paste = false;    // ##, %:%: or ??=??=
  std::bitset<128> present;
  void merge(const base_file_tokens& o) {
    literal = literal || o.literal;
    paste = paste || o.paste;
    present |= o.present;
  }
};

void scan_identifiers(std::string_view text, base_file_tokens& out) {
  const auto& all = pieces();
  for (std::size_t i = 0; i < text.size();) {
    if (!ident(text[i])) {
      ++i;
      continue;
    }
    std::size_t e = i;
    while (e < text.size() && ident(text[e])) ++e;
    const std::string_view word = text.substr(i, e - i);
    if (word == kBaseFile) out.literal = true;
    if (word.size() < kBaseFile.size() && word.size() >= 2) {
      for (std::size_t p = 0; p < all.size(); ++p) {
        if (all[p] == word) out.present.set(p);
      }
    }
    i = e;
  }
}

// Comments and literals count as code (a superset); line splices are undone leniently (a
// backslash or ??/, blanks, a newline) and both views are scanned.
base_file_tokens scan(std::string_view text) {
  base_file_tokens out;
  out.paste = text.find("##") != std::string_view::npos ||
              text.find("%:%:") != std::string_view::npos ||
              text.find("?\?=?\?=") != std::string_view::npos;
  scan_identifiers(text, out);
  if (text.find('\\') == std::string_view::npos && text.find("?\?/") == std::string_view::npos) {
    return out;
  }
  const std::string spliced = splice_lines(text, /*lenient=*/true);
  out.paste = out.paste || spliced.find("##") != std::string::npos ||
              spliced.find("%:%:") != std::string::npos;
  scan_identifiers(spliced, out);
  return out;
}

bool may_form(const base_file_tokens& unit) {
  if (unit.literal) return true;
  if (!unit.paste) return false;
  const auto& all = pieces();
  const auto present = [&](std::string_view s) {
    for (std::size_t p = 0; p < all.size(); ++p) {
      if (all[p] == s) return unit.present.test(p);
    }
    return false;
  };
  // reach[k]: kBaseFile[0, k) splits into pieces present.
  std::array<bool, kBaseFile.size() + 1> reach{};
  reach[0] = true;
  for (std::size_t k = 0; k < kBaseFile.size(); ++k) {
    if (!reach[k]) continue;
    for (std::size_t e = k + 2; e <= kBaseFile.size(); ++e) {
      if (e - k < kBaseFile.size() && present(kBaseFile.substr(k, e - k))) reach[e] = true;
    }
  }
  return reach[kBaseFile.size()];
}

// A closure file's tokens, by its contents' digest (the key's): each file is read once per
// process. A file whose contents no longer match reads as naming __BASE_FILE__.
base_file_tokens file_tokens(const std::string& path, const std::string& digest_hex) {
  static std::mutex mutex;
  static std::unordered_map<std::string, base_file_tokens> memo;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = memo.find(digest_hex); it != memo.end()) return it->second;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return {true, false, {}};
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto d = sha256_hex(std::as_bytes(std::span<const char>(text.data(), text.size())));
  if (in.bad() || std::string_view(d.data(), d.size()) != digest_hex) return {true, false, {}};
  const base_file_tokens t = scan(text);
  const std::lock_guard<std::mutex> lock(mutex);
  memo.emplace(digest_hex, t);
  return t;
}

}  // namespace

std::string pch_program_name(std::string_view prefix, const std::string& name) {
  const base_file_tokens t = scan(prefix);
  if (t.literal || may_form(t) || prefix.find("__FILE__") != std::string_view::npos) return name;
  bool beside = false;
  for (const auto& r : scan_includes(prefix).references) {
    beside = beside || r.form != include_form::angle;
  }
  const std::size_t slash = name.rfind('/');
  const std::string dir = beside && slash != std::string::npos ? name.substr(0, slash + 1) : "";
  return dir + std::string(kFixedName);
}

bool pch_needs_whole_name(std::string_view prefix, const program_cache_key& prefix_key,
                          const program_options& options, std::span<const std::string> flags,
                          code_type target) {
  // -lineinfo and -G were measured to share (their output names the program from the body's
  // compile); the other flags that write the program name into the output were not.
  std::vector<std::string> rest;
  for (const auto& f : flags) {
    if (f != "-lineinfo" && f != "--generate-line-info" && f != "-G" && f != "--device-debug") {
      rest.push_back(f);
    }
  }
  if (embeds_working_directory(rest, target)) return true;

  base_file_tokens unit = scan(prefix);
  for (const auto& f : flags) unit.merge(scan(f));
  for (const auto& h : options.headers) unit.merge(scan(h.contents));
  // The closure's files, as explain() lists them: "PATH (N bytes, sha256 HEX)".
  for (const auto& field : prefix_key.explain()) {
    if (field.label != "header") continue;
    const std::string& p = field.payload;
    const std::size_t open = p.rfind(" (");
    if (open == std::string::npos || p.size() < 66 || p.back() != ')') return true;
    unit.merge(file_tokens(p.substr(0, open), p.substr(p.size() - 65, 64)));
    if (unit.literal) return true;
  }
  return may_form(unit);
}

}  // namespace cucore::detail
