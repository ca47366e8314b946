// program_options::extra_nvrtc_options: the raw NVRTC options cucore passes, and the ones among
// them that no cache key can cover. compiler_flags() refuses the rest (options.cpp); the table of
// NVRTC's options (nvrtc_option_table.hpp) says what the cache does with each of the others.
#pragma once

#include <string>
#include <vector>

namespace cucore::detail {

// The elements of `options` that hand options to one of NVRTC's internal tools (-Xcudafe, -Xnvvm,
// -Xnvvm=..., and the element after a bare -Xcudafe / -Xnvvm, which is its value), in order. NVRTC
// gets them, but what they make the front end or the optimizer read or write is out of any key's
// sight: make_program_cache_key refuses a key when this is not empty.
std::vector<std::string> tool_passthrough_options(const std::vector<std::string>& options);

}  // namespace cucore::detail
