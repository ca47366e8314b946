// The conditional structure of a header: its #if groups as the preprocessor reads them, and the
// names it may define (conditional_scan.hpp). The conditions are evaluated in
// condition_evaluation.cpp.
#include <algorithm>
#include <cstring>
#include <optional>

#include "key/conditional_scan.hpp"
#include "key/preprocessor_tokens.hpp"

namespace cucore::detail {
namespace {

using pp::digit;
using pp::hspace;
using pp::ident_char;
using pp::ident_start;
using pp::token;
using pp::tokenize;

// Whether the text holds something this reading does not model the way every compiler does:
// a backslash followed by blanks before the line end (GCC splices it, the standard does not), a
// lone CR (some compilers end a line there), or a trigraph (C++14 and older with trigraphs on).
bool has_ambiguous_lexing(std::string_view t) {
  // One memchr pass per character of interest (find_first_of would test every byte).
  const auto each = [t](char c, auto&& bad) {
    for (const void* at = std::memchr(t.data(), c, t.size()); at != nullptr;) {
      const std::size_t i = static_cast<std::size_t>(static_cast<const char*>(at) - t.data());
      if (bad(i)) return true;
      at = i + 1 < t.size() ? std::memchr(t.data() + i + 1, c, t.size() - i - 1) : nullptr;
    }
    return false;
  };
  const bool lone_cr =
      each('\r', [t](std::size_t i) { return i + 1 >= t.size() || t[i + 1] != '\n'; });
  const bool lenient_splice = each('\\', [t](std::size_t i) {
    std::size_t k = i + 1;
    while (k < t.size() && hspace(t[k])) ++k;
    return k > i + 1 && k < t.size() && (t[k] == '\n' || t[k] == '\r');
  });
  const bool trigraph = each('?', [t](std::size_t i) {
    return i + 2 < t.size() && t[i + 1] == '?' && t[i + 2] != '\0' &&
           std::strchr("=/'()!<>-", t[i + 2]) != nullptr;
  });
  return lone_cr || lenient_splice || trigraph;
}

// The text with strict line splices (backslash-LF, backslash-CR-LF) removed, and the physical
// line of each of its offsets.
class spliced {
 public:
  explicit spliced(std::string_view t) {
    text_.reserve(t.size());
    std::size_t from = 0;  // copied a stretch at a time, between backslashes
    for (std::size_t i = t.find('\\'); i != std::string_view::npos; i = t.find('\\', i + 1)) {
      std::size_t length = 0;
      if (i + 1 < t.size() && t[i + 1] == '\n') {
        length = 2;
      } else if (i + 2 < t.size() && t[i + 1] == '\r' && t[i + 2] == '\n') {
        length = 3;
      }
      if (length == 0) continue;
      text_.append(t, from, i - from);
      splices_.push_back(text_.size());
      from = i + length;
      i = from - 1;
    }
    text_.append(t, from);
  }
  const std::string& text() const { return text_; }
  bool any() const { return !splices_.empty(); }

  // Physical line of `offset`; offsets must not decrease between calls.
  std::uint32_t line_at(std::size_t offset) {
    for (; counted_ < offset && counted_ < text_.size(); ++counted_) {
      if (text_[counted_] == '\n') ++line_;
    }
    while (next_splice_ < splices_.size() && splices_[next_splice_] <= offset) {
      ++next_splice_;
      ++line_;
    }
    return line_;
  }

 private:
  std::string text_;
  std::vector<std::size_t> splices_;  // offsets in text_ where a splice was removed
  std::size_t counted_ = 0;
  std::size_t next_splice_ = 0;
  std::uint32_t line_ = 1;
};

// Whether the rest of the line from `i` holds what a literal could hide or reveal: a comment
// opener or a string quote.
bool rest_of_line_can_hide(const std::string& t, std::size_t i) {
  const std::size_t end = std::min(t.find('\n', i), t.size());
  for (std::size_t k = i; k < end; ++k) {
    if (t[k] == '"' || (t[k] == '/' && k + 1 < end && (t[k + 1] == '*' || t[k + 1] == '/'))) {
      return true;
    }
  }
  return false;
}

// Reads the structure as one language standard lexes it: raw strings (C++11 and later) or not.
// Digit separators are std-dependent and, measured, not applied by NVRTC where a literal reading
// of the apostrophe fits (`1'0 + '/*'` under C++14 reads '0 + ' as a character literal): where
// the two readings could differ (a comment opener or quote after the apostrophe on its line),
// the text is not read at all.
class structure_reader {
 public:
  structure_reader(std::string_view original, bool raw_strings)
      : s_(original), t_(s_.text()), raw_strings_(raw_strings) {}

