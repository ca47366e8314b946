#include <pwd.h>
#include <unistd.h>

#include <cstdlib>

#include "cucore/cache/program_cache.hpp"

namespace cucore {

std::filesystem::path default_cache_dir() {
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (const char* dir = env("CUCORE_CACHE_DIR")) return dir;
  if (const char* xdg = env("XDG_CACHE_HOME")) return std::filesystem::path(xdg) / "cucore";
  if (const char* home = env("HOME")) return std::filesystem::path(home) / ".cache" / "cucore";
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_dir != nullptr) {
    return std::filesystem::path(pw->pw_dir) / ".cache" / "cucore";
  }
  return std::filesystem::temp_directory_path() / ("cucore-cache-" + std::to_string(::getuid()));
}

}  // namespace cucore
