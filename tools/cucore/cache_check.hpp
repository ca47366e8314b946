// cucore cache check: reports what is wrong with the cache --cache names (or the default one),
// without needing it to open. The subcommand table in cache_command.cpp describes its output.
#pragma once

#include "command_line.hpp"

namespace cucore::cli {

// Prints the findings (--json: one object) and returns 0 when nothing is wrong, 1 otherwise.
int cache_check(const arguments& args);

}  // namespace cucore::cli