  // Whether a raw string was read (the reading without raw strings may differ).
  bool saw_raw_string() const { return saw_raw_; }

  std::optional<std::vector<conditional_group>> run() {
    std::size_t i = 0;
    bool line_start = true;
    const std::size_t n = t_.size();
    while (i < n) {
      const char c = t_[i];
      if (c == '\n') {
        line_start = true;
        ++i;
      } else if (hspace(c) || c == '\r') {
        ++i;
      } else if (c == '/' && i + 1 < n && t_[i + 1] == '*') {
        const std::size_t end = t_.find("*/", i + 2);
        if (end == std::string::npos) return std::nullopt;
        i = end + 2;
      } else if (c == '/' && i + 1 < n && t_[i + 1] == '/') {
        i = std::min(t_.find('\n', i), n);
      } else if (line_start && (c == '#' || (c == '%' && i + 1 < n && t_[i + 1] == ':'))) {
        if (!directive(i, c == '#' ? i + 1 : i + 2, i)) return std::nullopt;
        line_start = true;
      } else {
        line_start = false;
        if (c == '"' || c == '\'') {
          i = literal_end(i);
        } else if (ident_start(c)) {
          std::size_t j = i;
          while (j < n && ident_char(t_[j])) ++j;
          const std::string_view word(t_.data() + i, j - i);
          if (j < n && t_[j] == '"' &&
              (word == "R" || word == "LR" || word == "uR" || word == "UR" || word == "u8R")) {
            saw_raw_ = true;
            if (!raw_strings_) {
              i = j;  // C++03: an identifier, then an ordinary string literal
              continue;
            }
            const auto end = raw_string_end(j);
            if (!end) return std::nullopt;
            i = *end;
          } else {
            i = j;  // a literal prefix (L, u8, ...) is followed by its literal, read next
          }
        } else if (digit(c) || (c == '.' && i + 1 < n && digit(t_[i + 1]))) {
          i = number_end(i);
          if (ambiguous_) return std::nullopt;
        } else {
          ++i;
        }
      }
    }
    if (!open_.empty()) return std::nullopt;
    return std::move(groups_);
  }

 private:
  // A string or character literal from its opening quote; unterminated, it ends at the line end
  // (as compilers read skipped groups).
  std::size_t literal_end(std::size_t i) const {
    const char quote = t_[i];
    ++i;
    while (i < t_.size() && t_[i] != quote && t_[i] != '\n') i += t_[i] == '\\' ? 2 : 1;
    return std::min(i < t_.size() && t_[i] == quote ? i + 1 : i, t_.size());
  }

  // A raw string from its opening quote: R"delim( ... )delim". Splices inside one are reverted by
  // the compiler, so a text with splices and raw strings is not read at all.
  std::optional<std::size_t> raw_string_end(std::size_t quote) const {
    if (s_.any()) return std::nullopt;
    const std::size_t open = t_.find('(', quote + 1);
    if (open == std::string::npos || open - quote - 1 > 16) return std::nullopt;
    const std::string delimiter = t_.substr(quote + 1, open - quote - 1);
    if (delimiter.find_first_of(" \t\n\\)\"") != std::string::npos) return std::nullopt;
    const std::size_t close = t_.find(")" + delimiter + "\"", open + 1);
    if (close == std::string::npos) return std::nullopt;
    return close + delimiter.size() + 2;
  }

  // A preprocessing number: digits, letters, '_', '.', e+/E-/p+/P- and digit separators (sets
  // ambiguous_ where a separator read as a literal's quote could change the structure).
  std::size_t number_end(std::size_t i) {
    const std::size_t n = t_.size();
    ++i;
    while (i < n) {
      const char c = t_[i];
      if ((c == '+' || c == '-') && std::strchr("eEpP", t_[i - 1]) != nullptr) {
        ++i;
      } else if (c == '\'' && i + 1 < n && ident_char(t_[i + 1])) {
        if (rest_of_line_can_hide(t_, i)) ambiguous_ = true;
        i += 2;
      } else if (ident_char(c) || c == '.') {
        ++i;
      } else {
        break;
      }
    }
    return i;
  }

