// The characters and tokens of preprocessor text as NVRTC reads them: what the reading of a
// header's conditional structure (conditional_scan.cpp), the evaluation of its conditions
// (condition_evaluation.cpp) and the include walk share. Include only from cucore's sources.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace cucore::detail::pp {

// As NVRTC reads identifiers (measured: `a$b` and `aé` are "unrecognized token"s): '$' and bytes
// >= 0x80 end an identifier, so `$R"(` and `éR"(` open a raw string.
inline bool ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
inline bool ident_char(char c) {
  return ident_start(c) || (c >= '0' && c <= '9');
}
inline bool digit(char c) {
  return c >= '0' && c <= '9';
}
inline bool hspace(char c) {
  return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\0';
}

// A token of an #if condition.
struct token {
  enum kind_t : std::uint8_t { number, identifier, punct, other, end } kind = end;
  std::string_view text;  // into the condition, or a literal
};

// The tokens of a condition's operand, the last one `end`. C++'s alternative tokens ("and",
// "bitor", ...) are read as their operators; `ok` is set false for what this reading does not
// model (and_eq, or_eq, xor_eq).
std::vector<token> tokenize(std::string_view e, bool& ok);

}  // namespace cucore::detail::pp
