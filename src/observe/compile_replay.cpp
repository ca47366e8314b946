// A compile replayed under another clock and process id (observe/compile_replay.hpp).
#include "observe/compile_replay.hpp"

#include <sys/time.h>
#include <unistd.h>

#include <ctime>

namespace cucore::detail {

namespace {

thread_local std::int64_t clock_shift = 0;
thread_local pid_t pinned_pid = 0;

}  // namespace

compile_replay::compile_replay(std::int64_t shift_seconds, pid_t pid) noexcept
    : saved_shift_(clock_shift), saved_pid_(pinned_pid) {
  clock_shift = shift_seconds;
  pinned_pid = pid;
}

compile_replay::~compile_replay() {
  clock_shift = saved_shift_;
  pinned_pid = saved_pid_;
}

namespace replayed {

extern "C" {

time_t time_(time_t* out) {
  time_t now = ::time(nullptr);
  if (now != static_cast<time_t>(-1)) now += static_cast<time_t>(clock_shift);
  if (out != nullptr) *out = now;
  return now;
}

int gettimeofday_(struct timeval* tv, void* tz) {
  const int r = ::gettimeofday(tv, static_cast<struct timezone*>(tz));
  if (r == 0 && tv != nullptr) tv->tv_sec += static_cast<time_t>(clock_shift);
  return r;
}

int clock_gettime_(clockid_t id, struct timespec* ts) {
  const int r = ::clock_gettime(id, ts);
  // Only the calendar clocks: a monotonic clock's shift would change no output, only timings.
  if (r == 0 && ts != nullptr && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
    ts->tv_sec += static_cast<time_t>(clock_shift);
  }
  return r;
}

pid_t getpid_() {
  return pinned_pid != 0 ? pinned_pid : ::getpid();
}

}  // extern "C"

}  // namespace replayed

const std::vector<got_replacement>& replay_replacements() {
  using namespace replayed;
  static const std::vector<got_replacement> table = {
      {"time", reinterpret_cast<void*>(&time_)},
      {"gettimeofday", reinterpret_cast<void*>(&gettimeofday_)},
      {"clock_gettime", reinterpret_cast<void*>(&clock_gettime_)},
      {"getpid", reinterpret_cast<void*>(&getpid_)},
  };
  return table;
}

}  // namespace cucore::detail
