// Persistent settings of a directory cache: <cache directory>/cucore.conf, and the environment
// variables that override it. docs/cache-directory.md, "Configuration", documents the file.
//
// The file holds "key = value" lines; blank lines and lines starting with '#' are ignored.
//   max_size = 5G     size cap: bytes, or with K, M, G, T (powers of 1024; "GiB" too); 0: none
//   shared = true     trust a cache shared with other users (cache_access::shared)
//   umask = 002       permission bits removed from what the cache creates (octal)
//   recipes = true    keep each entry's source and options for `cucore cache verify --recompile`
//                     ($CUCORE_CACHE_RECIPES overrides it; docs/verify-recompile.md)
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "cucore/cache/program_cache.hpp"

namespace cucore {

// The size cap of the default cache when neither cucore.conf nor $CUCORE_CACHE_MAX_SIZE sets one:
// 5 GiB, as ccache's default of 5 GB.
inline constexpr std::uint64_t default_cache_max_size = std::uint64_t{5} << 30;

inline constexpr std::string_view cache_config_file_name = "cucore.conf";

struct cache_config {
  std::optional<std::uint64_t> max_size;  // 0: explicitly no cap
  std::optional<bool> shared;
  std::optional<unsigned> umask;
  std::optional<bool> recipes;
};

// Reads DIR/cucore.conf; every setting unset when there is no such file. Throws
// invalid_argument naming the file and line for a malformed line, an unknown key or a bad value,
// and for a file the trust rules refuse under `access` (another user's, or writable by others:
// its max_size could empty the cache). `shared` is honoured only from a file owned by you (or
// root) that nobody else can write: the decision to trust others cannot come from them.
cache_config read_cache_config(const std::filesystem::path& dir,
                               cache_access access = cache_access::private_to_user);

// Sets `key` to `value` in DIR/cucore.conf (replacing its line, keeping the others and any
// comments), or removes it with nullopt; creates DIR and the file as needed (with the modes the
// cache would use under `access`). The value is checked first (invalid_argument for an unknown
// key or a bad value); the file is replaced atomically. cucore::error when it cannot be written.
void write_cache_config(const std::filesystem::path& dir, std::string_view key,
                        std::optional<std::string_view> value,
                        cache_access access = cache_access::private_to_user);

// "10G", "512M", "1048576", "0": bytes with an optional K, M, G or T suffix (powers of 1024; "KiB",
// "k", "B" accepted). Throws invalid_argument saying what is wrong with `text`.
std::uint64_t parse_cache_size(std::string_view text);
// The shortest exact spelling parse_cache_size reads back: "5G", "1536M", "1000".
std::string format_cache_size(std::uint64_t bytes);

// $CUCORE_CACHE_SHARED: 1/true/yes/on or 0/false/no/off; nullopt when unset or empty. Throws
// invalid_argument (naming the variable) for anything else.
std::optional<bool> shared_cache_from_env();
// $CUCORE_CACHE_MAX_SIZE as parse_cache_size reads it; nullopt when unset or empty.
std::optional<std::uint64_t> cache_max_size_from_env();

}  // namespace cucore
