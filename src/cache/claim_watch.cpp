#include "cache/claim_watch.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <utility>

namespace cucore::detail {
namespace {

using clock = std::chrono::steady_clock;

// Milliseconds to `deadline`, rounded up (0 when it has passed).
int millis_to(clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30));
}

class combined_watch final : public claim_watch {
 public:
  combined_watch(std::unique_ptr<claim_watch> a, std::unique_ptr<claim_watch> b) noexcept
      : a_(std::move(a)), b_(std::move(b)) {}

  bool wait(std::chrono::milliseconds timeout) override {
    const auto deadline = clock::now() + timeout;
    auto* pa = dynamic_cast<pollable_claim_watch*>(a_.get());
    auto* pb = dynamic_cast<pollable_claim_watch*>(b_.get());
    if (pa == nullptr || pb == nullptr) {
      // Turns: neither is kept waiting longer than a few milliseconds for the other.
      constexpr std::chrono::milliseconds kTurn{4};
      for (bool first = true;; first = !first) {
        const int left = millis_to(deadline);
        if (left == 0) return false;
        claim_watch& w = first ? *a_ : *b_;
        if (w.wait(std::min(kTurn, std::chrono::milliseconds(left)))) return true;
      }
    }
    pa->arm();
    pb->arm();
    for (;;) {
      if (pa->check() || pb->check()) return true;
      const int left = millis_to(deadline);
      if (left == 0) return false;
      pollfd fds[2] = {{pa->native_handle(), POLLIN, 0}, {pb->native_handle(), POLLIN, 0}};
      const int n = ::poll(fds, 2, left);
      if (n == 0) return false;
      if (n < 0 && errno != EINTR) return true;  // cannot wait: let the caller poll
    }
  }

 private:
  std::unique_ptr<claim_watch> a_, b_;
};

}  // namespace

bool pollable_claim_watch::wait(std::chrono::milliseconds timeout) {
  const auto deadline = clock::now() + timeout;
  arm();
  for (;;) {
    if (check()) return true;
    const int left = millis_to(deadline);
    if (left == 0) return false;
    pollfd p{native_handle(), POLLIN, 0};
    const int n = ::poll(&p, 1, left);
    if (n == 0) return false;
    if (n < 0 && errno != EINTR) return true;  // cannot wait: let the caller poll
  }
}

std::unique_ptr<claim_watch> combine_watches(std::unique_ptr<claim_watch> a,
                                             std::unique_ptr<claim_watch> b) {
  if (!a) return b;
  if (!b) return a;
  return std::make_unique<combined_watch>(std::move(a), std::move(b));
}

}  // namespace cucore::detail
