// What the Redis cache's two files share (redis.cpp: the cache; redis_claims.cpp: its
// single-flight claims and their watches): reply helpers, SIGPIPE, timeouts, and the abandonment
// counter both write.
#pragma once

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>

namespace cucore::detail::redis {

// A decimal integer in [min, max], all of `text`.
inline std::optional<long long> parse_integer(std::string_view text, long long min, long long max) {
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || value < min ||
      value > max) {
    return std::nullopt;
  }
  return value;
}

inline std::span<const std::byte> as_bytes(const redisReply* r) {
  return std::as_bytes(std::span<const char>(r->str, r->len));
}

inline std::string_view as_view(const redisReply* r) {
  return {r->str, r->len};
}

inline const redisReply* reply_of(const void* p) {
  return static_cast<const redisReply*>(p);
}

// hiredis writes with write(2): a server that closed the connection would raise SIGPIPE, whose
// default action kills the process. While alive, SIGPIPE is blocked in this thread, and one it
// raised is consumed before the mask is restored (a library must not change the process's
// signal dispositions).
class sigpipe_guard {
 public:
  sigpipe_guard() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
    sigset_t old;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old) == 0 && !sigismember(&old, SIGPIPE);
  }
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;
  ~sigpipe_guard() {
    if (!was_pending_) {
      sigset_t pending;
      sigemptyset(&pending);
      if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
        const timespec zero{};
        while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
        }
      }
    }
    if (blocked_) pthread_sigmask(SIG_UNBLOCK, &pipe_, nullptr);
  }

 private:
  sigset_t pipe_{};
  bool was_pending_ = false;
  bool blocked_ = false;
};

inline timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// Counts a put that stored nothing as an abandonment of the key's claim (KEYS[1], ARGV[1] ms).
constexpr std::string_view kCountAbandonment =
    "redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], ARGV[1]) return 1";
// How long an abandonment counter lives: longer than any waiter waits (max_wait, 45 s by default).
constexpr std::string_view kAbandonmentLifeMs = "600000";

}  // namespace cucore::detail::redis
