// The trust rules of the local persistent caches (directory and SQLite), in one place: which
// directories and files a cache accepts under a cache_access, the messages that say why one is
// refused and how to fix it, and the modes the cache creates things with. docs/cache-directory.md
// ("Trust model") is the user-facing statement of the same rules.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "cucore/cache/program_cache.hpp"

namespace cucore::detail::trust {

// Whether this process trusts `st` (an lstat/fstat of a cache directory or file) under `access`:
//   private_to_user: owned by the effective uid or root, and not group- or world-writable;
//   shared: not world-writable (any owner, group write allowed).
bool acceptable(const struct stat& st, cache_access access) noexcept;
// The same with the effective uid given (a cache remembers its opener's: no syscall per read).
bool acceptable(const struct stat& st, cache_access access, uid_t euid) noexcept;

// Empty when acceptable; else a sentence for an exception or a warning: `what` (e.g. "cache
// directory") and `path`, its mode, owner and group, why it is not trusted, and how to fix it
// (chmod/chown, or opt in to a shared cache when that would help).
std::string problem(const struct stat& st, cache_access access, std::string_view what,
                    const std::string& path);
// Throws invalid_argument with problem()'s sentence when `st` is not acceptable.
void require_acceptable(const struct stat& st, cache_access access, std::string_view what,
                        const std::string& path);

// The modes a cache creates its directories and files with.
struct create_modes {
  mode_t dir;          // directories
  mode_t private_dir;  // the directory cache's tmp/ (0700 in private mode)
  mode_t file;         // entry files, the SQLite database, lock files
  // True: set the modes exactly (fchmod after creating), overriding the process umask (a
  // configured umask, or shared mode). False: create with these modes and let the process umask
  // remove bits, as open() and mkdir() do.
  bool exact;
};
// Throws invalid_argument for a umask above 0777, and in shared mode for one that leaves world
// write access.
create_modes modes_for(cache_access access, std::optional<unsigned> umask);

// After mkdir() created `path`: sets its mode to modes.dir (or `mode`) exactly when modes.exact,
// keeping a set-group-ID bit inherited from the parent. Best effort (the error is returned).
std::error_code set_created_dir_mode(const std::string& path, mode_t mode,
                                     const create_modes& modes) noexcept;
// The same for a file this process just created, by descriptor.
std::error_code set_created_file_mode(int fd, const create_modes& modes) noexcept;

// "CUCORE_CACHE_SHARED=1, --shared-cache or shared = true in cucore.conf": how to opt in, for
// the messages of the layers above (one spelling everywhere).
inline constexpr std::string_view kHowToShare =
    "opt in to a shared cache (cucore --shared-cache, CUCORE_CACHE_SHARED=1, or "
    "cache_access::shared in the C++ options)";

}  // namespace cucore::detail::trust
