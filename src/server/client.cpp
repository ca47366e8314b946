#include "server/client.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "cucore/log.hpp"
#include "cucore/server.hpp"
#include "server/internal.hpp"

namespace cucore {

std::string_view to_string(compile_server_mode mode) noexcept {
  switch (mode) {
    case compile_server_mode::off:
      return "off";
    case compile_server_mode::on:
      return "on";
    case compile_server_mode::automatic:
      return "auto";
  }
  return "unknown";
}

compile_server_mode parse_compile_server_mode(std::string_view text) {
  std::string lower;
  for (char c : text) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (lower == "off") return compile_server_mode::off;
  if (lower == "on") return compile_server_mode::on;
  if (lower == "auto") return compile_server_mode::automatic;
  throw invalid_argument("compile server mode \"" + std::string(text) +
                         "\": expected off, on or auto");
}

namespace server {
namespace {

// A failed start is not retried by every later compile of the process (for that directory and
// program: the settings a test or a user changes are tried afresh).
std::mutex g_failed_mutex;
std::string g_failed_start;

std::string start_identity(const std::filesystem::path& dir) {
  const char* program = std::getenv("CUCORE_SERVER_PROGRAM");
  const char* path = std::getenv("PATH");
  return dir.string() + '\0' + (program ? program : "") + '\0' + (path ? path : "");
}

void say(const std::string& why) {
  cucore::log(log_level::debug, "compile server not used, compiling in-process: " + why);
}

}  // namespace

compile_server_mode effective_mode(const program_options& options) {
  if (options.compile_server) return *options.compile_server;
  const char* env = std::getenv("CUCORE_COMPILE_SERVER");
  if (env == nullptr || *env == '\0') return compile_server_mode::off;
  try {
    return parse_compile_server_mode(env);
  } catch (const invalid_argument& e) {
    cucore::log(log_level::warning, std::string("CUCORE_COMPILE_SERVER: ") + e.what());
    return compile_server_mode::off;
  }
}

namespace {

// Sends one request to the user's server (starting one for compile_server_mode::on) and returns
// its answer of type `reply`, or nullopt (said at debug level) for anything else.
std::optional<frame> ask_server(compile_server_mode mode, const compile_request& q,
                                frame_type request, frame_type reply) {
  const auto dir = default_directory();
  std::string why;
  unique_fd fd = connect_to_server(dir, why);
  if (!fd && mode == compile_server_mode::on) {
    const std::string attempt = start_identity(dir);
    bool failed_before = false;
    {
      const std::lock_guard lock(g_failed_mutex);
      failed_before = g_failed_start == attempt;
    }
    if (failed_before) {
      why += "; starting one failed before";
    } else if (start_compile_server(dir)) {
      fd = connect_to_server(dir, why);
    } else {
      const std::lock_guard lock(g_failed_mutex);
      g_failed_start = attempt;
      why = "could not start a compile server (cucore server start)";
    }
  }
  if (!fd) {
    say(why);
    return std::nullopt;
  }
  const auto bound = client_silence_bound();
  write_frame(fd.get(), request, encode(q), bound);
  for (;;) {
    std::optional<frame> f = read_frame(fd.get(), bound);
    if (!f) {
      say("the server closed the connection");
      return std::nullopt;
    }
    if (f->type == frame_type::heartbeat) continue;
    if (f->type == frame_type::refusal) {
      say(f->payload);
      return std::nullopt;
    }
    if (f->type != reply) {
      say("an unexpected answer");
      return std::nullopt;
    }
    return f;
  }
}

// A request of this process's view: `options` without its compile_server field.
compile_request make_request(std::string_view code, const program_options& options,
                             code_type target, std::span<const std::string> name_expressions,
                             std::span<const std::string> flags) {
  compile_request q;
  q.view = current_view();
  q.code = std::string(code);
  q.options = options;
  q.options.compile_server.reset();
  q.target = target;
  q.name_expressions.assign(name_expressions.begin(), name_expressions.end());
  q.flags.assign(flags.begin(), flags.end());
  return q;
}

}  // namespace

std::optional<compile_reply> compile_through_server(compile_server_mode mode, std::string_view code,
                                                    const program_options& options,
                                                    const std::vector<std::string>& flags,
                                                    code_type target,
                                                    std::span<const std::string> name_expressions) {
  if (mode == compile_server_mode::off) return std::nullopt;
  try {
    const compile_request q = make_request(code, options, target, name_expressions, flags);
    const auto f = ask_server(mode, q, frame_type::compile_request, frame_type::compile_reply);
    if (!f) return std::nullopt;
    compile_reply a = decode_reply(f->payload);
    if (a.compiled && (a.target != target || a.name != options.name)) {
      say("the reply is for another target or program");
      return std::nullopt;
    }
    // What the worker's compile read goes to this thread's observation (the store gate).
    detail::compiler_observation::add_to_current(a.observed);
    cucore::log(log_level::debug, "compiled \"" + options.name + "\" in the compile server");
    return a;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    say(e.what());
    return std::nullopt;
  }
}

std::optional<raw_compile_reply> compile_raw_through_server(
    compile_server_mode mode, std::string_view code, const program_options& options,
    std::span<const std::string> flags, std::span<const std::string> name_expressions) {
  if (mode == compile_server_mode::off || code.empty() ||
      code.find('\0') != std::string_view::npos) {
    return std::nullopt;
  }
  try {
    const compile_request q = make_request(code, options, code_type::ptx, name_expressions, flags);
    const auto f =
        ask_server(mode, q, frame_type::raw_compile_request, frame_type::raw_compile_reply);
    if (!f) return std::nullopt;
    raw_compile_reply a = decode_raw_reply(f->payload);
    for (const auto& n : a.record.names) {  // answers for the client's expressions only
      if (std::find(q.name_expressions.begin(), q.name_expressions.end(), n.expression) ==
          q.name_expressions.end()) {
        say("the reply is for other name expressions");
        return std::nullopt;
      }
    }
    detail::compiler_observation::add_to_current(a.observed);
    cucore::log(log_level::debug, "compiled \"" + options.name + "\" in the compile server");
    return a;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    say(e.what());
    return std::nullopt;
  }
}

}  // namespace server
}  // namespace cucore
