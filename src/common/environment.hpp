// The one reader of cucore's own environment variables (CUCORE_*): each is listed once, in the
// table of environment.cpp (docs/environment.md shows it), with its kind and what it is for, and
// read through the typed accessors below. Variables cucore reads because the CUDA libraries read
// them (CUDA_*, NVRTC_*, HOME, TMPDIR, observe/compiler_variables.hpp's table) are not cucore's
// settings: they are read where they are used.
//
// Nothing is cached: every call reads the environment as it is then (tests set variables during
// a process); a reader that decides once per process keeps the answer itself. Nothing allocates
// or throws either: the drop-in libraries read CUCORE_LOG while a program loads them. A value is
// a view into the environment, NUL-terminated and valid until that variable is set again (as
// getenv's pointer is).
// What a malformed value does (a default, a warning, an error) is the caller's: the accessors
// only say that it is malformed.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "cucore/log.hpp"

namespace cucore::env {

// Every CUCORE_* variable cucore reads, in the table's order.
enum class variable {
  log,                              // CUCORE_LOG
  trace,                            // CUCORE_TRACE
  cache_dir,                        // CUCORE_CACHE_DIR
  remote_cache,                     // CUCORE_REMOTE_CACHE
  cache_shared,                     // CUCORE_CACHE_SHARED
  cache_max_size,                   // CUCORE_CACHE_MAX_SIZE
  cache_stats,                      // CUCORE_CACHE_STATS
  cache_fsync,                      // CUCORE_CACHE_FSYNC
  cache_recipes,                    // CUCORE_CACHE_RECIPES
  http_bearer_token,                // CUCORE_HTTP_BEARER_TOKEN
  single_flight,                    // CUCORE_SINGLE_FLIGHT
  single_flight_wait,               // CUCORE_SINGLE_FLIGHT_WAIT
  sloppiness,                       // CUCORE_SLOPPINESS
  verify,                           // CUCORE_VERIFY
  verify_reports,                   // CUCORE_VERIFY_REPORTS
  compile_server,                   // CUCORE_COMPILE_SERVER
  server_dir,                       // CUCORE_SERVER_DIR
  server_program,                   // CUCORE_SERVER_PROGRAM
  server_timeout_ms,                // CUCORE_SERVER_TIMEOUT_MS
  server_workers,                   // CUCORE_SERVER_WORKERS
  server_idle_seconds,              // CUCORE_SERVER_IDLE_SECONDS
  server_worker_memory_mb,          // CUCORE_SERVER_WORKER_MEMORY_MB
  server_worker_compute_cache_off,  // CUCORE_SERVER_WORKER_COMPUTE_CACHE_OFF
  cuda_home,                        // CUCORE_CUDA_HOME
  cuda_home_only,                   // CUCORE_CUDA_HOME_ONLY
  cuda_search,                      // CUCORE_CUDA_SEARCH
  cuda_wheels,                      // CUCORE_CUDA_WHEELS
  run_cache,                        // CUCORE_RUN_CACHE
  run_libs,                         // CUCORE_RUN_LIBS
  run_ld_library_path,              // CUCORE_RUN_LD_LIBRARY_PATH
  run_nvrtc,                        // CUCORE_RUN_NVRTC
  run_nvrtc12,                      // CUCORE_RUN_NVRTC12
  run_nvjitlink,                    // CUCORE_RUN_NVJITLINK
  run_nvjitlink12,                  // CUCORE_RUN_NVJITLINK12
  run_nvvm,                         // CUCORE_RUN_NVVM
};

enum class kind {
  text,          // any text
  path,          // a file or directory
  path_list,     // ':'-separated directories
  word_list,     // words from a fixed set, separated as the variable's row says
  flag,          // on or off, spelled as the row's flag_words say
  number,        // a real number in the row's range
  whole_number,  // a whole number, 0 to 2^64-1
  size,          // a byte count with an optional K/M/G/T suffix (parse_cache_size)
  enumerated,    // one of the words the row lists
  cache_spec,    // a cache spec (docs/cache-specs.md) or a remote cache's URL
};

// How a flag is spelled. The readers grew apart; each row keeps what its reader accepted.
enum class flag_words {
  exact,             // 1/true/yes/on or 0/false/no/off, in lower case
  any_case,          // the same words in any case
  any_case_trimmed,  // the same words in any case, blanks around them ignored (as cucore.conf)
  one,               // "1" is on, any other value off; never malformed
};

struct variable_info {
  variable id;
  std::string_view name;  // a string literal: NUL-terminated
  kind type;
  flag_words words;         // flags only
  double min, max;          // numbers only
  std::string_view values;  // what it takes, for people
  std::string_view purpose;
};

// The table, in variable's order.
std::span<const variable_info> variables() noexcept;
const variable_info& info(variable v) noexcept;
std::string_view name(variable v) noexcept;
// The variable of that name (for a caller given a name); nullopt for a name not in the table.
std::optional<variable> variable_named(std::string_view name) noexcept;

// A typed value as set: nothing (unset or empty), a value, or malformed text.
template <class T>
struct reading {
  std::optional<T> value;  // set and well-formed
  std::string_view text;   // as set; empty when unset or empty

  bool is_set() const noexcept { return !text.empty(); }
  bool malformed() const noexcept { return is_set() && !value.has_value(); }
};

// The value; nullopt when unset or empty (an empty setting is no setting).
std::optional<std::string_view> text(variable v) noexcept;
// The value, empty included; nullopt only when unset (CUCORE_RUN_LD_LIBRARY_PATH="" is an empty
// path list, not the program's LD_LIBRARY_PATH).
std::optional<std::string_view> text_even_empty(variable v) noexcept;
// A flag, spelled as the variable's row says.
reading<bool> flag(variable v) noexcept;
// A real number (strtod's syntax, the whole text) in the row's range, bounds included.
reading<double> number(variable v) noexcept;
// A whole number (strtoull's base-10 syntax, the whole text, no leading '-'), up to 2^64-1.
reading<std::uint64_t> whole_number(variable v) noexcept;

// CUCORE_LOG as a threshold: nullopt for silence (unset, "", "0", "off", "none"); error; warning
// ("warning", "1" and any other value); info; debug.
std::optional<log_level> log_threshold() noexcept;

}  // namespace cucore::env
