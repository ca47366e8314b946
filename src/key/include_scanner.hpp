// Every reference from one file's text to another file that the preprocessor could follow:
// #include / #include_next / #import / #embed and __has_include / __has_include_next /
// __has_embed, regardless of #if: a conservative superset, each with its line, from which the
// walk decides which sit in #if groups that can never be entered (conditional_scan.hpp). NVRTC
// reports no dependencies, so the cache key rests on this.
//
// Missing a reference would give a stale cache hit; an extra one costs only a file read. So the
// scan is the union of two views: a comment-aware one (a directive may follow comments on its line,
// or a block comment that ends there) and a raw one that ignores comments and literals (every line
// whose first characters are a directive introducer, and every __has_* anywhere, even inside a
// comment or literal), so that no misreading of a literal can hide a directive. Line splices are
// applied first; backslash-space-newline and ??/-newline, which some compilers splice, add a
// second, leniently spliced view to the union.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cucore::detail {

enum class include_kind : std::uint8_t {
  include,
  include_next,
  import,
  embed,
  has_include,
  has_include_next,
  has_embed
};
enum class include_form : std::uint8_t { quoted, angle, computed };

struct include_reference {
  include_kind kind;
  include_form form;
  // quoted/angle: the characters between the delimiters exactly as written (after line splicing;
  // no escape processing). computed: the operand text (for __has_* the text between the
  // parentheses), comments replaced by one space, runs of whitespace collapsed to one space,
  // trimmed; may be empty.
  std::string name;
  std::uint32_t line;  // physical line (1-based) where the directive or the __has_* starts
  friend bool operator==(const include_reference&, const include_reference&) = default;
};

// An object-like #define that could name a header or alias a macro that does: its replacement list
// (comments -> one space, whitespace collapsed, trimmed) is not empty and begins with '"' or '<',
// or consists only of identifier characters, '/', '.', '-' and spaces. Function-like macros are
// never listed.
struct macro_definition {
  std::string name;
  std::string body;
  std::uint32_t line;
  friend bool operator==(const macro_definition&, const macro_definition&) = default;
};

// A function-like #define whose replacement list could form a header name once its parameters are
// replaced (CUTLASS: #define CUDA_STD_HEADER(header) <cccl/cuda/std/header>): the body holds '<'
// or '"', or only identifier characters, '/', '.', '-', blanks, parentheses, commas and '#'.
struct function_macro_definition {
  std::string name;
  std::vector<std::string> parameters;  // "..." for a variadic tail
  std::string body;                     // as macro_definition::body
  std::uint32_t line;
  friend bool operator==(const function_macro_definition&,
                         const function_macro_definition&) = default;
};

struct include_scan {
  // In text order; duplicates (same kind, form, name and line) removed.
  std::vector<include_reference> references;
  std::vector<macro_definition> definitions;                    // in text order
  std::vector<function_macro_definition> function_definitions;  // in text order
};

// Every reference the preprocessor could follow from `text`, regardless of #if/#ifdef (a
// superset). Any bytes are accepted.
include_scan scan_includes(std::string_view text);

// false only when `text` can hold no directive and no __has_*: it has no '#', no "%:", no "??=",
// no "__has_" and no line splice (which could form one of those). The fast path of keys for code
// without directives: one vectorised pass.
bool may_reference_files(std::string_view text) noexcept;

}  // namespace cucore::detail
