#include "cucore/cache/single_flight.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>

#include "common/enum_names.hpp"
#include "common/environment.hpp"
#include "common/trace.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/log.hpp"

namespace cucore {

constexpr auto kFlightOutcomeNames = detail::name_each<flight_outcome::unclaimed>(
    "hit", "compiled", "waited", "took_over", "gave_up", "unclaimed");

std::string_view to_string(flight_outcome outcome) noexcept {
  return kFlightOutcomeNames(outcome);
}

single_flight_options default_single_flight_options() {
  single_flight_options o;
  static std::atomic<bool> warned{false};
  auto bad = [](const char* name, const std::string& value, const char* expected) {
    if (!warned.exchange(true)) {
      log(log_level::warning, std::string(name) + "=\"" + value + "\" ignored: expected " +
                                  expected + " (single-flight keeps its default)");
    }
  };
  if (const auto on = env::flag(env::variable::single_flight); on.value && !*on.value) {
    o.enabled = false;
  } else if (on.malformed()) {
    bad("CUCORE_SINGLE_FLIGHT", std::string(on.text), "0/off/false/no or 1/on/true/yes");
  }
  if (const auto wait = env::number(env::variable::single_flight_wait); wait.value) {
    o.max_wait = std::chrono::milliseconds(static_cast<long long>(*wait.value * 1000));
  } else if (wait.malformed()) {
    bad("CUCORE_SINGLE_FLIGHT_WAIT", std::string(wait.text), "a number of seconds from 0 to 86400");
  }
  return o;
}

namespace {

// Marks this thread's lookups as waiting for another's entry (see detail::waiting_for_entry).
class waiting_lookups {
 public:
  waiting_lookups() noexcept : was_(detail::waiting_for_entry) { detail::waiting_for_entry = true; }
  ~waiting_lookups() { detail::waiting_for_entry = was_; }
  waiting_lookups(const waiting_lookups&) = delete;
  waiting_lookups& operator=(const waiting_lookups&) = delete;

 private:
  bool was_;
};

}  // namespace

flight_result get_or_compile(program_cache& cache, cache_key_ref key,
                             detail::function_ref<object_code()> compile,
                             detail::function_ref<void(const object_code&)> store) {
  // The persistent statistics count compiles, their time, and compiles answered from the cache.
  const std::shared_ptr<cache_statistics> stats = cache.statistics();
  auto answered = [&](object_code code, flight_outcome outcome) {
    if (stats) stats->record_compile_hit();
    return flight_result{std::move(code), outcome};
  };
  // Lookups after the first one are waiting for an entry (or making sure one did not appear
  // meanwhile): their misses are not counted again.
  auto look_again = [&]() {
    const waiting_lookups waiting;
    return cache.get(key);
  };
  {
    detail::trace_span lookup("cache", "lookup");
    auto hit = cache.get(key);
    lookup.arg("found", hit ? "yes" : "no");
    if (hit) return answered(std::move(*hit), flight_outcome::hit);
  }
  const single_flight_options& options = cache.single_flight();
  // Compiles and stores, holding `held` (or no claim). A compile or store that throws abandons
  // the claim first, so that its waiters compile side by side rather than one after another.
  auto compile_and_store = [&](flight_outcome outcome, cache_claim* held) {
    try {
      const auto started = std::chrono::steady_clock::now();
      flight_result result{compile(), outcome};
      if (stats) stats->record_compile(std::chrono::steady_clock::now() - started);
      store(result.code);
      return result;
    } catch (...) {
      if (held != nullptr) held->abandon();
      throw;
    }
  };
  if (!options.enabled) return compile_and_store(flight_outcome::unclaimed, nullptr);

  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + options.max_wait;
  const auto poll_max = std::max(options.poll_max, std::chrono::milliseconds(1));
  auto pause = std::max(options.poll_initial, std::chrono::milliseconds(1));
  bool waited = false;
  // The claim's abandonments (program_cache::claim_abandonments) when it was last seen held.
  std::uint64_t held_mark = 0;
  std::unique_ptr<claim_watch> watch;
  for (;;) {
    const std::uint64_t mark = waited ? cache.claim_abandonments(key) : 0;
    claim_result claim = cache.try_claim(key, options.lease);
    if (claim.status == claim_status::unsupported) {
      return compile_and_store(flight_outcome::unclaimed, nullptr);
    }
    if (claim.status == claim_status::owned) {
      // The holder before us may have stored the entry between our miss and our claim.
      if (auto hit = look_again()) return answered(std::move(*hit), flight_outcome::waited);
      // `claim` lives to the end of this scope: released after the store, or when compile or
      // store throws.
      if (!waited) return compile_and_store(flight_outcome::compiled, claim.claim.get());
      if (mark != held_mark) {
        // The holder gave up without an entry (its compile failed: errors are not cached; or its
        // store failed). Release at once so that every waiter compiles now, side by side, rather
        // than one after another behind each failure.
        claim.claim.reset();
        return compile_and_store(flight_outcome::took_over, nullptr);
      }
      // The holder died (killed, crashed) without an entry: this waiter compiles in its place,
      // holding the claim, and the other waiters keep waiting for it (and, should it die too,
      // for the one after it).
      return compile_and_store(flight_outcome::took_over, claim.claim.get());
    }
    if (!waited) {
      waited = true;
      held_mark = cache.claim_abandonments(key);
      if (options.notify) watch = cache.watch_claim(key);
      // Watching from now on: look again at once, in case the claim came free or the entry
      // landed before the watch began.
      if (watch) {
        if (auto hit = look_again()) return answered(std::move(*hit), flight_outcome::waited);
        continue;
      }
    } else {
      held_mark = mark;
    }
    const auto now = clock::now();
    if (now >= deadline) return compile_and_store(flight_outcome::gave_up, nullptr);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                      std::chrono::milliseconds(1);
    detail::trace_span waiting("cache", "wait");  // another process's compile of this key
    if (watch) {
      // Woken by the entry landing or the claim coming free; polls every poll_max besides (a
      // holder's death, or a notification that cannot reach us: another host's, a full queue).
      (void)watch->wait(std::min(poll_max, left));
    } else {
      std::this_thread::sleep_for(std::min<clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, poll_max);
    }
    if (auto hit = look_again()) return answered(std::move(*hit), flight_outcome::waited);
  }
}

}  // namespace cucore
