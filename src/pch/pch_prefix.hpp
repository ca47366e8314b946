// Where NVRTC's automatic PCH may stop precompiling a program, and what of the program's name an
// image of it depends on (src/pch/pch_prefix.cpp).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "cucore/cache/key.hpp"
#include "cucore/program.hpp"

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

// What of a program's name an image depends on (measured against NVRTC 13.0, 13.5 and 12.9:
// docs/compile-server.md, "Images across program names").
//
// The name an image of `prefix` is keyed under, from what the prefix itself shows: `name` whole
// when the prefix names __FILE__ or __BASE_FILE__; else a fixed file name in `name`'s directory
// as spelled ("x/", "./", "") when the prefix may look beside the program (a quoted or computed
// #include, #include_next or __has_include: NVRTC uses an image made for another directory's
// "local.h" without looking, and __FILE__ spells the directory); else the fixed name alone.
std::string pch_program_name(std::string_view prefix, const std::string& name);

// Whether the whole name must key the image after all, once the prefix's key has walked its
// headers: __BASE_FILE__ may expand in the unit (the prefix, a file of the closure, an in-memory
// header or an option; named or formed by pasting, as the clock is: key/time_macros.hpp), or the
// output names the program in a way not measured to be shared (LTO-IR, Tile IR).
bool pch_needs_whole_name(std::string_view prefix, const program_cache_key& prefix_key,
                          const program_options& options, std::span<const std::string> flags,
                          code_type target);

}  // namespace cucore::detail
