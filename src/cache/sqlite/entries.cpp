// One entry at a time in the SQLite cache: get (one statement; the access time is recorded in
// memory and written back later), put and erase (one write transaction each).
#include <algorithm>
#include <vector>

#include "cache/claim_file.hpp"
#include "cache/entry_format.hpp"
#include "cache/sqlite/internal.hpp"

namespace cucore {

using namespace detail::sqlite;

std::optional<object_code> sqlite_program_cache::get(cache_key_ref key) {
  impl& c = *impl_;
  std::vector<std::byte> data;
  std::int64_t written = 0;
  std::int64_t atime = 0;
  {
    std::lock_guard lock(c.mutex);
    c.check_not_closed();
    if (!c.ensure_open_locked(false)) {
      c.errors.fetch_add(1, std::memory_order_relaxed);
      c.misses.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    try {
      statement_scope s(c.st->select_hit);
      s->bind(1, key.bytes());
      s->bind(2, kBlobReadThreshold);
      if (!s->step()) {
        c.misses.fetch_add(1, std::memory_order_relaxed);
        return std::nullopt;
      }
      written = s->column_int64(0);
      atime = s->column_int64(3);
      if (!s->column_is_null(2)) {
        const auto blob = s->column_blob(2);
        data.assign(blob.begin(), blob.end());
      } else {
        detail::sqlite::blob_reader blob(c.db.get(), "blobs", "value", s->column_int64(1));
        data.resize(blob.size());
        blob.read(data);
      }
    } catch (const failure& f) {
      c.after_failure_locked(f);
      if (!f.corrupt()) c.warn(std::string("read failed, treated as a miss: ") + f.what());
      c.misses.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    // Recency: a row read since it was written (odd atime) within kTouchGranularity needs no new
    // access time, so a hot entry costs no write, even to processes that read it once and exit.
    const std::string_view k = key.as_string_view();
    auto pending = c.touches.find(k);
    const bool recently_read = (atime & 1) != 0 && now_stamp() - atime < kTouchGranularity.count();
    if (pending != c.touches.end()) {
      pending->second = c.next_stamp_locked(true);
    } else if (!recently_read) {
      c.touches.emplace(std::string(k), c.next_stamp_locked(true));
    }
    c.maybe_flush_touches_locked();
  }

  detail::decoded_entry decoded;
  try {
    decoded = detail::decode_entry(std::move(data), key.bytes());
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception&) {
    decoded.status = detail::entry_status::malformed;
  }
  if (decoded.status == detail::entry_status::ok && decoded.code) {
    c.hits.fetch_add(1, std::memory_order_relaxed);
    return std::move(decoded.code);
  }

  // A damaged row: a miss, and the row goes unless a peer rewrote it since.
  c.misses.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(c.mutex);
  if (c.closed || !c.db) return std::nullopt;
  c.erase_touch_locked(key.as_string_view());
  try {
    write_transaction txn(c.db.get(), *c.st);
    c.flush_touches_locked();
    {
      statement_scope s(c.st->delete_written);
      s->bind(1, key.bytes());
      s->bind(2, written);
      s->run();
    }
    const bool removed = sqlite3_changes(c.db.get()) > 0;
    c.reclaim_locked();
    txn.commit();
    c.touches.clear();
    if (removed) {
      c.corrupt_dropped.fetch_add(1, std::memory_order_relaxed);
      c.warn("dropped a damaged entry (" + std::string(detail::to_string(decoded.status)) + ")");
    }
  } catch (const failure& f) {
    c.after_failure_locked(f);
    c.warn(std::string("found a damaged entry (") + std::string(detail::to_string(decoded.status)) +
           ") but could not remove it: " + f.what());
  }
  return std::nullopt;
}

void sqlite_program_cache::put(cache_key_ref key, const object_code& code) {
  impl& c = *impl_;
  const std::vector<std::byte> blob = detail::encode_entry(key.bytes(), code);
  const std::uint64_t size = blob.size();
  const auto& cap = c.options.max_size_bytes;
  const bool oversized = cap && size > *cap;

  // A put that stores nothing marks the claims file: a waiter that takes this key's claim over
  // finds no entry, and should compile beside the others rather than after them (see
  // program_cache::claim_abandonments).
  auto mark_claims = [&] {
    detail::claim_file(c.path + ".claims", c.modes.file, c.modes.exact).mark_abandoned();
  };
  std::lock_guard lock(c.mutex);
  c.check_not_closed();
  if (!c.ensure_open_locked(true)) {
    mark_claims();
    c.write_unavailable_locked("put");
    return;
  }
  if (oversized) mark_claims();
  try {
    write_transaction txn(c.db.get(), *c.st);
    c.flush_touches_locked();
    std::optional<std::pair<std::int64_t, std::uint64_t>> old;  // blob id, size
    {
      statement_scope s(c.st->select_entry);
      s->bind(1, key.bytes());
      if (s->step()) {
        old.emplace(s->column_int64(0),
                    static_cast<std::uint64_t>(std::max<std::int64_t>(0, s->column_int64(1))));
      }
    }
    std::size_t evicted = 0;
    if (oversized) {
      // Never stored; and the value it replaces must not outlive the put.
      if (old) {
        statement_scope s(c.st->delete_entry);
        s->bind(1, key.bytes());
        s->run();
      }
    } else {
      if (cap) {
        const std::uint64_t total = c.read_meta_locked().first;
        const std::uint64_t after = total - std::min(total, old ? old->second : 0) + size;
        if (after > *cap) evicted = c.evict_locked(key.bytes(), after - *cap);
      }
      const std::int64_t stamp = c.next_stamp_locked(false);
      const auto write_id = static_cast<std::int64_t>(c.write_ids());
      if (old) {
        {
          statement_scope s(c.st->update_blob);
          s->bind(1, old->first);
          s->bind(2, blob);
          s->run();
        }
        statement_scope s(c.st->update_entry);
        s->bind(1, key.bytes());
        s->bind(2, to_int64(size));
        s->bind(3, stamp);
        s->bind(4, write_id);
        s->run();
      } else {
        {
          statement_scope s(c.st->insert_blob);
          s->bind(1, blob);
          s->run();
        }
        const std::int64_t id = sqlite3_last_insert_rowid(c.db.get());
        statement_scope s(c.st->insert_entry);
        s->bind(1, key.bytes());
        s->bind(2, id);
        s->bind(3, to_int64(size));
        s->bind(4, stamp);
        s->bind(5, write_id);
        s->run();
      }
    }
    c.reclaim_locked();
    txn.commit();
    c.touches.clear();
    c.last_flush = touch_clock_now();
    c.puts.fetch_add(1, std::memory_order_relaxed);
    c.evictions.fetch_add(evicted + (oversized ? 1 : 0), std::memory_order_relaxed);
    if (oversized) {
      log(log_level::debug, c.prefix() + "entry of " + std::to_string(size) +
                                " bytes is larger than max_size_bytes; not stored");
    }
  } catch (const failure& f) {
    c.after_failure_locked(f);
    mark_claims();
    c.write_failed_locked("put", f.what());
  }
}

bool sqlite_program_cache::erase(cache_key_ref key) {
  impl& c = *impl_;
  std::lock_guard lock(c.mutex);
  c.check_not_closed();
  if (!c.ensure_open_locked(true)) {
    c.write_unavailable_locked("erase");
    return false;
  }
  try {
    write_transaction txn(c.db.get(), *c.st);
    c.erase_touch_locked(key.as_string_view());
    c.flush_touches_locked();
    {
      statement_scope s(c.st->delete_entry);
      s->bind(1, key.bytes());
      s->run();
    }
    const bool removed = sqlite3_changes(c.db.get()) > 0;
    c.reclaim_locked();
    txn.commit();
    c.touches.clear();
    c.last_flush = touch_clock_now();
    return removed;
  } catch (const failure& f) {
    c.after_failure_locked(f);
    c.write_failed_locked("erase", f.what());
    return false;
  }
}

}  // namespace cucore
