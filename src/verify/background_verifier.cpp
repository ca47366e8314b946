// Verify mode's background thread (verify/background_verifier.hpp).
#include "verify/background_verifier.hpp"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "cucore/log.hpp"

namespace cucore::detail {

namespace {

struct verifier_state {
  std::mutex mutex;
  std::condition_variable wake;  // a check queued, or exiting
  std::condition_variable idle;  // the queue ran dry
  std::deque<std::function<void()>> queue;
  bool checking = false;  // a check is running
  bool exiting = false;
  bool exit_handler_after_first_check = false;
  std::thread thread;
};

// Leaked, as every piece the compilers may still touch at exit; replaced in a forked child,
// whose copy may hold a lock of a thread that does not exist there.
verifier_state* state = nullptr;
std::mutex* state_mutex = new std::mutex;

void stop_at_exit() noexcept {
  verifier_state* s = nullptr;
  {
    std::lock_guard lock(*state_mutex);
    s = state;
  }
  if (s == nullptr) return;
  {
    std::lock_guard lock(s->mutex);
    s->exiting = true;
    s->queue.clear();
  }
  s->wake.notify_all();
  s->idle.notify_all();
  // The check in progress finishes first: the compilers' own exit handlers must not run under it.
  if (s->thread.joinable() && s->thread.get_id() != std::this_thread::get_id()) s->thread.join();
}

void run_checks(verifier_state* s) {
  pthread_setname_np(pthread_self(), "cucore-verify");
  std::unique_lock lock(s->mutex);
  for (;;) {
    s->wake.wait(lock, [s] { return s->exiting || !s->queue.empty(); });
    if (s->exiting) break;
    auto check = std::move(s->queue.front());
    s->queue.pop_front();
    s->checking = true;
    lock.unlock();
    try {
      check();
    } catch (const std::exception& e) {
      cucore::log(log_level::warning,
                  std::string("verify: a background check failed: ") + e.what());
    } catch (...) {
      cucore::log(log_level::warning, "verify: a background check failed");
    }
    check = nullptr;  // what it held goes on this thread, before the idle signal
    lock.lock();
    s->checking = false;
    if (!s->exit_handler_after_first_check && !s->exiting) {
      // Exit handlers run last registered first: registered again once the compilers have run
      // (and registered theirs), the join comes before them.
      s->exit_handler_after_first_check = true;
      std::atexit(stop_at_exit);
    }
    if (s->queue.empty()) s->idle.notify_all();
  }
  s->checking = false;
  s->idle.notify_all();
}

void forget_in_child() noexcept;

// The process's state, the thread started on first use.
verifier_state* started() {
  std::lock_guard lock(*state_mutex);
  if (state == nullptr) {
    static std::once_flag registered;
    std::call_once(registered, [] {
      pthread_atfork(nullptr, nullptr, forget_in_child);
      std::atexit(stop_at_exit);
    });
    auto* s = new verifier_state;
    s->thread = std::thread(run_checks, s);
    state = s;
  }
  return state;
}

struct stale_entry {
  const void* cache;
  program_cache_key key;
};
std::atomic<std::size_t> stale_count{0};
std::mutex* stale_mutex = new std::mutex;
auto* stale_entries = new std::vector<stale_entry>;

void forget_in_child() noexcept {
  state_mutex = new std::mutex;
  state = nullptr;
  stale_mutex = new std::mutex;
  stale_entries = new std::vector<stale_entry>;
  stale_count.store(0);
}

}  // namespace

bool queue_verification(std::function<void()> check) {
  verifier_state* s = started();
  {
    std::lock_guard lock(s->mutex);
    if (s->exiting || s->queue.size() >= kMaxQueuedVerifications) return false;
    s->queue.push_back(std::move(check));
  }
  s->wake.notify_one();
  return true;
}

void drain_verifications() {
  verifier_state* s = nullptr;
  {
    std::lock_guard lock(*state_mutex);
    s = state;
  }
  if (s == nullptr) return;
  std::unique_lock lock(s->mutex);
  s->idle.wait(lock, [s] { return s->exiting || (s->queue.empty() && !s->checking); });
}

void post_stale_entry(const void* cache, const program_cache_key& key) {
  std::lock_guard lock(*stale_mutex);
  stale_entries->push_back({cache, key});
  stale_count.store(stale_entries->size(), std::memory_order_release);
}

std::vector<program_cache_key> take_stale_entries(const void* cache) {
  if (stale_count.load(std::memory_order_acquire) == 0) return {};
  std::vector<program_cache_key> out;
  std::lock_guard lock(*stale_mutex);
  std::erase_if(*stale_entries, [&](stale_entry& e) {
    if (e.cache != cache) return false;
    out.push_back(std::move(e.key));
    return true;
  });
  stale_count.store(stale_entries->size(), std::memory_order_release);
  return out;
}

}  // namespace cucore::detail
