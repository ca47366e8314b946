// The include scan (include_scanner.hpp): one vectorised pass finds the few places where a
// reference can start ('#', "%:", "??=", "__has_"), and only those are parsed. No global
// comment/literal state is kept: a directive is accepted wherever its introducer follows a line
// start or the end of a block comment (over blanks), which covers both the comment-aware view and
// the raw one, and every __has_* is parsed wherever it stands.
#include "key/include_scanner.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <iterator>
#include <unordered_set>
#include <utility>

#if defined(__SSE2__)
#include <immintrin.h>  // SSE2 always, AVX2 where the CPU has it (chosen at run time)
#endif

namespace cucore::detail {
namespace {

// How far one operand is read: bounds the work per directive on adversarial input (a longer
// operand is reported as computed, which the caller treats as unresolvable).
constexpr std::size_t kMaxOperand = 4096;

bool ascii_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Identifier characters as a lenient compiler accepts them ('$', UTF-8): used where counting more
// characters as identifier characters can only list more.
bool wide_ident_char(char c) {
  return ascii_ident_char(c) || c == '$' || static_cast<unsigned char>(c) >= 0x80;
}

// Blanks inside a line. NUL counts: GCC ignores NUL bytes as white space.
bool hspace(char c) {
  return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\0';
}

bool line_end(char c) {
  return c == '\n' || c == '\r';
}

bool starts_with(std::string_view text, std::size_t at, std::string_view what) {
  return text.size() - at >= what.size() &&
         std::memcmp(text.data() + at, what.data(), what.size()) == 0;
}

// The length of the line splice starting at `at` (a backslash, or the trigraph ??/), 0 if none.
// strict: backslash-LF and backslash-CR-LF, which every compiler splices. lenient: also blanks
// between the backslash and the line end, a lone CR as line end, and ??/ (GCC's and trigraph
// modes' readings).
std::size_t splice_length(std::string_view t, std::size_t at, bool lenient) {
  const std::size_t n = t.size();
  std::size_t i = at;
  if (t[i] == '\\') {
    ++i;
  } else if (lenient && starts_with(t, i, "?\?/")) {
    i += 3;
  } else {
    return 0;
  }
  if (lenient) {
    while (i < n && hspace(t[i])) ++i;
  }
  if (i < n && t[i] == '\n') return i + 1 - at;
  if (i < n && t[i] == '\r') {
    if (i + 1 < n && t[i + 1] == '\n') return i + 2 - at;
    if (lenient) return i + 1 - at;
  }
  return 0;
}

// Whether position i of p (n bytes) starts a candidate (see next_candidate).
bool candidate_at(const char* p, std::size_t n, std::size_t i) {
  const char c = p[i];
  if (c == '#' || c == '\\') return true;
  if (i + 1 >= n) return false;
  if ((c == '%' && p[i + 1] == ':') || (c == '?' && p[i + 1] == '?')) return true;
  return c == '_' && i + 3 < n && p[i + 1] == '_' && p[i + 2] == 'h' && p[i + 3] == 'a';
}

#if defined(__SSE2__)
// One vector step of next_candidate: the candidates among the W positions at p, as a bit mask
// (reads W + 3 bytes).
#define CUCORE_CANDIDATE_MASK(V, LOAD, SET1, CMPEQ, AND, OR, MOVEMASK) \
  const V b0 = LOAD(reinterpret_cast<const V*>(p + i));                \
  const V b1 = LOAD(reinterpret_cast<const V*>(p + i + 1));            \
  const V b2 = LOAD(reinterpret_cast<const V*>(p + i + 2));            \
  const V b3 = LOAD(reinterpret_cast<const V*>(p + i + 3));            \
  V m = OR(CMPEQ(b0, SET1('#')), CMPEQ(b0, SET1('\\')));               \
  m = OR(m, AND(CMPEQ(b0, SET1('%')), CMPEQ(b1, SET1(':'))));          \
  m = OR(m, AND(CMPEQ(b0, SET1('?')), CMPEQ(b1, SET1('?'))));          \
  m = OR(m, AND(AND(CMPEQ(b0, SET1('_')), CMPEQ(b1, SET1('_'))),       \
                AND(CMPEQ(b2, SET1('h')), CMPEQ(b3, SET1('a')))));     \
  const auto mask = static_cast<std::uint32_t>(MOVEMASK(m))

std::size_t next_candidate_sse2(const char* p, std::size_t n, std::size_t i) {
  while (n >= 19 && i <= n - 19) {
    CUCORE_CANDIDATE_MASK(__m128i, _mm_loadu_si128, _mm_set1_epi8, _mm_cmpeq_epi8, _mm_and_si128,
                          _mm_or_si128, _mm_movemask_epi8);
    if (mask != 0) return i + static_cast<std::size_t>(__builtin_ctz(mask));
    i += 16;
  }
  while (i < n && !candidate_at(p, n, i)) ++i;
  return i;
}

__attribute__((target("avx2"))) std::size_t next_candidate_avx2(const char* p, std::size_t n,
                                                                std::size_t i) {
  while (n >= 35 && i <= n - 35) {
    CUCORE_CANDIDATE_MASK(__m256i, _mm256_loadu_si256, _mm256_set1_epi8, _mm256_cmpeq_epi8,
                          _mm256_and_si256, _mm256_or_si256, _mm256_movemask_epi8);
    if (mask != 0) return i + static_cast<std::size_t>(__builtin_ctz(mask));
    i += 32;
  }
  return next_candidate_sse2(p, n, i);
}
#undef CUCORE_CANDIDATE_MASK

using candidate_finder = std::size_t (*)(const char*, std::size_t, std::size_t);

candidate_finder pick_candidate_finder() {
  __builtin_cpu_init();  // may run before the constructors that would do it
  return __builtin_cpu_supports("avx2") ? next_candidate_avx2 : next_candidate_sse2;
}
#endif

// The next position at or after `i` where text holds '#', "%:", "??", "__ha" or a backslash: every
// place a directive introducer, a __has_* or a line splice can start (callers check the rest).
// Vectorised: this pass is most of the cost of a scan.
std::size_t next_candidate(const char* p, std::size_t n, std::size_t i) {
#if defined(__SSE2__)
  static const candidate_finder impl = pick_candidate_finder();
  return impl(p, n, i);
#else
  while (i < n && !candidate_at(p, n, i)) ++i;
  return i;
#endif
}

std::size_t count_newlines(const char* p, std::size_t n) {
  std::size_t count = 0;
  std::size_t i = 0;
#if defined(__SSE2__)
  const __m128i newline = _mm_set1_epi8('\n');
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    count += static_cast<std::size_t>(
        __builtin_popcount(static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(b, newline)))));
  }
