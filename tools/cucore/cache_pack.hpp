// cucore cache export / import: a cache's entries to and from one pack file
// (cucore/cache/pack.hpp; docs/cache-packs.md). The subcommand table in cache_command.cpp
// describes their output.
#pragma once

#include "command_line.hpp"

namespace cucore::cli {

inline constexpr option_spec all_option{"--all", "", "", "export: every entry (the default)"};
inline constexpr option_spec since_option{
    "--since", "", "TIME",
    "export: entries used since TIME (2025-01-31, 2025-01-31T12:00:00Z, or 7d, 12h, 30m ago)"};
inline constexpr option_spec match_option{
    "--match", "", "PROGRAM", "export: entries whose program name matches PROGRAM (a glob)"};
inline constexpr option_spec quiet_option{"--quiet", "-q", "", "export, import: no progress bar"};
inline constexpr option_spec check_option{"--check", "", "",
                                          "import: verify the pack and add nothing"};

// cucore cache export [--all | KEYHEX... | --since TIME | --match PROGRAM] -o PACK.
int pack_export(const arguments& args);
// cucore cache import [--check] PACK.
int pack_import(const arguments& args);

}  // namespace cucore::cli
