// cucore cache stats: where the cache is, its entries and size, and the statistics it keeps in
// itself (cache_stats.cpp). The subcommand table in cache_command.cpp describes its output.
#pragma once

#include "command_line.hpp"
#include "cucore/cache/program_cache.hpp"

namespace cucore::cli {

inline constexpr option_spec zero_option{"--zero", "", "",
                                         "stats: reset the cache's persistent statistics to zero"};

// Prints the report (--json: one object), or with --zero resets the statistics; returns the exit
// status.
int print_stats(program_cache& cache, const arguments& args);

}  // namespace cucore::cli
