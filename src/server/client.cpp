// The compile server's clients: program::compile's side (compiling through it), connecting to
// it, and the calls that query, stop and start it.
#include "server/client.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/descriptors.hpp"
#include "common/enum_names.hpp"
#include "common/text.hpp"
#include "cucore/log.hpp"
#include "cucore/server.hpp"
#include "key/compiler_environment.hpp"
#include "loader/libraries.hpp"
#include "loader/shared_library.hpp"
#include "server/internal.hpp"
#include "server/status.hpp"

extern char** environ;

namespace cucore {

constexpr auto kCompileServerModeNames =
    detail::name_each<compile_server_mode::automatic>("off", "on", "auto");

std::string_view to_string(compile_server_mode mode) noexcept {
  return kCompileServerModeNames(mode);
}

compile_server_mode parse_compile_server_mode(std::string_view text) {
  const std::string lower = detail::lower_case(text);
  if (const auto mode = kCompileServerModeNames.find(lower)) return *mode;
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
  const auto program = env::text(env::variable::server_program);
  const char* path = std::getenv("PATH");
  return dir.string() + '\0' + std::string(program.value_or("")) + '\0' + (path ? path : "");
}

void say(const std::string& why) {
  cucore::log(log_level::debug, "compile server not used, compiling in-process: " + why);
}

}  // namespace

std::optional<std::uint64_t> env_number(env::variable variable) {
  const auto number = env::whole_number(variable);
  if (number.malformed()) {
    throw invalid_argument(std::string(env::name(variable)) + "=\"" + std::string(number.text) +
                           "\" is not a whole number");
  }
  return number.value;
}

std::filesystem::path default_directory() {
  if (const auto d = env::text(env::variable::server_dir)) return std::filesystem::path(*d);
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x != nullptr && *x == '/') {
    return std::filesystem::path(x) / "cucore";
  }
  return std::filesystem::path("/tmp") / ("cucore-server-" + std::to_string(::geteuid()));
}

std::string check_private(const std::filesystem::path& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return errno_text("cannot stat \"" + dir.string() + "\"");
  if (!S_ISDIR(st.st_mode)) return "\"" + dir.string() + "\" is not a directory";
  if (st.st_uid != ::geteuid()) {
    return "\"" + dir.string() + "\" belongs to uid " + std::to_string(st.st_uid) + ", not " +
           std::to_string(::geteuid());
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return "\"" + dir.string() + "\" has mode " + mode + ": others can reach it (it must be 0700)";
  }
  return {};
}

sockaddr_un socket_address(const std::filesystem::path& dir) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = socket_path(dir).string();
  if (path.size() >= sizeof addr.sun_path) {
    throw error("the compile server's socket path \"" + path + "\" is too long for a socket");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

unique_fd connect_to_server(const std::filesystem::path& dir, std::string& why) {
  if (auto problem = check_private(dir); !problem.empty()) {
    why = problem;
    return {};
  }
  unique_fd fd(detail::off_standard_streams(
      ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)));
  if (!fd) {
    why = errno_text("socket");
    return {};
  }
  const sockaddr_un addr = socket_address(dir);
  // Non-blocking: a full backlog (EAGAIN) is no server for this compile, not a wait.
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    why = errno_text("connect to \"" + socket_path(dir).string() + "\"");
    return {};
  }
  return fd;
}

std::chrono::milliseconds client_silence_bound() {
  const auto ms = env_number(env::variable::server_timeout_ms);
  return std::chrono::milliseconds(ms.value_or(5000));
}

client_view current_view() {
  client_view v;
  const auto& api = detail::nvrtc("compiling CUDA C++ through the compile server");
  v.nvrtc_path = api.library->path();
  if (const auto id = detail::identify_file(v.nvrtc_path)) {
    v.nvrtc_path = id->path;
    v.nvrtc_device = id->device;
    v.nvrtc_inode = id->inode;
    v.nvrtc_size = id->size;
    v.nvrtc_mtime_ns = id->mtime_ns;
  }
  v.working_directory = detail::working_directory();
  v.environment = current_compiler_variables();
  return v;
}