  // The directive whose introducer starts at `hash` (the name from `after` on). Reads to the end
  // of its logical line (block comments may continue it over lines) and leaves `i` at the line
  // end. false when the structure is not well formed.
  bool directive(std::size_t& i, std::size_t after, std::size_t hash) {
    const std::size_t n = t_.size();
    const std::uint32_t start_line = s_.line_at(hash);
    std::size_t k = after;
    std::string rest;
    std::string name;
    bool blank = false;
    bool named = false;
    while (k < n && t_[k] != '\n') {
      const char c = t_[k];
      if (hspace(c) || c == '\r') {
        blank = true;
        ++k;
      } else if (c == '/' && k + 1 < n && t_[k + 1] == '*') {
        const std::size_t end = t_.find("*/", k + 2);
        if (end == std::string::npos) return false;
        k = end + 2;
        blank = true;
      } else if (c == '/' && k + 1 < n && t_[k + 1] == '/') {
        k = std::min(t_.find('\n', k), n);
      } else if (!named && ident_start(c)) {
        std::size_t j = k;
        while (j < n && ident_char(t_[j])) ++j;
        name.assign(t_, k, j - k);
        named = true;
        blank = false;
        k = j;
      } else {
        named = true;
        if (blank && !rest.empty()) rest += ' ';
        blank = false;
        if (c == '\'' && k > 0 && (ident_char(t_[k - 1]) || t_[k - 1] == '.') &&
            rest_of_line_can_hide(t_, k)) {
          return false;  // a digit separator or a literal's quote: the readings could differ
        }
        if (c == '"' || c == '\'') {
          const std::size_t end = literal_end(k);
          rest.append(t_, k, end - k);
          k = end;
        } else {
          rest += c;
          ++k;
        }
      }
    }
    const std::uint32_t end_line = s_.line_at(k);
    i = k;
    if (name == "if" || name == "ifdef" || name == "ifndef") {
      open_.push_back(groups_.size());
      groups_.push_back({end_line + 1,
                         0,
                         static_cast<std::uint32_t>(groups_.size()),
                         rest.empty() ? name : name + ' ' + rest,
                         {},
                         2});
    } else if (name == "elif" || name == "elifdef" || name == "elifndef" || name == "else") {
      if (open_.empty()) return false;
      if (name != "elif" && name != "else") {
        undecidable_chains_.push_back(groups_[open_.back()].chain);
      }
      conditional_group& current = groups_[open_.back()];
      current.last_line = start_line - 1;
      const std::uint32_t chain = current.chain;
      open_.back() = groups_.size();
      groups_.push_back({end_line + 1,
                         0,
                         chain,
                         name == "else" || rest.empty() ? name : name + ' ' + rest,
                         {},
                         2});
    } else if (name == "endif") {
      if (open_.empty()) return false;
      groups_[open_.back()].last_line = start_line - 1;
      open_.pop_back();
    }
    return true;
  }

  spliced s_;
  const std::string& t_;
  bool raw_strings_;
  bool saw_raw_ = false;
  bool ambiguous_ = false;
  std::vector<conditional_group> groups_;
  std::vector<std::size_t> open_;  // the innermost open group of each nesting level