#endif
  for (; i < n; ++i) count += p[i] == '\n' ? 1 : 0;
  return count;
}

// A line-spliced copy of a text, and how to find the original offset of each of its characters.
struct spliced_text {
  std::string text;
  // (offset in text, characters removed at or before it), one per splice, in order.
  std::vector<std::pair<std::size_t, std::size_t>> removed;

  std::size_t original_offset(std::size_t offset) const {
    const auto after =
        std::upper_bound(removed.begin(), removed.end(), offset,
                         [](std::size_t value, const auto& entry) { return value < entry.first; });
    return after == removed.begin() ? offset : offset + std::prev(after)->second;
  }
};

// The positions where a splice can start, in order: backslashes, and (lenient) '?'s. Remembers
// the next of each, so that many of one do not make the other be searched for again.
class splice_starts {
 public:
  splice_starts(std::string_view text, bool lenient)
      : t_(text),
        lenient_(lenient),
        backslash_(find('\\', 0)),
        question_(lenient ? find('?', 0) : text.size()) {}

  std::size_t next(std::size_t i) {
    if (backslash_ < i) backslash_ = find('\\', i);
    if (!lenient_) return backslash_;
    if (question_ < i) question_ = find('?', i);
    return std::min(backslash_, question_);
  }

 private:
  std::size_t find(char c, std::size_t i) const {
    const void* at = i < t_.size() ? std::memchr(t_.data() + i, c, t_.size() - i) : nullptr;
    return at ? static_cast<std::size_t>(static_cast<const char*>(at) - t_.data()) : t_.size();
  }

  std::string_view t_;
  bool lenient_;
  std::size_t backslash_;
  std::size_t question_;
};

spliced_text splice(std::string_view t, bool lenient) {
  spliced_text out;
  out.text.reserve(t.size());
  std::size_t from = 0;
  std::size_t total = 0;
  splice_starts starts(t, lenient);
  for (std::size_t i = starts.next(0); i < t.size(); i = starts.next(i)) {
    const std::size_t length = splice_length(t, i, lenient);
    if (length == 0) {
      ++i;
      continue;
    }
    out.text.append(t, from, i - from);
    total += length;
    out.removed.emplace_back(out.text.size(), total);
    i += length;
    from = i;
  }
  out.text.append(t, from);
  return out;
}

