// The tool's --json output, with nlohmann::json: compact, one value per call of the tool, keys in
// the order written (ordered_json; the help texts and docs list them in that order).
#pragma once

#include <cmath>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace cucore::cli {

using json = nlohmann::ordered_json;

// `text`, or null when unset.
inline json or_null(const std::optional<std::string>& text) {
  return text ? json(*text) : json(nullptr);
}

// `value` rounded to `decimals` places (a time in ms to the µs, a rate to 4 digits), or null when
// it is not finite: JSON has neither NaN nor infinity.
inline json rounded(double value, int decimals) {
  if (!std::isfinite(value)) return nullptr;
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

// Prints `value` on one line of stdout. Invalid UTF-8 (a compiler log may quote Latin-1 source)
// becomes U+FFFD, so the output always parses; control characters are escaped (\u00XX).
inline void write_json(const json& value) {
  std::cout << value.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
}

}  // namespace cucore::cli