 public:
  // Chains with an #elifdef or #elifndef. NVRTC 13.0 does not implement these directives (it
  // ignores them in a group it skips and rejects them in one it enters); a version that does
  // would end the group there. No group of such a chain is decided: both readings are covered.
  std::vector<std::uint32_t> undecidable_chains_;
};

}  // namespace

bool reserved_identifier(std::string_view name) {
  return name.size() >= 2 && name[0] == '_' &&
         (name[1] == '_' || (name[1] >= 'A' && name[1] <= 'Z'));
}

conditional_structure scan_conditionals(std::string_view text) {
  conditional_structure out;
  if (has_ambiguous_lexing(text)) return out;
  structure_reader reader(text, /*raw_strings=*/true);
  auto groups = reader.run();
  if (!groups) return out;
  // A raw string is an identifier and a string literal under --std c++03 (measured): the
  // structure must read the same both ways, as the key does not depend on the standard.
  if (reader.saw_raw_string()) {
    structure_reader without(text, /*raw_strings=*/false);
    const auto other = without.run();
    if (!other || *other != *groups || without.undecidable_chains_ != reader.undecidable_chains_) {
      return out;
    }
  }
  const auto& undecidable = reader.undecidable_chains_;
  if (!undecidable.empty()) {
    std::erase_if(*groups, [&undecidable](const conditional_group& g) {
      return std::find(undecidable.begin(), undecidable.end(), g.chain) != undecidable.end();
    });
  }
  out.known = true;
  // Only groups that can ever be decided are kept: a condition that is unknown even when every
  // name but those reserved for the implementation is undefined stays unknown whatever else gets
  // defined (evaluation is monotone), so it never skips anything, nor ends its chain.
  const auto reserved_only = [](std::string_view name) { return reserved_identifier(name); };
  for (auto& g : *groups) {
    const truth t = evaluate_condition(g.condition, reserved_only);
    if (t == truth::unknown) continue;
    g.when_undefined = static_cast<std::uint8_t>(t);
    // Every identifier the condition names (a superset of those it depends on).
    bool ok = true;
    const auto space = g.condition.find(' ');
    const std::string_view operand = space == std::string::npos
                                         ? std::string_view()
                                         : std::string_view(g.condition).substr(space + 1);
    for (const token& k : tokenize(operand, ok)) {
      // true and false too: NVRTC accepts #define true 0.
      if (k.kind == token::identifier && !reserved_identifier(k.text) && k.text != "defined") {
        g.names.emplace_back(k.text);
      }
    }
    std::sort(g.names.begin(), g.names.end());
    g.names.erase(std::unique(g.names.begin(), g.names.end()), g.names.end());
    out.groups.push_back(std::move(g));
  }
  return out;
}

namespace {

// Whether the text holds a line splice of any reading: a backslash or ??/, blanks, a line end.
bool has_splice(std::string_view t) {
  for (const void* at = std::memchr(t.data(), '\\', t.size()); at != nullptr;) {
    std::size_t i = static_cast<std::size_t>(static_cast<const char*>(at) - t.data()) + 1;
    while (i < t.size() && hspace(t[i])) ++i;
    if (i < t.size() && (t[i] == '\n' || t[i] == '\r')) return true;
    at = i < t.size() ? std::memchr(t.data() + i, '\\', t.size() - i) : nullptr;
  }
  return t.find("?\?/") != std::string_view::npos;
}

}  // namespace

std::vector<std::string> defined_names(std::string_view text) {
  std::vector<std::string> out;
  // memmem: a vectorised search (string_view::find walks byte by byte through memchr hits). In
  // windows of 16 KiB: the sanitizers' memmem checks the whole haystack on every call, which made
  // reading NVRTC's 4 MiB builtins library (1,369 hits) take seconds per process under TSan.
  const auto find = [](std::string_view t, std::size_t from) {
    constexpr std::size_t window = 16 * 1024;
    while (from + 6 <= t.size()) {
      const std::size_t length = std::min(window, t.size() - from);
      const void* at = ::memmem(t.data() + from, length, "define", 6);
      if (at != nullptr) return static_cast<std::size_t>(static_cast<const char*>(at) - t.data());
      if (from + length == t.size()) break;
      from += length - 5;  // a match may straddle the window's end
    }
    return std::string_view::npos;
  };
  const auto scan = [&out, &find](std::string_view t) {
    for (std::size_t pos = find(t, 0); pos != std::string_view::npos; pos = find(t, pos + 6)) {
      if (pos > 0 && ident_char(t[pos - 1])) continue;
      std::size_t i = pos + 6;
      for (;;) {  // blanks, splices and block comments between "define" and the name
        if (i < t.size() && (hspace(t[i]) || t[i] == '\\' || t[i] == '\r' || t[i] == '\n')) {
          ++i;
        } else if (i + 1 < t.size() && t[i] == '/' && t[i + 1] == '*') {
          const std::size_t end = t.find("*/", i + 2);
          i = end == std::string_view::npos ? t.size() : end + 2;
        } else {
          break;
        }
      }
      std::size_t j = i;
      while (j < t.size() && ident_char(t[j])) ++j;
      if (j > i) out.emplace_back(t.substr(i, j - i));
      // The include scanner reads a macro's name leniently ('$' and bytes >= 0x80 in it, to list
      // more candidates): the names as it reads them too, so that this stays a superset.
      std::size_t w = j;
      while (w < t.size() &&
             (ident_char(t[w]) || t[w] == '$' || static_cast<unsigned char>(t[w]) >= 0x80)) {
        ++w;
      }
      if (w > j) out.emplace_back(t.substr(i, w - i));
    }
  };
  scan(text);
  // A splice may cut the word "define" or the name itself: the text without any splice (strict
  // or lenient) is read too.
  if (has_splice(text)) {
    // Splices removed, copied a stretch at a time.
    std::string joined;
    joined.reserve(text.size());
    std::size_t from = 0;
    std::size_t trigraph = text.find("?\?/");  // the next one at or after i (searched once each)
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t backslash = text.find('\\', i);
      if (trigraph != std::string_view::npos && trigraph < i) trigraph = text.find("?\?/", i);
      const std::size_t at = std::min(backslash, trigraph);
      if (at == std::string_view::npos) break;
      std::size_t k = at + (at == trigraph ? 3 : 1);
      while (k < text.size() && hspace(text[k])) ++k;
      if (k < text.size() && (text[k] == '\n' || text[k] == '\r')) {
        if (text[k] == '\r' && k + 1 < text.size() && text[k + 1] == '\n') ++k;
        joined.append(text, from, at - from);
        from = k + 1;
        i = k + 1;
      } else {
        i = at + 1;
      }
    }
    joined.append(text, from);
    scan(joined);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace cucore::detail
