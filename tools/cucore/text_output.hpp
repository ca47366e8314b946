// What the tool's commands print for people: counts with their nouns, numbers to one decimal, and
// a progress line rewritten in place on a terminal.
#pragma once

#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <iostream>
#include <string>
#include <string_view>
#include <system_error>

namespace cucore::cli {

// "1 entry", "3 entries".
inline std::string plural(std::uint64_t n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

// `value` to one decimal ("3.4"); empty if it does not fit.
inline std::string one_decimal(double value) {
  char buffer[32];
  auto [end, ec] =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed, 1);
  return std::string(buffer, ec == std::errc() ? end : buffer);
}

// A line on stderr rewritten in place by each show(): only on a terminal and when asked for
// (scripts and logs get nothing), and cleared at the end.
class status_line {
 public:
  explicit status_line(bool on) : on_(on && ::isatty(STDERR_FILENO) == 1) {}
  ~status_line() {
    if (shown_) std::cerr << "\r\033[K" << std::flush;
  }
  status_line(const status_line&) = delete;
  status_line& operator=(const status_line&) = delete;

  bool on() const { return on_; }
  bool shown() const { return shown_; }
  void show(std::string_view text) {
    std::cerr << "\r" << text << "\033[K" << std::flush;
    shown_ = true;
  }

 private:
  bool on_;
  bool shown_ = false;
};

}  // namespace cucore::cli
