#include "dropin/support.hpp"

#include "dropin/run_environment.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include "common/environment.hpp"
#include "cucore/cache/open.hpp"
#include "observe/compiler_variables.hpp"

namespace cucore::dropin {
namespace {

int log_threshold() {
  static const int threshold = log_threshold_from_environment();
  return threshold;
}

void print(log_level level, std::string_view message) noexcept {
  const char* prefix = level == log_level::error     ? "error"
                       : level == log_level::warning ? "warning"
                       : level == log_level::info    ? "info"
                                                     : "debug";
  std::fprintf(stderr, "cucore[%d]: %s: %.*s\n", static_cast<int>(::getpid()), prefix,
               static_cast<int>(message.size()), message.data());
}

}  // namespace

bool log_enabled(log_level level) noexcept {
  return static_cast<int>(level) >= log_threshold();
}

void note(log_level level, std::string_view message) noexcept {
  if (log_enabled(level)) print(level, message);
}

void install_log_handler() noexcept {
  static std::once_flag once;
  try {
    std::call_once(once, [] {
      set_log_handler([](log_level level, std::string_view message) { note(level, message); });
    });
  } catch (...) {
  }
}

void report_once(std::string_view what, std::string_view message) noexcept {
  static std::mutex mutex;
  static std::set<std::string, std::less<>>* reported = new std::set<std::string, std::less<>>;
  try {
    std::lock_guard lock(mutex);
    if (!reported->emplace(what).second) return;
    print(log_level::error, message);
  } catch (...) {
  }
}

program_cache* process_cache() noexcept {
  // Leaked on purpose: programs may compile from static destructors and other threads at exit.
  static program_cache* cache = []() -> program_cache* {
    install_log_handler();
    const std::string spec(env::text(env::variable::run_cache).value_or(""));
    if (spec == "none" || spec == "off") {
      note(log_level::info, "CUCORE_RUN_CACHE=" + spec + ": every compile goes to the library");
      return nullptr;
    }
    try {
      // No fsync unless CUCORE_CACHE_FSYNC asks: a power loss costs a later miss, never a wrong
      // entry (each is checksummed), and a miss then costs the program little more than NVRTC.
      open_cache_options options;
      if (!env::text(env::variable::cache_fsync)) options.fsync = false;
      auto opened = open_program_cache(spec, options);
      if (!opened) return nullptr;
      note(log_level::debug, "cache: " + opened->description());
      return opened.release();
    } catch (const std::exception& e) {
      note(log_level::warning,
           std::string("cannot open the program cache (every compile goes to the library): ") +
               e.what());
    } catch (...) {
    }
    return nullptr;
  }();
  return cache;
}

detail::sha256_digest finish_digest_key(record_writer& key, record_writer inputs) {
  const auto environment = detail::keyed_environment();
  key.number(static_cast<std::int64_t>(environment.size()));
  for (const auto& variable : environment) key.bytes(variable);
  key.bytes(inputs.take());
  const auto bytes = key.take();
  return detail::sha256(std::span<const std::byte>(bytes));
}

void record_skip(cache_skip_reason reason) noexcept {
  try {
    if (auto* cache = process_cache()) {
      if (auto stats = cache->statistics()) stats->record_skip(reason);
    }
  } catch (...) {
  }
}

std::optional<std::string> find_real_library_or_report(toolkit::library lib, int major,
                                                       const real_library_names& names,
                                                       const void* self) {
  std::vector<std::string> searched;
  auto path = find_real_library(dropin_spec(lib, major), names.override_variable, self, searched,
                                wheel_dirs(lib, major));
  if (!path) {
    std::string list;
    for (const auto& s : searched) list += "\n  " + s;
    report_once(names.label, std::string("cucore run: no real ") + names.file +
                                 " to forward to (set " +
                                 std::string(env::name(names.override_variable)) + "=/path/to/" +
                                 names.path_example + ", or CUDA_HOME); looked at:" + list);
  }
  return path;
}

std::string current_directory() {
  std::string buffer(4096, '\0');
  while (::getcwd(buffer.data(), buffer.size()) == nullptr) {
    if (errno != ERANGE || buffer.size() > (1u << 20)) return "?";
    buffer.resize(buffer.size() * 2);
  }
  buffer.resize(std::char_traits<char>::length(buffer.c_str()));
  return buffer;
}

}  // namespace cucore::dropin
