// Recency, eviction and space in the SQLite cache: access times recorded by reads and written
// back in batches, least-recently-used eviction under the size cap, free pages returned to the
// filesystem.
#include <algorithm>
#include <atomic>
#include <iterator>
#include <vector>

#include "cache/sqlite/internal.hpp"

namespace cucore {

using namespace detail::sqlite;

std::int64_t sqlite_program_cache::impl::next_stamp_locked(bool read) {
  std::int64_t stamp = std::max(now_stamp(), last_stamp + 1);
  if ((stamp & 1) != (read ? 1 : 0)) ++stamp;
  last_stamp = stamp;
  return last_stamp;
}

namespace detail::sqlite {
namespace {
std::atomic<std::int64_t> touch_clock_offset_ms{0};
}  // namespace

void advance_touch_clock_for_testing(std::chrono::milliseconds by) noexcept {
  touch_clock_offset_ms.fetch_add(by.count(), std::memory_order_relaxed);
}

steady::time_point touch_clock_now() noexcept {
  return steady::now() + milliseconds(touch_clock_offset_ms.load(std::memory_order_relaxed));
}
}  // namespace detail::sqlite

std::size_t sqlite_program_cache::impl::flush_touches_locked(std::size_t limit) {
  std::size_t written = 0;
  for (auto it = touches.begin(); it != touches.end() && written < limit; ++it, ++written) {
    statement_scope s(st->touch);
    s->bind(1, as_bytes(it->first));
    s->bind(2, it->second);
    s->run();
  }
  return written;
}

// From a read: writes access times back when the interval has passed (or a backlog is left),
// at most kMaxTouchesPerReadFlush of them, so that no read pays for an unbounded number of
// writes (random reads over many entries record one per hit: tens of thousands a second). It
// waits only briefly for the lock (best effort; they stay pending otherwise).
void sqlite_program_cache::impl::maybe_flush_touches_locked() {
  if (touches.empty()) {
    touch_backlog = false;
    return;
  }
  const auto now = touch_clock_now();
  if (!touch_backlog && options.touch_flush_interval.count() > 0 &&
      now - last_flush < options.touch_flush_interval) {
    return;
  }
  last_flush = now;
  touch_backlog = false;
  const bool shorten =
      options.touch_flush_interval.count() > 0 && options.busy_timeout > kTouchFlushBusyTimeout;
  if (shorten) busy.timeout = kTouchFlushBusyTimeout;
  try {
    write_transaction txn(db.get(), *st);
    const std::size_t written = flush_touches_locked(kMaxTouchesPerReadFlush);
    txn.commit();
    // The first `written` in iteration order: nothing changed `touches` since the flush.
    touches.erase(touches.begin(),
                  std::next(touches.begin(), static_cast<std::ptrdiff_t>(written)));
    touch_backlog = !touches.empty();
  } catch (const failure& f) {
    // Not retried before the interval passes again: a busy database is not polled by every read.
    busy.timeout = options.busy_timeout;
    if (f.corrupt()) {
      after_failure_locked(f);
    } else {
      log(log_level::debug, prefix() + "access times not written yet: " + f.what());
    }
  }
  busy.timeout = options.busy_timeout;
  if (touches.size() > kMaxPendingTouches) {
    touches.clear();
    touch_backlog = false;
  }
}

std::pair<std::uint64_t, std::uint64_t> sqlite_program_cache::impl::read_meta_locked() {
  statement_scope s(st->select_meta);
  if (!s->step()) return {0, 0};
  return {static_cast<std::uint64_t>(std::max<std::int64_t>(0, s->column_int64(0))),
          static_cast<std::uint64_t>(std::max<std::int64_t>(0, s->column_int64(1)))};
}

// Inside a write transaction: deletes least-recently-used entries other than `keep` until at
// least `excess` bytes are freed. Returns how many.
std::size_t sqlite_program_cache::impl::evict_locked(std::optional<std::span<const std::byte>> keep,
                                                     std::uint64_t excess) {
  std::vector<std::vector<std::byte>> victims;
  {
    statement_scope s(st->select_victims);
    if (keep) s->bind(1, *keep);  // unbound (NULL): every entry is a candidate
    std::uint64_t freed = 0;
    while (freed < excess && s->step()) {
      auto key = s->column_blob(0);
      victims.emplace_back(key.begin(), key.end());
      freed += static_cast<std::uint64_t>(std::max<std::int64_t>(0, s->column_int64(1)));
    }
  }
  for (const auto& key : victims) {
    statement_scope s(st->delete_entry);
    s->bind(1, key);
    s->run();
    erase_touch_locked(std::string_view(reinterpret_cast<const char*>(key.data()), key.size()));
  }
  return victims.size();
}

void sqlite_program_cache::impl::erase_touch_locked(std::string_view key) {
  if (auto it = touches.find(key); it != touches.end()) touches.erase(it);
}

// Inside a write transaction: gives free pages back to the filesystem.
void sqlite_program_cache::impl::reclaim_locked() {
  std::int64_t free_pages = 0;
  {
    statement_scope s(st->freelist_count);
    if (s->step()) free_pages = s->column_int64(0);
  }
  if (free_pages > 0) {
    statement_scope s(st->incremental_vacuum);
    s->run();
  }
}

}  // namespace cucore
