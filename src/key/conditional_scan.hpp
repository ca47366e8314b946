// The conditional structure of a header (#if / #ifdef / #ifndef / #elif / #else / #endif), read
// precisely, and the three-valued evaluation of a condition: what lets the include walk skip an
// #include that sits in a group the preprocessor can never enter.
//
// Soundness rests on two things. The structure is read as the preprocessor reads it (comments,
// string and character literals, raw strings, digit separators, strict line splices, %: digraphs);
// where the reading could differ from the compiler's (lenient splices, trigraphs, an unbalanced
// #if, a raw string with a splice) or between --std values (a raw string that C++03 reads
// otherwise, an apostrophe that may be a digit separator before a comment opener or quote) the
// file reports no structure at all, and nothing in it is skipped. And a condition is "false" only
// when it is false for every value the macros it names could have: a name counts as undefined only
// when nothing the compile reads defines it (the walk's fixpoint, include_tracking.cpp) and NVRTC
// does not predefine it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cucore::detail {

// One group of an #if chain: the lines of its body and what decides whether it is entered.
struct conditional_group {
  std::uint32_t first_line = 0;  // first physical line of the body (1-based)
  std::uint32_t last_line = 0;   // last physical line of the body (< first_line when empty)
  std::uint32_t chain = 0;       // the chain's id: the text order of its #if among all #ifs
  // "ifdef NAME", "ifndef NAME", "if EXPR", "elif EXPR", "elifdef NAME", "elifndef NAME", "else"
  // (EXPR with comments as one blank, whitespace collapsed).
  std::string condition;
  // The names the condition depends on (not reserved, sorted), and its value when none of them
  // is defined: the answer whenever the walk knows none of them can be (no evaluation then).
  std::vector<std::string> names;
  std::uint8_t when_undefined = 2;  // a truth
  friend bool operator==(const conditional_group&, const conditional_group&) = default;
};

struct conditional_structure {
  // false: the text could not be read with certainty; nothing in it may be skipped.
  bool known = false;
  // In text order (of their controlling directives). Only groups whose condition can ever be
  // decided: those on macros not reserved for the implementation, #if 0, #else after such.
  std::vector<conditional_group> groups;
  friend bool operator==(const conditional_structure&, const conditional_structure&) = default;
};

conditional_structure scan_conditionals(std::string_view text);

// Whether a name is reserved for the implementation (__x, _X): NVRTC may predefine it, so it
// always counts as possibly defined.
bool reserved_identifier(std::string_view name);

// Every identifier that follows the word "define" anywhere in `text` (comments, literals and
// skipped groups included, splices and blanks between them allowed): a superset of the macros
// the text can define. Sorted, unique.
std::vector<std::string> defined_names(std::string_view text);

enum class truth : std::uint8_t { is_false, is_true, unknown };

// The value of a condition ("if EXPR", "ifdef NAME", ...) when every name for which
// `may_be_defined` answers false is undefined and every other name may have any value or
// definition. unknown for anything not understood.
truth evaluate_condition(std::string_view condition,
                         const std::function<bool(std::string_view)>& may_be_defined);

// Whether line `line` of the text lies in a group that can never be entered, `groups` being the
// text's known structure. Chains are decided in order: a group is never entered when its own
// condition is false or an earlier group of its chain is certainly entered.
class conditional_pruner {
 public:
  conditional_pruner(const conditional_structure& structure,
                     const std::function<bool(std::string_view)>& may_be_defined);
  bool never_entered(std::uint32_t line) const;

 private:
  std::vector<std::pair<std::uint32_t, std::uint32_t>> dead_;  // body line ranges, inclusive
};

}  // namespace cucore::detail
