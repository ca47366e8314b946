// Opening a cache from a textual spec, as the command line and environment variables give it.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "cucore/cache/program_cache.hpp"

namespace cucore {

// Specs (docs/cache-remote.md has the remote ones):
//   ""              the directory cache at default_cache_dir(); with $CUCORE_REMOTE_CACHE set to a
//                   redis:// URL, that directory cache in front of the Redis tier
//   "memory"        in_memory_program_cache
//   "sqlite:FILE"   sqlite_program_cache
//   "none", "off"   nullptr (no cache)
//   "redis://..."   redis_program_cache alone (see redis_url for the URL's syntax)
//   "LOCAL+redis://..."  tiered_program_cache: the cache LOCAL names (any spec above but none and
//                   a Redis one; empty: the default directory) in front of the Redis tier
//   "dir:DIR" or any other text: file_stream_program_cache at that directory.
// Throws invalid_argument for "sqlite:" without a file, a malformed Redis URL (in the spec or in
// $CUCORE_REMOTE_CACHE, which the message names), and whatever the backend's constructor throws
// (including a cache the trust rules refuse: see cache_access).
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
};
std::unique_ptr<program_cache> open_program_cache(std::string_view spec,
                                                  const open_cache_options& options);
std::unique_ptr<program_cache> open_program_cache(std::string_view spec);

}  // namespace cucore
