// The cucore tool's command line: each command declares its options in a table (option_spec),
// parse() reads a command line against it with CLI11, and the usage text is written from the same
// table. The conventions the tool documents (README.md, "The command line"):
//   --opt VALUE, --opt=VALUE   long options; a value may itself start with '-' ("--ptxas-options
//                              -v"): an option that takes a value always takes the next argument
//   -I DIR, -IDIR              two-character short options; the value may be attached
//   -Xnvrtc OPT, -Xnvrtc=OPT   longer names with one dash, as nvcc's -Xptxas: like long options
//   --                         everything after it is positional
// Options may repeat; each occurrence is kept, in order. Anything unknown is a usage_error naming
// it.
#pragma once

#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cucore::cli {

// A command line the tool cannot make sense of. main() prints it with a hint to run --help and
// exits with status 2.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One option a command accepts. An entry with an empty `name` is a heading in the usage text.
struct option_spec {
  std::string_view name;        // canonical spelling, "--arch", "-I" or "-Xnvrtc"; what arguments
                                // looks up
  std::string_view alias;       // another spelling ("--include-path" for "-I"), or empty
  std::string_view value_name;  // "DIR" for an option that takes a value; empty for a flag
  std::string_view help;        // one line for the usage text
  bool takes_value() const noexcept { return !value_name.empty(); }
};

// Every command understands -h/--help; the parser adds it, so commands need not list it.
inline constexpr option_spec help_option{"--help", "-h", "", "print this help and exit"};

// A parsed command line: the positionals, and each option occurrence by canonical name.
class arguments {
 public:
  const std::vector<std::string>& positionals() const noexcept { return positionals_; }
  bool has(std::string_view name) const;
  // The value of the last occurrence (a repeated scalar option: the last one wins), if any.
  std::optional<std::string> last(std::string_view name) const;
  // The values of every occurrence, in command-line order.
  std::vector<std::string> all(std::string_view name) const;
  bool help() const { return has(help_option.name); }

 private:
  friend arguments parse(std::span<const std::string> args, std::span<const option_spec> specs);
  struct option_values {
    std::string_view name;            // the canonical spelling
    std::vector<std::string> values;  // one per occurrence, in order; "" for a flag
  };
  const option_values* find(std::string_view name) const;
  std::vector<std::string> positionals_;
  std::vector<option_values> options_;  // the options given, each once
};

arguments parse(std::span<const std::string> args, std::span<const option_spec> specs);

// Strict conversions of option values: the whole text must match, or a usage_error names the
// option ("--maxrregcount: \"12x\" is not an integer").
int parse_int(std::string_view option, std::string_view text);
// `yes`/`no` are the two accepted words ("true"/"false", "on"/"off").
bool parse_bool(std::string_view option, std::string_view text, std::string_view yes = "true",
                std::string_view no = "false");

// The "Options:" part of a usage text: one aligned line per option (a very long spelling has its
// text on the next line), headings as given, and -h/--help first.
std::string options_help(std::span<const option_spec> specs);

}  // namespace cucore::cli
