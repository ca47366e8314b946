// Single-flight compiles: when many processes (or threads) miss the same key at once, one
// compiles and the others wait for its entry.
//
// get_or_compile(cache, key, compile, store):
//   1. get: a hit is returned at once (outcome `hit`; nothing is claimed).
//   2. On a miss, try_claim. Owned: get again (the entry may have landed between the miss and
//      the claim), else compile, store, release. Held elsewhere: wait, and look for the entry and
//      try the claim again whenever the cache's watch (program_cache::watch_claim: inotify,
//      Redis pub/sub) says the entry landed or the claim came free, and at growing intervals
//      (single_flight_options::poll_initial up to poll_max) besides. When the holder finishes,
//      the entry is there (`waited`). When the claim comes free without an entry (`took_over`):
//        - the holder gave up (its compile or its store failed: it abandoned the claim, which
//          program_cache::claim_abandonments tells): every waiter compiles now, side by side,
//          releasing the claim at once, so no waiter queues behind another's failure and a
//          compile error costs the waiters one compile, not one each in turn;
//        - the holder died (killed, crashed; a Redis lease expired): exactly one waiter takes
//          the claim over and compiles, holding it; the others keep waiting for that one (and
//          should it die too, one more takes over).
//      After max_wait a waiter compiles without the claim (`gave_up`).
//   3. A cache that cannot claim, or single-flight turned off: compile and store (`unclaimed`).
//
// Nothing deadlocks: the claim is an RAII object, so a compile that throws releases it (the
// waiters then compile and get the same error themselves: errors are not cached), and a process
// that dies releases it too (a lock held by an open file) or lets it expire (Redis, after the
// lease).
// Waiters read entries through get(), which never returns a partial entry (every backend writes
// entries atomically and verifies them on read).
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

#include "cucore/cache/program_cache.hpp"

namespace cucore {

// What single-flight did for one compile through a cache.
enum class flight_outcome {
  hit,        // the first get hit: nothing compiled, nothing claimed
  compiled,   // claimed the key and compiled it (the others wait for this one)
  waited,     // another process or thread compiled it; this one waited and read its entry
  took_over,  // waited, then the claim came free without an entry: compiled (holding the claim
              // where the holder died, so that the others keep waiting; side by side where it
              // failed)
  gave_up,    // waited max_wait, then compiled without the claim
  unclaimed,  // single-flight off, or the cache cannot claim: compiled without a claim
};
// "hit", "compiled", "waited", "took_over", "gave_up", "unclaimed".
std::string_view to_string(flight_outcome outcome) noexcept;

struct flight_result {
  object_code code;
  flight_outcome outcome = flight_outcome::hit;
  // The code came from the cache (hit or waited), not from `compile`.
  bool from_cache() const noexcept {
    return outcome == flight_outcome::hit || outcome == flight_outcome::waited;
  }
};

namespace detail {
// A non-owning reference to a callable (C++26's std::function_ref, in brief): no allocation, so
// that a hit through get_or_compile costs a get and nothing more. The callable must outlive the
// call it is passed to (a lambda argument does).
template <class Signature>
class function_ref;
template <class R, class... Args>
class function_ref<R(Args...)> {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, function_ref> &&
           std::is_invocable_r_v<R, F&, Args...>) function_ref(F&& f)
  noexcept  // NOLINT: implicit, like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return std::invoke(*static_cast<std::remove_reference_t<F>*>(object),
                             std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};
}  // namespace detail

// Gets `key`, else compiles it once among concurrent callers, per cache.single_flight(). `store`
// is called with each compile's result while the claim is held (normally cache.put; it may decide
// not to store); what it throws propagates after the claim is released. `compile`'s exceptions
// propagate too (the claim released).
flight_result get_or_compile(program_cache& cache, cache_key_ref key,
                             detail::function_ref<object_code()> compile,
                             detail::function_ref<void(const object_code&)> store);

}  // namespace cucore
