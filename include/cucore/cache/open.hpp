// Opening a cache from a textual spec, as the command line and environment variables give it.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cucore/cache/program_cache.hpp"
#include "cucore/error.hpp"

namespace cucore {

// Specs (docs/cache-specs.md has the grammar in one table; docs/cache-remote.md the Redis URLs,
// docs/cache-http.md the HTTP ones):
//   ""              the directory cache at default_cache_dir(); with $CUCORE_REMOTE_CACHE set to a
//                   redis:// or http(s):// URL, that directory cache in front of that remote tier
//   "memory"        in_memory_program_cache
//   "sqlite:FILE"   sqlite_program_cache ("sqlite:///abs/k.db" is "sqlite:/abs/k.db")
//   "none", "off"   nullptr (no cache)
//   "redis://..."   redis_program_cache alone (see redis_url for the URL's syntax)
//   "http://...", "https://..."  http_program_cache alone (see http_url)
//   "LOCAL+redis://...", "LOCAL+http[s]://..."  tiered_program_cache: the cache LOCAL names (any
//                   spec above but none and a remote one; empty: the default directory) in front
//                   of the remote tier
//   "dir:DIR", DIR  file_stream_program_cache at that directory
//   "pack:FILE"     pack_program_cache: a pack file, read-only (docs/cache-packs.md)
//   "ro:DIR", "ro:dir:DIR"  that directory cache as a read-only layer: only read (alone, the
//                   compiles through it are never stored)
//   "LOCAL+LAYER+...[+REMOTE]"  read-only layers (docs/cache-layers.md) between the local tier and
//                   the remote one, looked up in the order written: LAYER is ro:DIR,
//                   ro:dir:DIR, pack:FILE, ro:redis://... or ro:http[s]://...; a hit in a layer
//                   is backfilled into the local tier; nothing is ever written to a layer. The
//                   writable remote tier, if any, comes last.
// Schemes (dir:, sqlite:, redis://, http://, https://) and the words memory, none and off are read
// in any case (RFC 3986). A spec that starts like a scheme, WORD: (a letter, then letters, digits,
// '+', '-' or
// '.'), and is none of these is refused: a directory whose name looks so is written ./NAME or
// dir:NAME.

// What a spec names, without opening anything.
struct cache_spec {
  enum class local_kind {
    none,               // "none", "off"; or a remote URL alone (remote set)
    default_directory,  // "" (default_cache_dir())
    directory,          // DIR, dir:DIR
    sqlite,             // sqlite:FILE
    memory,             // memory
    pack,               // pack:FILE (read-only)
  };
  local_kind local = local_kind::default_directory;
  std::filesystem::path
      path;  // the directory, the SQLite file or the pack (directory, sqlite, pack)
  bool local_read_only = false;  // ro:DIR: the local tier is a read-only layer (a pack always is)
  // A read-only layer after the local tier (docs/cache-layers.md).
  struct layer {
    enum class kind { directory, pack, remote };
    kind what = kind::directory;
    std::filesystem::path path;  // directory, pack
    std::string url;             // remote: its URL, the scheme in lower case
    std::string backend;         // remote: "redis" or "http"
  };
  std::vector<layer> layers;  // looked up after the local tier, in order, before `remote`
  // The remote tier's URL, its scheme in lower case: alone (local none) or behind the local tier.
  std::optional<std::string> remote;
  // Which remote tier `remote` names: "redis" or "http" (for https too); empty without one.
  std::string remote_backend;
  bool remote_from_environment = false;  // remote is $CUCORE_REMOTE_CACHE's
};

// Throws cache_spec_error for a spec that is none of the forms above (an unknown scheme, a known
// one misspelled such as "redis:/host" or "memory:", "sqlite:" naming no file, "sqlite://k.db"
// naming a host, "none+redis://...", a malformed Redis or HTTP URL) and, for the empty spec, for
// a $CUCORE_REMOTE_CACHE that is not a well-formed redis:// or http(s):// URL.
cache_spec parse_cache_spec(std::string_view spec);

// cache_spec_error (cucore/error.hpp): a spec that names no cache.

// Opens what parse_cache_spec(spec) names. Throws cache_spec_error (an invalid_argument) for what
// it refuses, and whatever the backend's constructor throws (including a cache the trust rules
// refuse: see cache_access).
//
// Settings of a directory cache (default or named): DIR/cucore.conf (cucore/cache/config.hpp),
// overridden by $CUCORE_CACHE_MAX_SIZE and $CUCORE_CACHE_SHARED, overridden by `options`. The
// default cache is capped at default_cache_max_size (5 GiB) unless one of those sets a size
// (0: no cap); a named directory has no cap unless one is set. A SQLite cache takes `shared`
// from `options` or $CUCORE_CACHE_SHARED. $CUCORE_CACHE_STATS=0 opens directory and SQLite caches
// without persistent statistics (cucore/cache/statistics.hpp; 1 or unset: with them; anything
// else is an invalid_argument).
struct open_cache_options {
  // Trust a cache shared with other users (cache_access::shared); unset: the environment, then
  // cucore.conf, then private.
  std::optional<bool> shared;
  // Keep persistent statistics (directory and SQLite caches); unset: $CUCORE_CACHE_STATS, else
  // on. Tools that only look at entries (`cucore cache show`, `export`) open with false, so that
  // looking does not count as a hit.
  std::optional<bool> statistics;
  // A directory cache fsyncs each entry and its directory (file_stream_cache_options::fsync);
  // unset: $CUCORE_CACHE_FSYNC (0/off: no), else yes. Off, a power loss may lose recent entries
  // (a later miss), never damage what a reader gets. The drop-ins of `cucore run` open with false
  // unless $CUCORE_CACHE_FSYNC says otherwise (a miss must cost little more than the compile).
  std::optional<bool> fsync;
};
std::unique_ptr<program_cache> open_program_cache(std::string_view spec,
                                                  const open_cache_options& options);
std::unique_ptr<program_cache> open_program_cache(std::string_view spec);

}  // namespace cucore
