// The compile server's status as JSON: keys in the documented order (docs/compile-server.md).
#include "server/status.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "server/wire.hpp"

namespace cucore::server {
namespace {

// Seconds to the millisecond: the clock's noise past that says nothing.
double to_milliseconds(double seconds) {
  return std::round(seconds * 1000) / 1000;
}

template <class T>
T number_of(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<T>() : T{};
}

bool flag_of(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

std::string status_json(const status_report& report) {
  nlohmann::ordered_json workers = nlohmann::ordered_json::array();
  std::size_t prefixes_total = 0, making_total = 0;
  for (const auto& [counts, nvrtc] : report.workers) {
    prefixes_total += counts.prefixes;
    making_total += counts.making_image ? 1 : 0;
    workers.push_back({{"pid", counts.pid},
                       {"busy", counts.busy},
                       {"making_image", counts.making_image},
                       {"requests", counts.requests},
                       {"resident_bytes", counts.resident_bytes},
                       {"peak_bytes", counts.peak_bytes},
                       {"prefixes", counts.prefixes},
                       {"restarts", counts.restarts},
                       {"nvrtc", nvrtc}});
  }
  const nlohmann::ordered_json status = {
      {"pid", report.pid},
      {"protocol", kProtocolVersion},
      {"directory", report.directory},
      {"uptime_seconds", to_milliseconds(report.uptime_seconds)},
      {"idle_seconds_left", to_milliseconds(report.idle_seconds_left)},
      {"idle_seconds", report.idle_seconds},
      {"requests", report.requests},
      {"queued", report.queued},
      {"active", report.active},
      {"worker_memory_limit_bytes", report.worker_memory_limit_bytes},
      {"workers", std::move(workers)},
      {"prefixes", prefixes_total},
      {"images_being_made", making_total}};
  // A path need not be UTF-8: its invalid bytes become U+FFFD (as the tool's --json does).
  return status.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

compile_server_status parse_status(std::string json) {
  compile_server_status s;
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  s.json = std::move(json);
  if (!j.is_object()) return s;
  s.pid = number_of<int>(j, "pid");
  s.queued = number_of<std::size_t>(j, "queued");
  s.requests = number_of<std::uint64_t>(j, "requests");
  s.idle_seconds_left = number_of<double>(j, "idle_seconds_left");
  s.images_being_made = number_of<std::size_t>(j, "images_being_made");
  const auto workers = j.find("workers");
  if (workers == j.end() || !workers->is_array()) return s;
  for (const auto& w : *workers) {
    compile_server_worker_status counts;
    counts.pid = number_of<int>(w, "pid");
    counts.busy = flag_of(w, "busy");
    counts.making_image = flag_of(w, "making_image");
    counts.requests = number_of<std::uint64_t>(w, "requests");
    counts.resident_bytes = number_of<std::uint64_t>(w, "resident_bytes");
    counts.peak_bytes = number_of<std::uint64_t>(w, "peak_bytes");
    counts.prefixes = number_of<std::size_t>(w, "prefixes");
    counts.restarts = number_of<std::size_t>(w, "restarts");
    s.workers.push_back(counts);
  }
  return s;
}

}  // namespace cucore::server
