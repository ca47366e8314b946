// What the compile server's parts share: its files, connecting to it, the client's view.
#pragma once

#include <sys/un.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/posix_file.hpp"
#include "common/environment.hpp"
#include "server/wire.hpp"

namespace cucore::server {

using detail::posix::unique_fd;

inline std::filesystem::path socket_path(const std::filesystem::path& dir) {
  return dir / "server.sock";
}
inline std::filesystem::path lock_path(const std::filesystem::path& dir) {
  return dir / "server.lock";
}

inline std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// The whole number `variable` holds; nullopt when unset or empty. Throws invalid_argument for
// anything else.
std::optional<std::uint64_t> env_number(env::variable variable);

// The default private directory (CUCORE_SERVER_DIR, $XDG_RUNTIME_DIR/cucore,
// /tmp/cucore-server-UID).
std::filesystem::path default_directory();

// Why `dir` is not a private directory of this user's (empty: it is one). The directory must be
// ours and private; anything else could let another user read requests or answer them.
std::string check_private(const std::filesystem::path& dir);

// The address of the socket in `dir`; throws cucore::error when its path is too long.
sockaddr_un socket_address(const std::filesystem::path& dir);

// Connects to the server's socket without waiting for a full backlog; an empty fd when none
// listens (or the directory is not a private one of this user's: then `why` says so).
unique_fd connect_to_server(const std::filesystem::path& dir, std::string& why);

// How long the client waits for any frame (a heartbeat or the reply) before compiling itself:
// CUCORE_SERVER_TIMEOUT_MS, default 5000.
std::chrono::milliseconds client_silence_bound();
// How often the server tells a waiting client that its compile still runs.
inline constexpr std::chrono::milliseconds kHeartbeat{250};

using compiler_variables = std::vector<std::pair<std::string, std::optional<std::string>>>;

// Every variable of the compilers' table (observe/compiler_variables.hpp), set or not, as this
// process has them (a worker's CUDA_CACHE_DISABLE as its clients have it: see the daemon's spawn).
compiler_variables current_compiler_variables();

// This process's view (the NVRTC it loaded, its directory, the compilers' variables).
client_view current_view();

}  // namespace cucore::server
