// Maintenance of the SQLite cache, as `cucore cache` uses it: counts from the running totals,
// clear, trim, and the batched scans behind list and verify.
#include <algorithm>
#include <vector>

#include "cache/entry_format.hpp"
#include "cache/key_files.hpp"
#include "cache/sqlite/internal.hpp"

namespace cucore {

using namespace detail::sqlite;

namespace {

// One row as maintenance scans read it.
struct scanned_row {
  std::vector<std::byte> key;
  std::int64_t written = 0;
  std::int64_t size = 0;
  std::int64_t atime = 0;
  bool has_blob = false;
  std::vector<std::byte> blob;
};

}  // namespace

std::pair<std::uint64_t, std::uint64_t> sqlite_program_cache::impl::read_meta() {
  std::lock_guard lock(mutex);
  check_not_closed();
  if (!ensure_open_locked(false)) throw error(prefix() + unavailable);
  try {
    return read_meta_locked();
  } catch (const failure& f) {
    after_failure_locked(f);
    throw error(prefix() + f.what());
  }
}

std::size_t sqlite_program_cache::size() {
  return static_cast<std::size_t>(impl_->read_meta().second);
}

std::uint64_t sqlite_program_cache::size_bytes() {
  return impl_->read_meta().first;
}

void sqlite_program_cache::clear() {
  impl& c = *impl_;
  std::lock_guard lock(c.mutex);
  c.check_not_closed();
  // Temp files of the key's files beside the database that a killed writer left.
  detail::sweep_key_files(*compiler_version_memo());
  if (!c.ensure_open_locked(true)) {
    c.write_unavailable_locked("clear");
    return;
  }
  try {
    write_transaction txn(c.db.get(), *c.st);
    detail::sqlite::exec(c.db.get(), "DELETE FROM entries");
    c.reclaim_locked();
    txn.commit();
    c.touches.clear();
  } catch (const failure& f) {
    c.after_failure_locked(f);
    c.write_failed_locked("clear", f.what());
  }
}

std::size_t sqlite_program_cache::trim(std::uint64_t max_size_bytes) {
  impl& c = *impl_;
  std::lock_guard lock(c.mutex);
  c.check_not_closed();
  if (!c.ensure_open_locked(true)) {
    c.write_unavailable_locked("trim");
    return 0;
  }
  try {
    write_transaction txn(c.db.get(), *c.st);
    c.flush_touches_locked();
    const std::uint64_t total = c.read_meta_locked().first;
    std::size_t evicted = 0;
    if (total > max_size_bytes) evicted = c.evict_locked(std::nullopt, total - max_size_bytes);
    c.reclaim_locked();
    txn.commit();
    c.touches.clear();
    c.evictions.fetch_add(evicted, std::memory_order_relaxed);
    return evicted;
  } catch (const failure& f) {
    c.after_failure_locked(f);
    c.write_failed_locked("trim", f.what());
    return 0;
  }
}

// Reads all rows in key order, a batch at a time (at most 64 rows or 16 MiB), without holding
// the mutex or a read transaction between batches; `visit` runs outside the lock.
template <class Visit>
void sqlite_program_cache::impl::scan_rows(Visit visit) {
  constexpr int kMaxRows = 64;
  constexpr std::size_t kMaxBytes = 16 << 20;
  std::optional<std::vector<std::byte>> after;
  for (bool done = false; !done;) {
    std::vector<scanned_row> rows;
    {
      std::lock_guard lock(mutex);
      check_not_closed();
      if (!ensure_open_locked(false)) throw error(prefix() + unavailable);
      try {
        statement s(db.get(),
                    after ? "SELECT e.key, e.written, e.size, e.atime, b.value FROM entries AS e "
                            "LEFT JOIN blobs AS b ON b.id = e.id WHERE e.key > ?1 ORDER BY e.key"
                          : "SELECT e.key, e.written, e.size, e.atime, b.value FROM entries AS e "
                            "LEFT JOIN blobs AS b ON b.id = e.id ORDER BY e.key",
                    false);
        if (after) s.bind(1, *after);
        std::size_t bytes = 0;
        done = true;
        while (s.step()) {
          scanned_row r;
          auto k = s.column_blob(0);
          r.key.assign(k.begin(), k.end());
          r.written = s.column_int64(1);
          r.size = s.column_int64(2);
          r.atime = s.column_int64(3);
          r.has_blob = !s.column_is_null(4);
          auto b = s.column_blob(4);
          r.blob.assign(b.begin(), b.end());
          bytes += r.blob.size();
          rows.push_back(std::move(r));
          if (rows.size() == kMaxRows || bytes >= kMaxBytes) {
            done = false;  // more, perhaps: the next batch starts after this key
            break;
          }
        }
      } catch (const failure& f) {
        after_failure_locked(f);
        throw error(prefix() + f.what());
      }
    }
    if (!rows.empty()) after = rows.back().key;
    for (auto& r : rows) visit(r);
  }
}

std::vector<cache_entry_info> sqlite_program_cache::list() {
  impl& c = *impl_;
  std::vector<cache_entry_info> out;
  c.scan_rows([&](scanned_row& r) {
    if (!r.has_blob) return;
    auto header = detail::read_entry_header(r.blob);
    if (!header) return;  // damaged: verify() reports it
    cache_entry_info info = detail::entry_info(std::move(*header), r.blob.size());
    info.key = std::move(r.key);  // the row's
    info.last_used = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::microseconds(r.atime)));
    out.push_back(std::move(info));
  });
  {
    // Reads of this object not yet written back.
    std::lock_guard lock(c.mutex);
    for (auto& info : out) {
      auto it = c.touches.find(
          std::string_view(reinterpret_cast<const char*>(info.key.data()), info.key.size()));
      if (it == c.touches.end()) continue;
      const auto t = std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::microseconds(it->second)));
      if (!info.last_used || *info.last_used < t) info.last_used = t;
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const cache_entry_info& a, const cache_entry_info& b) {
                     return a.last_used > b.last_used;  // most recently used first
                   });
  return out;
}

