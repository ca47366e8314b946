// The trace file (common/trace.hpp).
#include "common/trace.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/descriptors.hpp"
#include "common/environment.hpp"

namespace cucore::detail {

namespace {

std::int64_t now_us() noexcept {
  // The monotonic clock: one timeline for every process of the machine.
  struct timespec t {};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000 + t.tv_nsec / 1000;
}

// One event as a line of the trace's JSON array (text that is not UTF-8 gets U+FFFD, as the
// tool's --json output does).
std::string event_line(const nlohmann::ordered_json& event) {
  return event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + ",\n";
}

// The file, opened once: created holding "[" by linking a temporary file into place.
int trace_fd() noexcept {
  static const int fd = [] {
    const auto chosen = env::text(env::variable::trace);
    if (!chosen) return -1;
    const char* path = chosen->data();
    int f = ::open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (f < 0 && errno == ENOENT) {
      const std::string temp = std::string(path) + ".tmp-" + std::to_string(::getpid());
      const int t = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (t >= 0) {
        const bool written = ::write(t, "[\n", 2) == 2;
        ::close(t);
        if (written) (void)::link(temp.c_str(), path);  // EEXIST: another process's is there
        ::unlink(temp.c_str());
      }
      f = ::open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    }
    return off_standard_streams(f);
  }();
  return fd;
}

void write_line(const std::string& line) noexcept {
  const int fd = trace_fd();
  if (fd < 0) return;
  // One write per event: O_APPEND places it whole at the end, whoever else appends.
  (void)::write(fd, line.data(), line.size());
}

// The process's name, once, as a metadata event.
void name_the_process() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    char exe[512] = {};
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    nlohmann::ordered_json event = {
        {"name", "process_name"}, {"ph", "M"}, {"pid", ::getpid()}, {"tid", 0}};
    event["args"]["name"] = n > 0 ? std::string(exe, static_cast<std::size_t>(n)) : "?";
    const std::string line = event_line(event);
    write_line(line);
  });
}

}  // namespace

bool tracing() noexcept {
  return trace_fd() >= 0;
}

trace_span::trace_span(std::string_view category, std::string_view name) noexcept {
  if (!tracing()) return;
  try {
    on_ = true;
    category_ = category;
    name_ = name;
    start_us_ = now_us();
  } catch (...) {
    on_ = false;
  }
}

void trace_span::arg(std::string_view key, std::string_view value) noexcept {
  if (!on_) return;
  try {
    for (auto& [k, v] : args_) {
      if (k == key) {
        v = value;
        return;
      }
    }
    args_.emplace_back(key, value);
  } catch (...) {
  }
}

trace_span::~trace_span() {
  if (!on_) return;
  try {
    name_the_process();
    const std::int64_t end = now_us();
    nlohmann::ordered_json event = {{"name", name_},
                                    {"cat", category_},
                                    {"ph", "X"},
                                    {"ts", start_us_},
                                    {"dur", end - start_us_},
                                    {"pid", ::getpid()},
                                    {"tid", ::syscall(SYS_gettid)}};
    auto& args = event["args"] = nlohmann::ordered_json::object();
    for (const auto& [key, value] : args_) args[key] = value;
    const std::string line = event_line(event);
    write_line(line);
  } catch (...) {
  }
}

}  // namespace cucore::detail
