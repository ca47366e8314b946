// cucore cache config: shows or changes the directory cache's cucore.conf (cache_config.cpp). The
// subcommand table in cache_command.cpp describes it.
#pragma once

#include "command_line.hpp"

namespace cucore::cli {

inline constexpr option_spec unset_option{"--unset", "", "", "config: remove KEY's setting"};

int configure_cache(const arguments& args);

}  // namespace cucore::cli
