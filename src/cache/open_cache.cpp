#include "cucore/cache/open.hpp"

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/error.hpp"

namespace cucore {

std::unique_ptr<program_cache> open_program_cache(std::string_view spec) {
  if (spec.empty()) return std::make_unique<file_stream_program_cache>(default_cache_dir());
  if (spec == "none" || spec == "off") return nullptr;
  if (spec == "memory") return std::make_unique<in_memory_program_cache>();
  if (spec.rfind("sqlite:", 0) == 0) {
    auto file = spec.substr(7);
    if (file.empty()) {
      throw invalid_argument("cache spec \"sqlite:\" names no file: use sqlite:/path/to/cache.db");
    }
    return std::make_unique<sqlite_program_cache>(std::filesystem::path(file));
  }
  if (spec.rfind("dir:", 0) == 0) spec = spec.substr(4);
  if (spec.empty()) {
    throw invalid_argument("cache spec \"dir:\" names no directory: use dir:/path/to/cache");
  }
  return std::make_unique<file_stream_program_cache>(std::filesystem::path(spec));
}

}  // namespace cucore
