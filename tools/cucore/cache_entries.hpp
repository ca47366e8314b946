// cucore cache's subcommands that work on the entries of an open cache: ls, show, extract, verify,
// trim and clear (cache_entries.cpp), and the formatting their output shares with stats. The
// subcommand table in cache_command.cpp describes them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "command_line.hpp"
#include "cucore/cache/program_cache.hpp"

namespace cucore::cli {

inline constexpr option_spec max_size_option{
    "--max-size", "", "N", "trim: the size to trim to, in bytes; K, M, G, T: KiB, MiB, GiB, TiB"};

// Each prints its result (--json: as JSON) and returns the exit status.
int list_entries(program_cache& cache, const arguments& args);
int show_entry(program_cache& cache, const arguments& args);     // KEYHEX
int extract_entry(program_cache& cache, const arguments& args);  // KEYHEX -o FILE
int verify_entries(program_cache& cache, const arguments& args);
int trim_entries(program_cache& cache, const arguments& args);  // --max-size N
int clear_entries(program_cache& cache, const arguments& args);

// `text` with blanks after it (pad_left: before it) up to `width` characters.
std::string pad(std::string text, std::size_t width);
std::string pad_left(std::string text, std::size_t width);
// "12.3 MiB" for people; JSON gives the exact count.
std::string human_size(std::uint64_t bytes);
// ISO 8601 in UTC to the second ("2025-01-31T12:34:56Z"), or nullopt when the backend keeps none.
std::optional<std::string> iso_utc(
    const std::optional<std::chrono::system_clock::time_point>& when);

}  // namespace cucore::cli
