// Opening a cache from a textual spec, as the command line and environment variables give it.
#pragma once

#include <memory>
#include <string_view>

#include "cucore/cache/program_cache.hpp"

namespace cucore {

// "memory" → in_memory_program_cache; "sqlite:FILE" → sqlite_program_cache; "none" or "off" →
// nullptr (no cache); "dir:DIR" or any other text → file_stream_program_cache at that directory.
// An empty spec opens the directory cache at default_cache_dir(). Throws invalid_argument for
// "sqlite:" without a file, and whatever the backend's constructor throws.
std::unique_ptr<program_cache> open_program_cache(std::string_view spec);

}  // namespace cucore
