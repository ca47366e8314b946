#include "cucore/cache/open.hpp"

#include <cstdlib>
#include <string>

#include "cucore/cache/config.hpp"
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

// The user's own choice of trust: the caller's option, else the environment.
std::optional<bool> user_shared(const open_cache_options& options) {
  return options.shared ? options.shared : shared_cache_from_env();
}

// $CUCORE_CACHE_STATS: 0/false/no/off turns the persistent statistics off (1/true/yes/on or unset:
// on). Anything else is an invalid_argument naming the variable.
bool statistics_from_env() {
  const char* text = std::getenv("CUCORE_CACHE_STATS");
  if (text == nullptr || *text == '\0') return true;
  const std::string_view v(text);
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  throw invalid_argument("$CUCORE_CACHE_STATS is \"" + std::string(v) +
                         "\": use 1 (keep statistics, the default) or 0 (keep none)");
}

// The caller's choice, else the environment's.
bool statistics_for(const open_cache_options& options) {
  return options.statistics ? *options.statistics : statistics_from_env();
}

cache_access access_of(bool shared) {
  return shared ? cache_access::shared : cache_access::private_to_user;
}

// A directory cache with its settings: options, environment, cucore.conf, defaults (in that
// order of precedence).
std::unique_ptr<program_cache> open_directory(const std::filesystem::path& dir, bool is_default,
                                              const open_cache_options& options) {
  const std::optional<bool> chosen = user_shared(options);
  const cache_config config = read_cache_config(dir, access_of(chosen.value_or(false)));
  file_stream_cache_options o;
  o.access = access_of(chosen.value_or(config.shared.value_or(false)));
  o.umask = config.umask;
  o.statistics = statistics_for(options);
  std::optional<std::uint64_t> max_size = cache_max_size_from_env();
  if (!max_size) max_size = config.max_size;
  if (!max_size && is_default) max_size = default_cache_max_size;
  if (max_size && *max_size != 0) o.max_size_bytes = max_size;
  return std::make_unique<file_stream_program_cache>(dir, o);
}

// Every spec but the remote ones.
std::unique_ptr<program_cache> open_local(std::string_view spec,
                                          const open_cache_options& options) {
  if (spec.empty()) return open_directory(default_cache_dir(), /*is_default=*/true, options);
  if (spec == "none" || spec == "off") return nullptr;
  if (spec == "memory") return std::make_unique<in_memory_program_cache>();
  if (spec.rfind("sqlite:", 0) == 0) {
    auto file = spec.substr(7);
    if (file.empty()) {
      throw invalid_argument("cache spec \"sqlite:\" names no file: use sqlite:/path/to/cache.db");
    }
    sqlite_cache_options o;
    o.access = access_of(user_shared(options).value_or(false));
    o.statistics = statistics_for(options);
    return std::make_unique<sqlite_program_cache>(std::filesystem::path(file), o);
  }
  if (spec.rfind("dir:", 0) == 0) spec = spec.substr(4);
  if (spec.empty()) {
    throw invalid_argument("cache spec \"dir:\" names no directory: use dir:/path/to/cache");
  }
  return open_directory(std::filesystem::path(spec), /*is_default=*/false, options);
}

}  // namespace

std::unique_ptr<program_cache> open_program_cache(std::string_view spec) {
  return open_program_cache(spec, open_cache_options{});
}

std::unique_ptr<program_cache> open_program_cache(std::string_view spec,
                                                  const open_cache_options& options) {
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
    return std::make_unique<tiered_program_cache>(open_local(local_spec, options),
                                                  std::move(remote));
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
      return std::make_unique<tiered_program_cache>(open_local(spec, options),
                                                    std::move(remote_tier));
    }
  }
  return open_local(spec, options);
}

}  // namespace cucore