// Which splices the text holds, from `from` on.
struct splice_kinds {
  bool strict = false;
  bool lenient = false;  // one that only the lenient reading splices
};

void find_splices(std::string_view t, std::size_t from, splice_kinds& kinds) {
  splice_starts starts(t, true);
  for (std::size_t i = starts.next(from); i < t.size() && !kinds.lenient; i = starts.next(i + 1)) {
    if (splice_length(t, i, false) != 0) {
      kinds.strict = true;
    } else if (splice_length(t, i, true) != 0) {
      kinds.lenient = true;
    }
  }
}

struct found_reference {
  include_reference reference;
  std::size_t offset;  // in the original text
};

struct found_definition {
  macro_definition definition;
  std::size_t offset;
};

struct found_function_definition {
  function_macro_definition definition;
  std::size_t offset;
};

// Parses the references at the candidates of one (spliced) text.
class scanner {
 public:
  scanner(std::string_view text, const spliced_text* map, std::vector<found_reference>& references,
          std::vector<found_definition>& definitions,
          std::vector<found_function_definition>& function_definitions)
      : t_(text),
        map_(map),
        references_(references),
        definitions_(definitions),
        function_definitions_(function_definitions) {}

  // Scans the whole text. With `watch_splices` (the text is the original), stops at the first
  // strict splice (the text must then be spliced and scanned again) and records which splices it
  // saw; returns where it stopped.
  std::size_t run(bool watch_splices, splice_kinds& seen) {
    const char* p = t_.data();
    const std::size_t n = t_.size();
    for (std::size_t i = next_candidate(p, n, 0); i < n; i = next_candidate(p, n, i + 1)) {
      switch (p[i]) {
        case '#':
          directive(i, i + 1);
          break;
        case '%':
          if (i + 1 < n && p[i + 1] == ':') directive(i, i + 2);
          break;
        case '?':
          if (i + 2 < n && p[i + 2] == '=') directive(i, i + 3);
          if (watch_splices && i + 2 < n && p[i + 2] == '/' && splice_length(t_, i, true) != 0) {
            seen.lenient = true;
          }
          break;
        case '_':
          if (starts_with(t_, i, "__has_")) has_operator(i);
          break;
        case '\\':
          if (!watch_splices) break;
          if (splice_length(t_, i, false) != 0) {
            seen.strict = true;
            return i;
          }
          if (splice_length(t_, i, true) != 0) seen.lenient = true;
          break;
        default:
          break;
      }
    }
    return n;
  }

 private:
  std::size_t original(std::size_t offset) const {
    return map_ ? map_->original_offset(offset) : offset;
  }

  // Whether an introducer at `at` can start a directive: only blanks lie between it and the start
  // of the text, of a line (CR included, as some compilers end lines there), or the end of a block
  // comment (which may span lines; after a comment on its own line it is a directive, elsewhere a
  // harmless extra).
  bool at_line_start(std::size_t at) const {
    std::size_t j = at;
    while (j > 0 && hspace(t_[j - 1])) --j;
    if (j == 0 || line_end(t_[j - 1])) return true;
    if (j >= 2 && t_[j - 1] == '/' && t_[j - 2] == '*') return true;
    return j == 3 && starts_with(t_, 0, "\xEF\xBB\xBF");  // after a UTF-8 byte order mark
  }

  // The position just after the "*/" that closes a comment whose text starts at `from`, or the
  // end. Remembers the last answer, so that many comment openers before one distant (or missing)
  // close cost one search.
  std::size_t comment_end(std::size_t from) {
    if (from >= cached_from_ && from <= cached_close_) return cached_end_;
    std::size_t close = from;
    for (;;) {
      const void* star =
          close < t_.size() ? std::memchr(t_.data() + close, '*', t_.size() - close) : nullptr;
      if (star == nullptr) {
        close = t_.size();
        break;
      }
      close = static_cast<std::size_t>(static_cast<const char*>(star) - t_.data());
      if (close + 1 < t_.size() && t_[close + 1] == '/') break;
      ++close;
    }
    cached_from_ = from;
    cached_close_ = close;
    cached_end_ = std::min(close + 2, t_.size());
    return cached_end_;
  }

