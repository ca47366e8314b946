#include "cucore/cache/open.hpp"

#include <cstdlib>
#include <string>

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/error.hpp"

namespace cucore {
namespace {

constexpr std::string_view kRemoteSeparator = "+redis://";

std::unique_ptr<program_cache> open_redis(std::string_view url) {
  redis_cache_options options;
  options.url = std::string(url);
  return std::make_unique<redis_program_cache>(std::move(options));
}

// Every spec but the remote ones.
std::unique_ptr<program_cache> open_local(std::string_view spec) {
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

}  // namespace

std::unique_ptr<program_cache> open_program_cache(std::string_view spec) {
  if (spec.starts_with("redis://") || spec.starts_with("rediss://")) return open_redis(spec);
  // LOCAL+redis://...: the first "+redis://" splits, so LOCAL may not contain one (a password in
  // the URL may contain '+').
  if (const auto plus = spec.find(kRemoteSeparator); plus != std::string_view::npos) {
    const std::string_view local_spec = spec.substr(0, plus);
    if (local_spec == "none" || local_spec == "off") {
      throw invalid_argument("cache spec \"" + std::string(local_spec) +
                             "+redis://...\": a tiered cache needs a local tier; use redis://... "
                             "alone for the remote tier without one");
    }
    auto remote = open_redis(spec.substr(plus + 1));
    return std::make_unique<tiered_program_cache>(open_local(local_spec), std::move(remote));
  }
  if (spec.empty()) {
    const char* remote = std::getenv("CUCORE_REMOTE_CACHE");
    if (remote != nullptr && *remote != '\0') {
      std::unique_ptr<program_cache> remote_tier;
      try {
        remote_tier = open_redis(remote);
      } catch (const invalid_argument& e) {
        throw invalid_argument(std::string("$CUCORE_REMOTE_CACHE: ") + e.what());
      }
      return std::make_unique<tiered_program_cache>(open_local(spec), std::move(remote_tier));
    }
  }
  return open_local(spec);
}

}  // namespace cucore
