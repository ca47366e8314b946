// What NVRTC's log says about precompiled headers: automatic PCH keeps a compile only where its
// log is the one a plain compile writes.
#include "pch/pch_log.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "common/text.hpp"

namespace cucore::detail {

// Lines NVRTC writes because the caller asked for PCH messages (pch_messages=true): not
// diagnostics of the headers.
bool pch_message_line(std::string_view line) {
  return line.find("\": creating precompiled header file \"") != std::string_view::npos ||
         line.find("\": using precompiled header file \"") != std::string_view::npos;
}

// A line of NVRTC's about precompiled headers that a plain compile would not write, other than the
// messages the caller asked for: warnings such as #639 "insufficient preallocated memory for
// generation of precompiled header file", #629/#630 (an image not matching), #20282 (an image of
// another heap), "could not create PCH file because ...".
std::string pch_diagnostic(std::string_view log) {
  while (!log.empty()) {
    const auto nl = log.find('\n');
    const std::string_view line = log.substr(0, nl);
    log = nl == std::string_view::npos ? std::string_view() : log.substr(nl + 1);
    if (pch_message_line(line)) continue;
    if (line.find("precompiled header") != std::string_view::npos ||
        line.find("PCH") != std::string_view::npos) {
      return std::string(line);
    }
  }
  return {};
}

// Whether `log` holds nothing but PCH messages and blank lines.
bool quiet(std::string_view log) {
  while (!log.empty()) {
    const auto nl = log.find('\n');
    const std::string_view line = log.substr(0, nl);
    log = nl == std::string_view::npos ? std::string_view() : log.substr(nl + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    if (!pch_message_line(line)) return false;
  }
  return true;
}

// The first line of `log` that reports a catastrophic error (EDG's: compilation stops there).
std::string catastrophic_line(std::string_view log) {
  while (!log.empty()) {
    const auto nl = log.find('\n');
    const std::string_view line = log.substr(0, nl);
    log = nl == std::string_view::npos ? std::string_view() : log.substr(nl + 1);
    if (lower_case(line).find("catastrophic error") != std::string::npos) {
      return std::string(line);
    }
  }
  return {};
}

}  // namespace cucore::detail