  // Skips blanks and block comments; with `newlines`, also line ends and // comments. Stops at a
  // // comment otherwise (returning its position: the logical line ends there).
  std::size_t skip_blanks(std::size_t i, bool newlines) {
    const std::size_t n = t_.size();
    while (i < n) {
      const char c = t_[i];
      if (hspace(c) || (newlines && line_end(c))) {
        ++i;
      } else if (c == '/' && i + 1 < n && t_[i + 1] == '*') {
        i = comment_end(i + 2);
      } else if (newlines && c == '/' && i + 1 < n && t_[i + 1] == '/') {
        while (i < n && !line_end(t_[i])) ++i;
      } else {
        break;
      }
    }
    return i;
  }

  // The operand text from `i` to the end of the logical line (or, for __has_*, to the ')' that
  // closes the operand): comments as one space, blanks collapsed, trimmed, literals as written.
  std::string operand_text(std::size_t i, bool parenthesised) {
    const std::size_t n = t_.size();
    const std::size_t limit = n - i > kMaxOperand ? i + kMaxOperand : n;
    std::string out;
    bool blank = false;
    int depth = 0;
    while (i < limit) {
      const char c = t_[i];
      if (hspace(c) || (parenthesised && line_end(c))) {
        blank = true;
        ++i;
        continue;
      }
      if (line_end(c)) break;
      if (c == '/' && i + 1 < n && t_[i + 1] == '*') {
        i = comment_end(i + 2);
        blank = true;
        continue;
      }
      if (c == '/' && i + 1 < n && t_[i + 1] == '/') {
        if (!parenthesised) break;
        while (i < n && !line_end(t_[i])) ++i;
        blank = true;
        continue;
      }
      if (parenthesised) {
        if (c == ')' && depth == 0) break;
        depth += c == '(' ? 1 : c == ')' ? -1 : 0;
      }
      if (blank && !out.empty()) out += ' ';
      blank = false;
      if (c == '"' || c == '\'') {
        // A literal as written (a "/*" inside is no comment); unterminated, it ends with the line.
        std::size_t k = i + 1;
        while (k < limit && t_[k] != c && !line_end(t_[k])) k += t_[k] == '\\' ? 2 : 1;
        k = std::min(k < limit && t_[k] == c ? k + 1 : k, limit);
        out.append(t_, i, k - i);
        i = k;
        continue;
      }
      out += c;
      ++i;
    }
    return out;
  }

  void add(include_kind kind, include_form form, std::string name, std::size_t at) {
    references_.push_back({{kind, form, std::move(name), 0}, original(at)});
  }

  // The operand of an include-like directive or __has_* at `i` (blanks skipped): a header name if
  // one is delimited on this line, else computed.
  void operand(include_kind kind, std::size_t i, std::size_t at, bool parenthesised) {
    const std::size_t n = t_.size();
    if (i < n && (t_[i] == '"' || t_[i] == '<')) {
      const char close = t_[i] == '"' ? '"' : '>';
      const std::size_t limit = n - i > kMaxOperand ? i + kMaxOperand : n;
      std::size_t k = i + 1;
      while (k < limit && t_[k] != close && !line_end(t_[k])) ++k;
      if (k < limit && t_[k] == close) {
        add(kind, close == '"' ? include_form::quoted : include_form::angle,
            std::string(t_.substr(i + 1, k - i - 1)), at);
        return;
      }
    }
    add(kind, include_form::computed, operand_text(i, parenthesised), at);
  }

  // A directive whose introducer spans [at, after).
  void directive(std::size_t at, std::size_t after) {
    if (!at_line_start(at)) return;
    const std::size_t start = skip_blanks(after, false);
    std::size_t end = start;
    while (end < t_.size() && ascii_ident_char(t_[end])) ++end;
    const std::string_view word = t_.substr(start, end - start);
    include_kind kind;
    if (word == "include") {
      kind = include_kind::include;
    } else if (word == "include_next") {
      kind = include_kind::include_next;
    } else if (word == "import") {
      kind = include_kind::import;
    } else if (word == "embed") {
      kind = include_kind::embed;
    } else {
      if (word == "define") definition(end, at);
      return;
    }
    operand(kind, skip_blanks(end, false), at, false);
  }

