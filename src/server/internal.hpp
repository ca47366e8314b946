// What the compile server's parts share: its files, connecting to it, the client's view.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

#include "cache/posix_file.hpp"
#include "server/wire.hpp"

namespace cucore::server {

using detail::posix::unique_fd;

inline std::filesystem::path socket_path(const std::filesystem::path& dir) {
  return dir / "server.sock";
}
inline std::filesystem::path lock_path(const std::filesystem::path& dir) {
  return dir / "server.lock";
}

// The default private directory (CUCORE_SERVER_DIR, $XDG_RUNTIME_DIR/cucore,
// /tmp/cucore-server-UID).
std::filesystem::path default_directory();

// Connects to the server's socket without waiting for a full backlog; an empty fd when none
// listens (or the directory is not a private one of this user's: then `why` says so).
unique_fd connect_to_server(const std::filesystem::path& dir, std::string& why);

// How long the client waits for any frame (a heartbeat or the reply) before compiling itself:
// CUCORE_SERVER_TIMEOUT_MS, default 5000.
std::chrono::milliseconds client_silence_bound();
// How often the server tells a waiting client that its compile still runs.
inline constexpr std::chrono::milliseconds kHeartbeat{250};

// This process's view (the NVRTC it loaded, its directory, the compilers' variables).
client_view current_view();

}  // namespace cucore::server