cache_verify_report sqlite_program_cache::verify(bool remove_bad) {
  impl& c = *impl_;
  cache_verify_report report;
  std::vector<std::pair<std::vector<std::byte>, std::int64_t>> bad;  // key, write id
  c.scan_rows([&](scanned_row& r) {
    ++report.entries;
    bool good = false;
    if (r.has_blob && r.size == static_cast<std::int64_t>(r.blob.size())) {
      try {
        good = detail::decode_entry(std::move(r.blob), r.key).status == detail::entry_status::ok;
      } catch (const std::bad_alloc&) {
        throw;
      } catch (const std::exception&) {
        good = false;
      }
    }
    if (good) {
      ++report.ok;
    } else {
      ++report.corrupt;
      bad.emplace_back(std::move(r.key), r.written);
    }
  });
  if (!remove_bad) return report;
  // Temp files of the key's files beside the database that a killed writer left.
  detail::sweep_key_files(*compiler_version_memo());

  std::lock_guard lock(c.mutex);
  c.check_not_closed();
  if (!c.ensure_open_locked(true)) throw error(c.prefix() + c.unavailable);
  try {
    write_transaction txn(c.db.get(), *c.st);
    for (const auto& [key, written] : bad) {
      statement_scope s(c.st->delete_written);
      s->bind(1, key);
      s->bind(2, written);
      s->run();
      if (const int n = sqlite3_changes(c.db.get()); n > 0) {
        report.removed += static_cast<std::size_t>(n);
        continue;
      }
      // Nothing matched: a peer replaced or removed the row since the scan, or the row is one
      // cucore never writes, whose key or write id is of another SQL type (a TEXT key, a REAL or
      // TEXT write id: another program's, or a damaged file's), which the typed delete above
      // cannot match. Such a row can never be an entry (no lookup finds it), so it goes whatever
      // it holds; without this it was counted corrupt on every run and never removed.
      statement foreign(c.db.get(),
                        "DELETE FROM entries WHERE CAST(key AS BLOB) = ?1 AND "
                        "(typeof(key) <> 'blob' OR typeof(written) <> 'integer')",
                        false);
      foreign.bind(1, key);
      foreign.run();
      report.removed += static_cast<std::size_t>(sqlite3_changes(c.db.get()));
    }
    // Repairs no code path should ever need: blobs without an entry, a drifted running total.
    detail::sqlite::exec(c.db.get(), "DELETE FROM blobs WHERE id NOT IN (SELECT id FROM entries)");
    if (const int orphans = sqlite3_changes(c.db.get()); orphans > 0) {
      c.warn("removed " + std::to_string(orphans) + " blobs without an entry");
    }
    {
      statement s(c.db.get(),
                  "SELECT (SELECT count(*) FROM meta) = 1 AND "
                  "(SELECT total_bytes FROM meta) IS (SELECT coalesce(sum(size), 0) FROM entries) "
                  "AND (SELECT entry_count FROM meta) IS (SELECT count(*) FROM entries)",
                  false);
      if (s.step() && s.column_int64(0) == 0) {
        s.reset();
        c.warn("the running total was wrong; recomputed it");
        detail::sqlite::exec(c.db.get(),
                             "DELETE FROM meta; INSERT INTO meta(total_bytes, entry_count) "
                             "SELECT coalesce(sum(size), 0), count(*) FROM entries");
      }
    }
    c.reclaim_locked();
    txn.commit();
  } catch (const failure& f) {
    c.after_failure_locked(f);
    c.write_failed_locked("verify", f.what());
    report.removed = 0;
    return report;
  }
  c.corrupt_dropped.fetch_add(report.removed, std::memory_order_relaxed);
  return report;
}

}  // namespace cucore