  void definition(std::size_t i, std::size_t at) {
    i = skip_blanks(i, false);
    const std::size_t name_start = i;
    while (i < t_.size() && wide_ident_char(t_[i])) ++i;
    if (i == name_start) return;
    if (i < t_.size() && t_[i] == '(') {
      function_definition(name_start, i, at);
      return;
    }
    std::string body = operand_text(skip_blanks(i, false), false);
    if (body.empty()) return;
    const bool names_a_header =
        body[0] == '"' || body[0] == '<' || std::all_of(body.begin(), body.end(), [](char c) {
          return wide_ident_char(c) || c == '/' || c == '.' || c == '-' || c == ' ';
        });
    if (!names_a_header) return;
    definitions_.push_back(
        {{std::string(t_.substr(name_start, i - name_start)), std::move(body), 0}, original(at)});
  }

  // A function-like definition: the name spans [name_start, open), its parameter list opens there.
  void function_definition(std::size_t name_start, std::size_t open, std::size_t at) {
    std::vector<std::string> parameters;
    std::size_t i = open + 1;
    for (;;) {
      i = skip_blanks(i, false);
      if (i >= t_.size() || line_end(t_[i])) return;
      if (t_[i] == ')') break;
      if (starts_with(t_, i, "...")) {
        parameters.emplace_back("...");
        i += 3;
      } else {
        const std::size_t p0 = i;
        while (i < t_.size() && wide_ident_char(t_[i])) ++i;
        if (i == p0) return;
        parameters.emplace_back(t_.substr(p0, i - p0));
        i = skip_blanks(i, false);
        if (starts_with(t_, i, "...")) i += 3;  // GNU named variadic parameter
      }
      i = skip_blanks(i, false);
      if (i < t_.size() && t_[i] == ',') {
        ++i;
      } else if (i >= t_.size() || t_[i] != ')') {
        return;
      }
    }
    std::string body = operand_text(skip_blanks(i + 1, false), false);
    if (body.empty()) return;
    const bool may_name_a_header = body.find_first_of("<\"") != std::string::npos ||
                                   std::all_of(body.begin(), body.end(), [](char c) {
                                     return wide_ident_char(c) || c == '/' || c == '.' ||
                                            c == '-' || c == ' ' || c == '(' || c == ')' ||
                                            c == ',' || c == '#';
                                   });
    if (!may_name_a_header) return;
    function_definitions_.push_back({{std::string(t_.substr(name_start, open - name_start)),
                                      std::move(parameters), std::move(body), 0},
                                     original(at)});
  }

  // "__has_" at `at`: __has_include, __has_include_next or __has_embed as a whole identifier.
  void has_operator(std::size_t at) {
    if (at > 0 && ascii_ident_char(t_[at - 1])) return;
    std::size_t end = at;
    while (end < t_.size() && ascii_ident_char(t_[end])) ++end;
    const std::string_view word = t_.substr(at, end - at);
    include_kind kind;
    if (word == "__has_include") {
      kind = include_kind::has_include;
    } else if (word == "__has_include_next") {
      kind = include_kind::has_include_next;
    } else if (word == "__has_embed") {
      kind = include_kind::has_embed;
    } else {
      return;
    }
    const std::size_t open = skip_blanks(end, true);
    if (open >= t_.size() || t_[open] != '(') {
      add(kind, include_form::computed, {}, at);  // e.g. #ifdef __has_include
      return;
    }
    operand(kind, skip_blanks(open + 1, true), at, true);
  }

  std::string_view t_;
  const spliced_text* map_;
  std::vector<found_reference>& references_;
  std::vector<found_definition>& definitions_;
  std::vector<found_function_definition>& function_definitions_;
  std::size_t cached_from_ = 1;  // comment_end's last answer (none yet: an empty range)
  std::size_t cached_close_ = 0;
  std::size_t cached_end_ = 0;
};

// Physical lines for offsets in increasing order.
class line_counter {
 public:
  explicit line_counter(std::string_view text) : text_(text) {}
  std::uint32_t at(std::size_t offset) {
    offset = std::min(offset, text_.size());
    if (offset < position_) {
      position_ = 0;
      line_ = 1;
    }
    line_ += count_newlines(text_.data() + position_, offset - position_);
    position_ = offset;
    return static_cast<std::uint32_t>(std::min<std::size_t>(line_, UINT32_MAX));
  }

 private:
  std::string_view text_;
  std::size_t position_ = 0;
  std::size_t line_ = 1;
};

