// `cucore server start|stop|status`: the per-user compile server (docs/compile-server.md).
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "commands.hpp"
#include "cucore/error.hpp"
#include "cucore/server.hpp"

namespace cucore::cli {
namespace {

constexpr option_spec options[] = {
    {"--foreground", "", "", "start: serve from this process (no daemon; for tests and services)"},
    {"--workers", "", "N", "start: worker processes (default: CUCORE_SERVER_WORKERS, else cores)"},
    {"--idle-time", "", "SECONDS",
     "start: exit after this long without a request (default 600; CUCORE_SERVER_IDLE_SECONDS)"},
    {"--worker-memory", "", "MIB",
     "start: replace a worker holding more (default 4096; CUCORE_SERVER_WORKER_MEMORY_MB)"},
    {"--dir", "", "DIR",
     "the private directory (default: CUCORE_SERVER_DIR, $XDG_RUNTIME_DIR/cucore, "
     "/tmp/cucore-server-UID)"},
    {"--json", "", "", "status: print the server's status as JSON"},
    {"--fd", "", "N", "worker: (internal) the socket to the server"},
    {"--nvrtc", "", "FILE", "worker: (internal) the NVRTC library to load"},
};

constexpr std::string_view description =
    "Runs the compile server: a per-user process whose workers compile c++ misses with NVRTC,\n"
    "each keeping its automatic precompiled headers across requests and processes.\n"
    "  start   start it in the background (returns once it listens; 0 if one already runs)\n"
    "  stop    stop it (its files go with it)\n"
    "  status  its pid, workers, queue, requests, memory and idle time left (exit 1: none)\n"
    "Clients: cucore compile uses a running server (--server starts one); program::compile\n"
    "with compile_server or CUCORE_COMPILE_SERVER=on|auto. See docs/compile-server.md.";

compile_server_settings settings_from(const arguments& args) {
  compile_server_settings s = compile_server_settings_from_environment();
  if (auto d = args.last("--dir")) s.directory = std::filesystem::absolute(*d);
  if (auto n = args.last("--workers")) {
    const int v = parse_int("--workers", *n);
    if (v < 1 || v > 1024) throw usage_error("--workers: expected 1 to 1024");
    s.workers = static_cast<std::size_t>(v);
  }
  if (auto n = args.last("--idle-time")) {
    const int v = parse_int("--idle-time", *n);
    if (v < 1) throw usage_error("--idle-time: expected at least 1 second");
    s.idle = std::chrono::seconds(v);
  }
  if (auto n = args.last("--worker-memory")) {
    const int v = parse_int("--worker-memory", *n);
    if (v < 1) throw usage_error("--worker-memory: expected at least 1 MiB");
    s.worker_memory_limit = static_cast<std::uint64_t>(v) << 20;
  }
  s.executable = std::filesystem::read_symlink("/proc/self/exe");
  return s;
}

// Forks the server off as a daemon and waits for it to listen (or to find another listening).
int start_daemon(const compile_server_settings& s) {
  prepare_compile_server_directory(s.directory);  // its errors are said here, not lost
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) throw error("pipe failed");
  const pid_t child = ::fork();
  if (child < 0) throw error("fork failed");
  if (child == 0) {
    ::close(ready[0]);
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    if (::chdir("/") != 0) ::_exit(1);
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::close(null);
    int rc = 1;
    try {
      rc = run_compile_server(s, ready[1]);
    } catch (...) {
    }
    ::_exit(rc);
  }
  ::close(ready[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  char c = 0;
  pollfd p{ready[0], POLLIN, 0};
  ssize_t n = 0;
  if (::poll(&p, 1, 30000) > 0) n = ::read(ready[0], &c, 1);
  ::close(ready[0]);
  if (n == 1 && c == 'r') {
    if (auto st = query_compile_server(s.directory)) {
      std::cout << "compile server " << st->pid << " started (" << s.directory.string() << ")\n";
      return exit_success;
    }
  }
  if (n == 1 && c == 'b') {
    // Another starter won the lock: wait until its socket answers.
    for (int i = 0; i < 300; ++i) {
      if (auto st = query_compile_server(s.directory)) {
        std::cout << "compile server " << st->pid << " already running (" << s.directory.string()
                  << ")\n";
        return exit_success;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::cerr << "cucore: the compile server did not start (run `cucore server start --foreground` "
               "to see why)\n";
  return exit_failure;
}

int run_server(const arguments& args) {
  const auto& pos = args.positionals();
  if (pos.size() != 1) throw usage_error("expected one of start, stop, status");
  const std::string& what = pos[0];
  if (what == "worker") {
    const auto fd = args.last("--fd");
    if (!fd) throw usage_error("worker needs --fd");
    return run_compile_server_worker(parse_int("--fd", *fd), args.last("--nvrtc").value_or(""));
  }
  compile_server_settings s = settings_from(args);
  if (what == "start") {
    if (auto st = query_compile_server(s.directory)) {
      std::cout << "compile server " << st->pid << " already running (" << s.directory.string()
                << ")\n";
      return exit_success;
    }
    if (args.has("--foreground")) {
      const int rc = run_compile_server(s);
      if (rc == 3) {
        std::cerr << "cucore: another compile server holds " << s.directory.string() << "\n";
        return exit_failure;
      }
      return rc;
    }
    return start_daemon(s);
  }
  if (what == "stop") {
    if (!stop_compile_server(s.directory)) {
      std::cout << "no compile server runs (" << s.directory.string() << ")\n";
      return exit_success;
    }
    std::cout << "compile server stopped\n";
    return exit_success;
  }
  if (what == "status") {
    const auto st = query_compile_server(s.directory);
    if (!st) {
      if (args.has("--json")) {
        std::cout << "null\n";
      } else {
        std::cout << "no compile server runs (" << s.directory.string() << ")\n";
      }
      return exit_failure;
    }
    if (args.has("--json")) {
      std::cout << st->json << "\n";
      return exit_success;
    }
    std::cout << "compile server " << st->pid << " (" << s.directory.string() << ")\n"
              << "  requests served: " << st->requests << ", queued now: " << st->queued
              << "\n  idle time left: " << static_cast<long>(st->idle_seconds_left) << " s\n"
              << "  workers: " << st->workers.size() << "\n";
    for (const auto& w : st->workers) {
      std::cout << "    pid " << w.pid << (w.busy ? " busy" : " idle") << ", " << w.requests
                << " requests, " << (w.resident_bytes >> 20) << " MiB resident (peak "
                << (w.peak_bytes >> 20) << " MiB), " << w.prefixes << " prefixes\n";
    }
    return exit_success;
  }
  throw usage_error("unknown server command \"" + what + "\": expected start, stop or status");
}

}  // namespace

const command server_command{
    "server",
    "server start|stop|status [options]",
    "run the per-user compile server",
    description,
    options,
    run_server,
};

}  // namespace cucore::cli
