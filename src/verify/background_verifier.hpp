#pragma once
// Verify mode's background thread (docs/verify.md, "In the background"): a sampled hit below rate
// 1 returns at once and its check runs here, one at a time, off the caller's critical path. And
// where a stale entry found here waits for removal when its cache could not be reached.

#include <cstddef>
#include <functional>
#include <vector>

#include "cucore/cache/key.hpp"

namespace cucore::detail {

// The most checks that wait at once: a sample beyond it is dropped (the hit stays unverified), so
// a burst of hits cannot grow memory or keep the thread busy long after it.
inline constexpr std::size_t kMaxQueuedVerifications = 16;

// Queues `check` for the process's verify thread (started on first use); false when
// kMaxQueuedVerifications wait already or the process is exiting. At exit the check in progress
// is waited for (at most one compile) and those still queued are dropped. A forked child starts
// with an empty queue and no thread.
bool queue_verification(std::function<void()> check);

// Waits until every queued check has run (cucore::wait_for_background_verification).
void drain_verifications();

// A stale entry the thread found in a cache it could not reach (one not owned by a
// std::shared_ptr): removed by this process's next compile through that cache object. `cache`
// identifies the object only; it is never dereferenced here.
void post_stale_entry(const void* cache, const program_cache_key& key);
// The stale entries posted for `cache`, taken (one relaxed load when there are none).
std::vector<program_cache_key> take_stale_entries(const void* cache);

}  // namespace cucore::detail