// Duplicates are the same reference on the same line (both readings found it). The same header
// named on two lines is two references: each may sit in its own #if group.
std::string dedup_key(const include_reference& r) {
  std::string key;
  key.reserve(r.name.size() + 6);
  key += static_cast<char>(r.kind);
  key += static_cast<char>(r.form);
  key.append(reinterpret_cast<const char*>(&r.line), sizeof r.line);
  key += r.name;
  return key;
}

}  // namespace

include_scan scan_includes(std::string_view text) {
  std::vector<found_reference> references;
  std::vector<found_definition> definitions;
  std::vector<found_function_definition> function_definitions;
  splice_kinds splices;
  // Most texts have no splice: they are scanned as they are, with no copy.
  const std::size_t stopped =
      scanner(text, nullptr, references, definitions, function_definitions).run(true, splices);
  bool merged = false;
  if (splices.strict) {
    references.clear();
    definitions.clear();
    function_definitions.clear();
    find_splices(text, stopped, splices);
    const spliced_text strict = splice(text, false);
    splice_kinds ignored;
    scanner(strict.text, &strict, references, definitions, function_definitions)
        .run(false, ignored);
  }
  if (splices.lenient) {
    const spliced_text lenient = splice(text, true);
    splice_kinds ignored;
    scanner(lenient.text, &lenient, references, definitions, function_definitions)
        .run(false, ignored);
    merged = true;
  }
  if (merged) {
    const auto by_offset = [](const auto& x, const auto& y) { return x.offset < y.offset; };
    std::stable_sort(references.begin(), references.end(), by_offset);
    std::stable_sort(definitions.begin(), definitions.end(), by_offset);
    // The same definition seen in both readings.
    definitions.erase(std::unique(definitions.begin(), definitions.end(),
                                  [](const found_definition& x, const found_definition& y) {
                                    return x.offset == y.offset &&
                                           x.definition.name == y.definition.name &&
                                           x.definition.body == y.definition.body;
                                  }),
                      definitions.end());
    std::stable_sort(function_definitions.begin(), function_definitions.end(), by_offset);
    function_definitions.erase(
        std::unique(function_definitions.begin(), function_definitions.end(),
                    [](const found_function_definition& x, const found_function_definition& y) {
                      return x.offset == y.offset && x.definition == y.definition;
                    }),
        function_definitions.end());
  }

  include_scan out;
  line_counter lines(text);
  out.references.reserve(references.size());
  constexpr std::size_t kLinearDedup = 32;  // few references: compare, no hashing
  std::unordered_set<std::string> seen;
  for (auto& found : references) {
    include_reference& r = found.reference;
    r.line = lines.at(found.offset);
    if (out.references.size() < kLinearDedup) {
      const bool duplicate =
          std::any_of(out.references.begin(), out.references.end(), [&](const auto& o) {
            return o.kind == r.kind && o.form == r.form && o.line == r.line && o.name == r.name;
          });
      if (duplicate) continue;
      out.references.push_back(std::move(r));
      if (out.references.size() == kLinearDedup) {
        for (const auto& o : out.references) seen.insert(dedup_key(o));
      }
    } else if (seen.insert(dedup_key(r)).second) {
      out.references.push_back(std::move(r));
    }
  }
  line_counter definition_lines(text);
  out.definitions.reserve(definitions.size());
  for (auto& found : definitions) {
    found.definition.line = definition_lines.at(found.offset);
    out.definitions.push_back(std::move(found.definition));
  }
  line_counter function_lines(text);
  out.function_definitions.reserve(function_definitions.size());
  for (auto& found : function_definitions) {
    found.definition.line = function_lines.at(found.offset);
    out.function_definitions.push_back(std::move(found.definition));
  }
  return out;
}

bool may_reference_files(std::string_view text) noexcept {
  const char* p = text.data();
  const std::size_t n = text.size();
  for (std::size_t i = next_candidate(p, n, 0); i < n; i = next_candidate(p, n, i + 1)) {
    switch (p[i]) {
      case '#':
        return true;
      case '%':
        if (i + 1 < n && p[i + 1] == ':') return true;
        break;
      case '?':
        if (starts_with(text, i, "?\?=") || splice_length(text, i, true) != 0) return true;
        break;
      case '_':
        if (starts_with(text, i, "__has_")) return true;
        break;
      case '\\':
        if (splice_length(text, i, true) != 0) return true;
        break;
      default:
        break;
    }
  }
  return false;
}

}  // namespace cucore::detail
