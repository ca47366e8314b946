#pragma once
// Macro text for include names: the pieces of function-like macro expansion the include walk
// needs to resolve #include MACRO(args) (arguments split, parameters substituted with # and ##,
// the header name read back).

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "key/include_scanner.hpp"

namespace cucore::detail {

// The arguments of a macro call whose '(' is at `open` in `text`: split at top-level commas,
// trimmed; `end` is set past the closing ')'. nullopt when the call is not closed.
std::optional<std::vector<std::string>> macro_call_arguments(const std::string& text,
                                                             std::size_t open, std::size_t& end);

// The body of `macro` with its parameters replaced by `args` (# stringizes, ## pastes); false
// when the call does not fit the parameter list.
bool substitute_macro_call(const function_macro_definition& macro,
                           const std::vector<std::string>& args, std::string& out);

// A header name from an expansion: "name" or <name> (blanks around trimmed, and blanks before
// the '>', which NVRTC drops: measured); nullopt otherwise.
std::optional<std::pair<include_form, std::string>> header_name_of(std::string text);

}  // namespace cucore::detail
