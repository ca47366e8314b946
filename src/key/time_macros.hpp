#pragma once
// The clock in a key (docs/cache-keys.md, "The clock, formed"): whether a unit's text names
// __TIME__, __DATE__ or __TIMESTAMP__, or can form them by pasting.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cucore::detail {

// Whether `text` holds __TIME__, __DATE__ or __TIMESTAMP__ as an identifier anywhere (comments,
// literals and groups never entered included: a superset of the uses that expand). Their
// expansion is the clock's, which no key names (docs/cache-keys.md, "What NVRTC's output depends
// on"). The toolkit's headers (CCCL, CUB, libcu++) mention none of them anywhere.
bool mentions_time_macros(std::string_view text);

// The identifier tokens of a text that could become __TIME__, __DATE__ or __TIMESTAMP__ (issue
// 39, "The clock, soundly"): only the paste operator (## or %:%:) makes a new identifier, and a
// pasted identifier is the concatenation of the spellings of whole tokens the translation unit
// lexed (in its files, in-memory headers and option values). So the name can be formed only if
// the unit has a paste operator and the name splits into >= 2 pieces, each an identifier token
// somewhere in the unit. A "piece" is a proper substring of one of the three names (119 strings);
// bit i of `pieces` says time_macro_piece(i) is an identifier token of the text.
struct time_tokens {
  bool literal = false;  // mentions_time_macros (UCN spellings of its letters decoded too)
  bool paste = false;    // ##, %:%: or a trigraph spelling of them
  std::array<std::uint64_t, 2> pieces{};
  void merge(const time_tokens& other) noexcept {
    literal = literal || other.literal;
    paste = paste || other.paste;
    pieces[0] |= other.pieces[0];
    pieces[1] |= other.pieces[1];
  }
  friend bool operator==(const time_tokens&, const time_tokens&) = default;
};

// The number of pieces and the i-th (shortest first, then alphabetical: a stable order that the
// digest memo and manifests record).
std::size_t time_macro_piece_count() noexcept;
std::string_view time_macro_piece(std::size_t i) noexcept;

// Scans `text` (a file, an in-memory header or one option string): comments are skipped (they
// are not tokens); string and character literals count as code (_Pragma destringizes); line
// splices are undone both strictly and leniently (both views are scanned); universal character
// names that spell a letter, digit or '_' (\u0054, \U00000054, \N{LATIN CAPITAL LETTER T}) are
// decoded. Every tokenisation NVRTC could make is covered: the pieces are a superset.
time_tokens scan_time_tokens(std::string_view text);

// `text` with line splices undone: a backslash (or, with trigraphs, ??/) then a newline; lenient
// also takes blanks between them (as GCC does, with a warning): a superset of NVRTC's splices.
std::string splice_lines(std::string_view text, bool lenient);

// Whether a unit with these tokens may expand the clock: a literal mention, or a paste operator
// and a split of one of the names into pieces present (docs/cache-keys.md, "The clock").
bool may_use_time_macros(const time_tokens& unit) noexcept;

}  // namespace cucore::detail
