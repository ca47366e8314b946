// --cache SPEC: which program cache a command uses. One spelling for every command, with the
// library's meaning (cucore::open_program_cache) and the tool's checks around it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "command_line.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/open.hpp"
#include "cucore/cache/program_cache.hpp"

namespace cucore::cli {

inline constexpr option_spec cache_option{
    "--cache", "", "SPEC",
    "DIR, dir:DIR, sqlite:FILE, memory, none, redis://URL, http(s)://URL, pack:FILE, ro:DIR, "
    "or LOCAL+LAYER+...+URL (default: see above)"};

// --shared-cache: trust a cache shared with other users (cucore::cache_access::shared).
inline constexpr option_spec shared_cache_option{
    "--shared-cache", "", "",
    "trust a cache other users (a group) can write too; also CUCORE_CACHE_SHARED=1"};

// The sentences every command with --cache prints about it: a macro, so that the commands'
// descriptions (string literals) can include it.
#define CUCORE_CLI_CACHE_SPEC_HELP                                                                 \
  "--cache DIR (or dir:DIR) uses the directory cache at DIR, sqlite:FILE the SQLite cache in\n"    \
  "FILE, memory an in-process one (empty in every run of the tool), none no cache,\n"              \
  "redis://[user:password@]host:port/db a Redis server, http(s)://host/path a WebDAV or other\n"   \
  "HTTP server (docs/cache-http.md), and LOCAL+redis://... or LOCAL+http(s)://... the cache\n"     \
  "LOCAL names in front of such a server (docs/cache-remote.md). pack:FILE reads a pack, ro:DIR\n" \
  "a directory read-only, and LOCAL+LAYER+...+URL puts read-only layers (ro:DIR, pack:FILE,\n"     \
  "ro:redis://..., ro:http(s)://...) between LOCAL and the server (docs/cache-layers.md).\n"       \
  "Schemes and words may be in any case; any other WORD: is refused (a directory named so is\n"    \
  "./NAME or dir:NAME). The default is the directory cache at $CUCORE_CACHE_DIR, else\n"           \
  "$XDG_CACHE_HOME/cucore, else ~/.cache/cucore; with $CUCORE_REMOTE_CACHE set to a redis:// or\n" \
  "http(s):// URL, that server is the default cache's remote tier. A cache must be yours and\n"    \
  "writable by no one else unless --shared-cache (or CUCORE_CACHE_SHARED=1) says you trust the\n"  \
  "users who can write it (docs/cache-directory.md)."

// The spec given with --cache, or "" (the default cache) without it. A spec that names no cache
// (cucore::parse_cache_spec refuses it: "bogus://x", "redis:/host", "sqlite:"), or without
// --cache a malformed $CUCORE_REMOTE_CACHE, is a usage error.
std::string cache_spec_from(const arguments& args);
// What `spec` names; a usage error as cache_spec_from says.
cache_spec parsed_cache_spec(std::string_view spec);
bool is_no_cache(std::string_view spec);      // "none", "off" (any case)
bool is_memory_cache(std::string_view spec);  // "memory" (any case)

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
