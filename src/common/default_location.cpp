#include <pwd.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/default_location.hpp"
#include "common/environment.hpp"
#include "cucore/error.hpp"
#include "cucore/locations.hpp"

namespace cucore {

namespace {

// $CUCORE_CACHE_DIR is a directory path. One that starts like a scheme (WORD:, as cache specs
// read it: docs/cache-specs.md) is a spec put in the wrong variable (redis://host would otherwise
// become the local directory "redis:/host"): refused, naming the variables that take specs.
void check_cache_dir_variable(std::string_view dir) {
  if (dir.empty() || !std::isalpha(static_cast<unsigned char>(dir[0]))) return;
  std::size_t i = 1;
  while (i < dir.size() && (std::isalnum(static_cast<unsigned char>(dir[i])) || dir[i] == '+' ||
                            dir[i] == '-' || dir[i] == '.')) {
    ++i;
  }
  if (i == dir.size() || dir[i] != ':') return;
  throw cache_spec_error(
      "CUCORE_CACHE_DIR", std::string(dir),
      "this variable is a directory path, and \"" + std::string(dir.substr(0, i + 1)) +
          "\" reads as a cache scheme: put a Redis URL in $CUCORE_REMOTE_CACHE, pass other "
          "caches as --cache SPEC (open_program_cache), and write a directory whose name starts "
          "so as ./NAME or an absolute path");
}

}  // namespace

namespace detail {

default_cache_location find_default_cache_location() {
  if (const auto dir = env::text(env::variable::cache_dir)) {
    check_cache_dir_variable(*dir);
    return {*dir, "$CUCORE_CACHE_DIR"};
  }
  const auto nonempty = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (const char* xdg = nonempty("XDG_CACHE_HOME")) {
    return {std::filesystem::path(xdg) / "cucore", "$XDG_CACHE_HOME/cucore"};
  }
  if (const char* home = nonempty("HOME")) {
    return {std::filesystem::path(home) / ".cache" / "cucore", "~/.cache/cucore"};
  }
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_dir != nullptr) {
    return {std::filesystem::path(pw->pw_dir) / ".cache" / "cucore", "~/.cache/cucore"};
  }
  return {std::filesystem::temp_directory_path() / ("cucore-cache-" + std::to_string(::getuid())),
          "the temporary directory"};
}

}  // namespace detail

std::filesystem::path default_cache_dir() {
  return detail::find_default_cache_location().path;
}

}  // namespace cucore
