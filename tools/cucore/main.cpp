// cucore: the command-line face of the library. Dispatches to a subcommand and owns error
// reporting: no exception leaves main(), and every failure ends in a message and an exit status
// (0 success, 1 compilation or CUDA error, 2 bad command line).
#include <algorithm>
#include <array>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "commands.hpp"
#include "cucore/error.hpp"
#include "cucore/server.hpp"

#ifndef CUCORE_VERSION
#error "CUCORE_VERSION must be defined by the build (see tools/cucore/CMakeLists.txt)"
#endif

namespace cucore::cli {
namespace {

constexpr std::array all_commands = {&compile_command, &key_command, &cache_command, &info_command,
                                     &run_command,     &env_command, &server_command};

const command* find_command(std::string_view name) {
  for (const command* c : all_commands) {
    if (c->name == name) return c;
  }
  return nullptr;
}

std::string tool_usage() {
  std::string out =
      "Usage: cucore COMMAND [options]\n"
      "       cucore help [COMMAND] | --help | --version\n"
      "\n"
      "Run-time CUDA compilation from the command line: NVRTC, libNVVM and nvJitLink, opened at\n"
      "run time from the CUDA toolkit.\n"
      "\n"
      "Commands:\n";
  std::size_t width = 0;
  for (const command* c : all_commands) width = std::max(width, c->name.size());
  for (const command* c : all_commands) {
    out += "  " + std::string(c->name) + std::string(width + 2 - c->name.size(), ' ') +
           std::string(c->summary) + "\n";
  }
  out += "\nRun 'cucore COMMAND --help' for a command's options.\n";
  return out;
}

std::string command_usage(const command& c) {
  return "Usage: cucore " + std::string(c.synopsis) + "\n\n" + std::string(c.description) +
         "\n\nOptions:\n" + options_help(c.options);
}

// The help for a parsed command line: a subcommand's where the command has them.
std::string command_usage(const command& c, const arguments& parsed) {
  if (c.help != nullptr) {
    if (auto text = c.help(parsed)) return *text;
  }
  return command_usage(c);
}

// `cucore help`, `cucore help COMMAND`, `cucore help COMMAND SUBCOMMAND`.
int help(std::span<const std::string> args) {
  if (args.empty()) {
    std::cout << tool_usage();
    return exit_success;
  }
  const command* c = find_command(args[0]);
  if (c == nullptr) throw usage_error("unknown command \"" + args[0] + "\"");
  if (args.size() > (c->help != nullptr ? 2 : 1)) {
    throw usage_error(c->help != nullptr ? "help takes at most a COMMAND and its SUBCOMMAND"
                                         : "help takes at most one COMMAND");
  }
  std::cout << command_usage(*c, parse(args.subspan(1), c->options));
  return exit_success;
}

int dispatch(std::span<const std::string> args, const command*& current) {
  if (args.empty()) {
    std::cerr << tool_usage();
    return exit_usage;
  }
  const std::string& first = args[0];
  if (first == "--help" || first == "-h" || first == "help") return help(args.subspan(1));
  if (first == "--version") {
    std::cout << "cucore " CUCORE_VERSION "\n";
    return exit_success;
  }
  if (first.starts_with("-")) throw usage_error("unknown option \"" + first + "\"");
  current = find_command(first);
  if (current == nullptr) throw usage_error("unknown command \"" + first + "\"");

  std::span<const std::string> rest = args.subspan(1);
  std::span<const std::string> program;
  if (current->run_program != nullptr) {
    // Everything after the first "--" is the program's, never parsed here.
    const auto dashes = std::find(rest.begin(), rest.end(), "--");
    if (dashes != rest.end()) {
      program = rest.subspan(static_cast<std::size_t>(dashes - rest.begin()) + 1);
      rest = rest.first(static_cast<std::size_t>(dashes - rest.begin()));
      const arguments parsed = parse(rest, current->options);
      if (parsed.help()) {
        std::cout << command_usage(*current, parsed);
        return exit_success;
      }
      return current->run_program(parsed, program);
    }
  }
  const arguments parsed = parse(rest, current->options);
  // Answered before the command checks its arguments, so it works on a half-typed line (no FILE).
  if (parsed.help()) {
    std::cout << command_usage(*current, parsed);
    return exit_success;
  }
  return current->run(parsed);
}

void print_block(const std::string& text) {
  std::cerr << text;
  if (!text.empty() && text.back() != '\n') std::cerr << '\n';
}

int run(std::span<const std::string> args) {
  const command* current = nullptr;  // set once the command is known, for the --help hint
  try {
    return dispatch(args, current);
  } catch (const usage_error& e) {
    std::cerr << "error: " << e.what() << "\n"
              << "Run 'cucore " << (current ? std::string(current->name) + " " : "")
              << "--help' for usage.\n";
    return exit_usage;
  } catch (const cucore::compile_error& e) {
    // The log is what the user needs (file, line, message); the summary line says who failed.
    print_block(e.log());
    std::cerr << "error: " << e.backend() << " compilation failed (" << e.status() << ")\n";
    return exit_failure;
  } catch (const std::exception& e) {
    // cucore::error (its message names the input and what to do), or bad_alloc and the like.
    std::cerr << "error: ";
    print_block(e.what());
    return exit_failure;
  } catch (...) {
    std::cerr << "error: unknown exception\n";
    return exit_failure;
  }
}

}  // namespace
}  // namespace cucore::cli

int main(int argc, char** argv) {
  // The tool is its own process: unless the user points OPENSSL_CONF somewhere, OpenSSL need not
  // parse the system's openssl.cnf (~0.3 ms) when a long source is hashed with libcrypto. (The
  // library never does this: it would change OpenSSL for the application hosting it. Calling
  // OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG) here instead crashes LeakSanitizer's
  // exit-time tracer in ASan builds.)
  ::setenv("OPENSSL_CONF", "/dev/null", /*overwrite=*/0);
  try {
    // A compile with --server starts this very program as the server.
    std::error_code ec;
    if (auto self = std::filesystem::read_symlink("/proc/self/exe", ec); !ec) {
      cucore::set_compile_server_program(std::move(self));
    }
    const std::vector<std::string> args(argv + 1, argv + argc);
    return cucore::cli::run(args);
  } catch (...) {
    // Only reachable if copying argv or writing a message itself threw (out of memory).
    return cucore::cli::exit_failure;
  }
}
