// Text helpers the rooms share.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace cucore::detail {

// `text` in lower case, byte by byte (std::tolower): for words, schemes and names matched in any
// case.
inline std::string lower_case(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace cucore::detail
