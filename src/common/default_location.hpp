#pragma once
// The default cache directory with where it came from, for a report of it (`cucore cache check`);
// cucore::default_cache_dir (cucore/locations.hpp) is its path.

#include <filesystem>
#include <string_view>

namespace cucore::detail {

struct default_cache_location {
  std::filesystem::path path;
  // Where it came from, for people: "$CUCORE_CACHE_DIR", "$XDG_CACHE_HOME/cucore",
  // "~/.cache/cucore" ($HOME or the password database), "the temporary directory".
  std::string_view source;
};

// As default_cache_dir: throws cache_spec_error for a $CUCORE_CACHE_DIR that reads as a cache spec.
default_cache_location find_default_cache_location();

}  // namespace cucore::detail
