#include "cucore/log.hpp"

#include <cstdio>
#include <mutex>
#include <string_view>

#include "common/environment.hpp"

namespace cucore {
namespace {

void print_to_stderr(log_level level, std::string_view message) {
  const char* prefix = level == log_level::error     ? "error"
                       : level == log_level::warning ? "warning"
                       : level == log_level::info    ? "info"
                                                     : "debug";
  // Debug lines (a miss's explanation, the compile server's choices) only with CUCORE_LOG=debug.
  static const bool debug = env::log_threshold() == log_level::debug;
  if (level == log_level::debug && !debug) return;
  std::fprintf(stderr, "cucore: %s: %.*s\n", prefix, static_cast<int>(message.size()),
               message.data());
}

struct log_state {
  std::mutex mutex;
  log_handler handler = print_to_stderr;
};

log_state& state() {
  static auto* s = new log_state;  // leaked: logging may happen during static destruction
  return *s;
}

}  // namespace

log_handler set_log_handler(log_handler handler) {
  std::lock_guard lock(state().mutex);
  std::swap(state().handler, handler);
  return handler;
}

void log(log_level level, std::string_view message) noexcept {
  try {
    log_handler handler;
    {
      std::lock_guard lock(state().mutex);
      handler = state().handler;
    }
    if (handler) handler(level, message);
  } catch (...) {
    // A failing log handler must not turn a degraded cache write into a crash.
  }
}

}  // namespace cucore