compile_server_mode effective_mode(const program_options& options) {
  if (options.compile_server) return *options.compile_server;
  const auto setting = env::text(env::variable::compile_server);
  if (!setting) return compile_server_mode::off;
  try {
    return parse_compile_server_mode(*setting);
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

// Runs `ask` (a request and its checked reply, nullopt when there is none) and gives what the
// worker's compile read to this thread's observation (the store gate). Never throws but
// std::bad_alloc: anything else is said and nullopt.
template <class Reply, class Ask>
std::optional<Reply> served(const program_options& options, Ask&& ask) {
  try {
    std::optional<Reply> a = ask();
    if (!a) return std::nullopt;
    detail::compiler_observation::add_to_current(a->observed);
    cucore::log(log_level::debug, "compiled \"" + options.name + "\" in the compile server");
    return a;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    say(e.what());
    return std::nullopt;
  }
}

}  // namespace

std::optional<compile_reply> compile_through_server(compile_server_mode mode, std::string_view code,
                                                    const program_options& options,
                                                    const std::vector<std::string>& flags,
                                                    code_type target,
                                                    std::span<const std::string> name_expressions) {
  if (mode == compile_server_mode::off) return std::nullopt;
  return served<compile_reply>(options, [&]() -> std::optional<compile_reply> {
    const compile_request q = make_request(code, options, target, name_expressions, flags);
    const auto f = ask_server(mode, q, frame_type::compile_request, frame_type::compile_reply);
    if (!f) return std::nullopt;
    compile_reply a = decode_reply(f->payload);
    if (a.compiled && (a.target != target || a.name != options.name)) {
      say("the reply is for another target or program");
      return std::nullopt;
    }
    return a;
  });
}

std::optional<raw_compile_reply> compile_raw_through_server(
    compile_server_mode mode, std::string_view code, const program_options& options,
    std::span<const std::string> flags, std::span<const std::string> name_expressions) {
  if (mode == compile_server_mode::off || code.empty() ||
      code.find('\0') != std::string_view::npos) {
    return std::nullopt;
  }
  return served<raw_compile_reply>(options, [&]() -> std::optional<raw_compile_reply> {
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
    return a;
  });
}

}  // namespace server

// ---------------------------------------------------------------------------------------------
// Querying, stopping and starting the server.

namespace {

// One request and its answer on a fresh connection; nullopt when nothing answers.
std::optional<server::frame> ask(const std::filesystem::path& dir, server::frame_type type) {
  using namespace std::chrono_literals;
  std::string why;
  server::unique_fd fd = server::connect_to_server(dir, why);
  if (!fd) return std::nullopt;
  try {
    server::write_frame(fd.get(), type, {}, 5s);
    return server::read_frame(fd.get(), 5s);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::filesystem::path g_server_program;
std::mutex g_server_program_mutex;

}  // namespace

std::optional<compile_server_status> query_compile_server(const std::filesystem::path& directory) {
  auto answer = ask(directory, server::frame_type::status_request);
  if (!answer || answer->type != server::frame_type::status_reply) return std::nullopt;
  return server::parse_status(std::move(answer->payload));
}

bool stop_compile_server(const std::filesystem::path& directory, std::chrono::milliseconds wait) {
  const auto status = query_compile_server(directory);
  const auto answer = ask(directory, server::frame_type::stop_request);
  if (!answer || answer->type != server::frame_type::stopping) return false;
  // Stopped when the process is gone (or a zombie its parent has yet to reap): its files go first.
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (status && std::chrono::steady_clock::now() < deadline) {
    std::ifstream stat("/proc/" + std::to_string(status->pid) + "/stat");
    std::string pid, name, state;
    if (!(stat >> pid >> name >> state) || state == "Z") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void set_compile_server_program(std::filesystem::path executable) {
  const std::lock_guard lock(g_server_program_mutex);
  g_server_program = std::move(executable);
}

bool start_compile_server(const std::filesystem::path& directory) {
  std::filesystem::path exe;
  {
    const std::lock_guard lock(g_server_program_mutex);
    exe = g_server_program;
  }
  if (exe.empty()) {
    if (const auto p = env::text(env::variable::server_program)) exe = std::filesystem::path(*p);
  }
  if (exe.empty()) {
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path ? path : "");
    for (std::string d; std::getline(dirs, d, ':');) {
      if (!d.empty() && ::access((d + "/cucore").c_str(), X_OK) == 0) {
        exe = d + "/cucore";
        break;
      }
    }
  }
  if (exe.empty()) return false;
  // "cucore server start" daemonizes and returns once the server listens: spawned, not forked,
  // since the caller may have threads.
  std::string dir_arg = "--dir=" + directory.string();
  std::string exe_s = exe.string();
  std::vector<char*> argv = {exe_s.data(), const_cast<char*>("server"), const_cast<char*>("start"),
                             dir_arg.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe_s.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace cucore
