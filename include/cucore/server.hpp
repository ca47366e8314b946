// The compile server (docs/compile-server.md): a per-user local process whose worker processes
// compile c++ misses with NVRTC, each keeping its automatic precompiled headers across requests.
// It only compiles: clients key, look up and store as always, and compile in-process whenever the
// server cannot be used.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace cucore {

struct compile_server_settings {
  // The private directory of the socket and lock file: CUCORE_SERVER_DIR, else
  // $XDG_RUNTIME_DIR/cucore, else /tmp/cucore-server-UID.
  std::filesystem::path directory;
  std::size_t workers = 0;  // 0: one per core (CUCORE_SERVER_WORKERS)
  // Exit after this long with no request (CUCORE_SERVER_IDLE_SECONDS; default 10 minutes).
  std::chrono::seconds idle{600};
  // A worker whose resident memory passes this after a request is replaced by a fresh one
  // (CUCORE_SERVER_WORKER_MEMORY_MB; default 4096 MiB).
  std::uint64_t worker_memory_limit = 4096ull << 20;
  // The executable the workers run ("EXE server worker"): the cucore tool.
  std::filesystem::path executable;
};

// The settings from the environment (every field above that has a variable), directory resolved.
compile_server_settings compile_server_settings_from_environment();

// The private directory, created 0700 if missing; throws cucore::error when it is not a directory
// of this user's that only this user can reach (mode 0700, not a symbolic link).
std::filesystem::path prepare_compile_server_directory(const std::filesystem::path& directory);

// Runs a server in this process until it is stopped, idle past its time, or signalled (SIGTERM,
// SIGINT). Returns 0; 3 when another server holds the directory's lock (it serves the user).
// `ready_fd` (or -1) gets one byte once the socket listens (or the lock is another's), then is
// closed. Throws cucore::error when it cannot start (the directory, the socket).
int run_compile_server(const compile_server_settings& settings, int ready_fd = -1);

// A worker process's loop on the socket `fd` (the server starts it as "cucore server worker"),
// compiling with the NVRTC library file `nvrtc` (empty: the one cucore's search finds).
int run_compile_server_worker(int fd, const std::string& nvrtc);

struct compile_server_worker_status {
  int pid = 0;
  bool busy = false;
  bool making_image = false;  // a prefix's image, after the compile that asked for it
  std::uint64_t requests = 0;
  std::uint64_t resident_bytes = 0;  // VmRSS now
  std::uint64_t peak_bytes = 0;      // VmHWM
  std::size_t prefixes = 0;          // precompiled-header images it holds (routed to it)
  std::size_t restarts = 0;          // times its slot got a fresh process
};

struct compile_server_status {
  int pid = 0;
  std::size_t queued = 0;  // requests waiting for a worker
  std::uint64_t requests = 0;
  double idle_seconds_left = 0;
  std::size_t images_being_made = 0;
  // Every worker slot: settings.workers per NVRTC library its clients loaded (a slot's pid is -1
  // until its first request, but for the server's own library's).
  std::vector<compile_server_worker_status> workers;
  std::string json;  // the server's own answer, as `cucore server status --json` prints it
};

// The running server's status, or nullopt when none answers in `directory`.
std::optional<compile_server_status> query_compile_server(const std::filesystem::path& directory);
// Asks the server to stop and waits (up to `wait`) for its socket to go; false when none ran.
bool stop_compile_server(const std::filesystem::path& directory,
                         std::chrono::milliseconds wait = std::chrono::seconds(10));

// Starts a server in the background ("EXE server start") and waits until it answers; false when
// it could not be started. Used by compile_server_mode::on; the tool sets the executable with
// set_compile_server_program (else CUCORE_SERVER_PROGRAM, else "cucore" on PATH).
bool start_compile_server(const std::filesystem::path& directory);
void set_compile_server_program(std::filesystem::path executable);

}  // namespace cucore
