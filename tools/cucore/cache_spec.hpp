// --cache SPEC: which program cache a command uses. One spelling for every command, with the
// library's meaning (cucore::open_program_cache) and the tool's checks around it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "command_line.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/program_cache.hpp"

namespace cucore::cli {

inline constexpr option_spec cache_option{
    "--cache", "", "SPEC",
    "DIR, dir:DIR, sqlite:FILE, memory, none, redis://URL or LOCAL+redis://URL (default: see "
    "above)"};

// --shared-cache: trust a cache shared with other users (cucore::cache_access::shared).
inline constexpr option_spec shared_cache_option{
    "--shared-cache", "", "",
    "trust a cache other users (a group) can write too; also CUCORE_CACHE_SHARED=1"};

// The sentences every command with --cache prints about it: a macro, so that the commands'
// descriptions (string literals) can include it.
#define CUCORE_CLI_CACHE_SPEC_HELP                                                                \
  "--cache DIR (or dir:DIR) uses the directory cache at DIR, sqlite:FILE the SQLite cache in\n"   \
  "FILE, memory an in-process one (empty in every run of the tool), none no cache,\n"             \
  "redis://[user:password@]host:port/db a Redis server, and LOCAL+redis://... the cache LOCAL\n"  \
  "names in front of a Redis server (docs/cache-remote.md). The default is the directory cache\n" \
  "at $CUCORE_CACHE_DIR, else $XDG_CACHE_HOME/cucore, else ~/.cache/cucore; with\n"               \
  "$CUCORE_REMOTE_CACHE set to a redis:// URL, that server is the default cache's remote tier.\n" \
  "A cache must be yours and writable by no one else unless --shared-cache (or\n"                 \
  "CUCORE_CACHE_SHARED=1) says you trust the users who can write it (docs/cache-directory.md)."

// The spec given with --cache, or "" (the default cache) without it. A spec that names nothing
// ("sqlite:", "dir:") is a usage error.
std::string cache_spec_from(const arguments& args);
bool is_no_cache(std::string_view spec);      // "none", "off"
bool is_memory_cache(std::string_view spec);  // "memory"

// Opens the cache `spec` names (nullptr for none), shared when args has --shared-cache; throws
// what the backend throws. `statistics` false: without persistent statistics (a command that
// only looks at entries); unset: the library's default.
std::unique_ptr<program_cache> open_cache(std::string_view spec, const arguments& args,
                                          std::optional<bool> statistics = std::nullopt);

// The compiler identities to derive `cache`'s keys with: the ones remembered beside a persistent
// cache (so that a hit loads no compiler library), else the installed libraries'. The same answers
// program::compile(..., cache) uses, so a key derived here is the key it derives.
const compiler_probes& probes_for(const program_cache& cache);

}  // namespace cucore::cli
