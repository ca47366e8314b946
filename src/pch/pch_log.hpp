// What NVRTC's log says about precompiled headers (src/pch/pch_log.cpp).
#pragma once

#include <string>
#include <string_view>

namespace cucore::detail {

// Lines NVRTC writes because the caller asked for PCH messages (pch_messages=true).
bool pch_message_line(std::string_view line);
// The first line about precompiled headers that a plain compile would not write, other than the
// messages the caller asked for ("" when none).
std::string pch_diagnostic(std::string_view log);
// Whether `log` holds nothing but PCH messages and blank lines.
bool quiet(std::string_view log);
// The first line of `log` that reports a catastrophic error ("" when none).
std::string catastrophic_line(std::string_view log);

}  // namespace cucore::detail
