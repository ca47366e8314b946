// The subcommands of the cucore tool.
//
// Adding one ("cucore frob"): write frob_command.cpp defining `const command frob_command{...}`,
// declare it below, list it in `all_commands` in main.cpp and add the file to CMakeLists.txt.
// main() parses the command line against the command's options, answers --help from them, and
// turns exceptions into messages and exit statuses, so a command only does its work.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "command_line.hpp"

namespace cucore::cli {

// Exit statuses of the tool.
inline constexpr int exit_success = 0;
inline constexpr int exit_failure = 1;  // compilation failed, or a CUDA library/toolkit error
inline constexpr int exit_usage = 2;    // the command line is wrong

struct command {
  std::string_view name;         // "compile"
  std::string_view synopsis;     // what follows "cucore": "compile FILE [options]"
  std::string_view summary;      // one line for `cucore --help`
  std::string_view description;  // the paragraph(s) `cucore NAME --help` prints before options
  std::span<const option_spec> options;
  // Does the work and returns the exit status. Throws usage_error for a command line it cannot
  // use and cucore::error for failures; main() reports both.
  int (*run)(const arguments& args);
  // For a command with subcommands ("cucore cache ls --help"): the help text for the parsed line,
  // or nullopt for the command's own usage. nullptr: always the command's own usage.
  std::optional<std::string> (*help)(const arguments& args) = nullptr;
  // For a command that runs another program ("cucore run [options] -- PROGRAM ARGS..."): called
  // instead of `run` when the line has "--", with the options before it parsed and everything
  // after it as given. nullptr: "--" is the parser's (everything after it is positional).
  int (*run_program)(const arguments& args, std::span<const std::string> program) = nullptr;
};

extern const command compile_command;
extern const command key_command;
extern const command cache_command;
extern const command info_command;
extern const command run_command;
extern const command env_command;
extern const command server_command;

}  // namespace cucore::cli
