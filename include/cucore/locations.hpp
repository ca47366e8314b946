#pragma once
// Where cucore keeps its files.

#include <filesystem>

namespace cucore {

// The default location of the persistent caches: $CUCORE_CACHE_DIR, else $XDG_CACHE_HOME/cucore,
// else ~/.cache/cucore ($HOME, else the password database). Not created here. Throws
// cache_spec_error (cucore/error.hpp) for a $CUCORE_CACHE_DIR that reads as a cache spec.
std::filesystem::path default_cache_dir();

}  // namespace cucore
