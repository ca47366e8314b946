// The compile server's status as JSON (`cucore server status --json`): written by the daemon,
// read back by query_compile_server.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cucore/server.hpp"

namespace cucore::server {

// What the daemon reports of itself; the totals (prefixes, images being made) are its workers'.
struct status_report {
  struct worker {
    compile_server_worker_status counts;
    std::string nvrtc;  // the NVRTC library its process loads
  };
  int pid = 0;
  std::string directory;
  double uptime_seconds = 0;
  double idle_seconds_left = 0;
  std::int64_t idle_seconds = 0;
  std::uint64_t requests = 0;
  std::size_t queued = 0, active = 0;
  std::uint64_t worker_memory_limit_bytes = 0;
  std::vector<worker> workers;
};

std::string status_json(const status_report& report);

// The status a server answered with `json`; a field it lacks (or a malformed answer) reads 0.
compile_server_status parse_status(std::string json);

}  // namespace cucore::server
