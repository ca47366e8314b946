#pragma once
// CUCORE_TRACE=FILE (docs/trace.md): Chrome trace-event JSON of every key, lookup, compile,
// store, wait and server round trip, per process and thread, that Perfetto and chrome://tracing
// open. Processes append to one file: it is created holding "[" (a temporary file linked into
// place, so no event can come first), and each event is one write() of one line ending in ",",
// with O_APPEND (the array's closing "]" is optional in the format).

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cucore::detail {

// Whether CUCORE_TRACE names a file this process could open (read once).
bool tracing() noexcept;

// One complete event ("ph": "X") from construction to destruction, with string arguments. Costs
// a branch when not tracing.
class trace_span {
 public:
  trace_span(std::string_view category, std::string_view name) noexcept;
  ~trace_span();
  trace_span(const trace_span&) = delete;
  trace_span& operator=(const trace_span&) = delete;

  // An argument shown with the event ("program", "outcome", "key", ...); a later value of the
  // same key replaces the earlier one.
  void arg(std::string_view key, std::string_view value) noexcept;
  // Whether this span is written (CUCORE_TRACE set): guard arguments that cost to make.
  bool on() const noexcept { return on_; }

 private:
  bool on_ = false;
  std::int64_t start_us_ = 0;
  std::string category_, name_;
  std::vector<std::pair<std::string, std::string>> args_;
};

}  // namespace cucore::detail
