// cucore cache verify --recompile: every entry with a recipe compiled again and compared
// (cucore/cache/recompile.hpp; docs/verify-recompile.md).
#pragma once

#include "command_line.hpp"
#include "cucore/cache/program_cache.hpp"
#include "json_output.hpp"

namespace cucore::cli {

inline constexpr option_spec recompile_option{
    "--recompile", "", "",
    "verify: also compile each entry with a recipe again and compare (removes stale ones)"};

// Recompiles and compares `cache`'s entries (read through a second handle without statistics,
// so that reading counts no hits). Prints a line per stale entry and a summary unless --json;
// returns the "recompile" object of --json; `stale` says whether a mismatch was found.
json recompile_verify(program_cache& cache, const arguments& args, bool& stale);

}  // namespace cucore::cli
