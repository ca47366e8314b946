// Where NVRTC's automatic PCH may stop precompiling a program (src/program/pch_prefix.cpp).
#pragma once

#include <cstddef>
#include <string_view>

namespace cucore::detail {

// Where NVRTC may stop precompiling `code`: a conservative reading of NVRTC's "header stop" (the
// first token of the program outside a preprocessing directive). `end` is never before NVRTC's
// stop (so the prefix's include closure covers whatever an image of it holds): tokens inside
// #if groups do not end it (NVRTC skips the groups it does not enter), and anything unclear reads
// as more directives.
struct pch_prefix {
  std::size_t end = 0;       // code[0, end) is the prefix: whole lines, ending after a directive
  bool includes = false;     // an #include, #include_next or #import in the prefix
  bool line_marker = false;  // #line or "# N": NVRTC makes no PCH then
  bool balanced = true;      // false: an #endif without #if (the scan gives up: no prefix)
};
pch_prefix scan_pch_prefix(std::string_view code);

}  // namespace cucore::detail
