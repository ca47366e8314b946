// Where cucore's warnings go. Caches degrade some failures (a cache write that fails, a corrupt
// entry dropped) to warnings instead of errors; by default they are printed to stderr.
#pragma once

#include <functional>
#include <string_view>

namespace cucore {

enum class log_level { debug, info, warning, error };

using log_handler = std::function<void(log_level, std::string_view message)>;

// Replaces the handler (thread-safe); an empty handler silences cucore. Returns the old one.
log_handler set_log_handler(log_handler handler);

// Sends a message to the current handler. Never throws.
void log(log_level level, std::string_view message) noexcept;

}  // namespace cucore
