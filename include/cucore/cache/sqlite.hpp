// A program cache in one SQLite file, shared by threads and processes.
//
// What is on disk
//   <file>         the SQLite database. Each entry's bytes are the shared, versioned and
//                  checksummed entry format (the directory backend's), stored as a blob and
//                  verified on every read. Schema version in PRAGMA user_version, and
//                  PRAGMA application_id marks the file as a cucore cache.
//   <file>-wal, <file>-shm (or <file>-journal)   SQLite's own, while connections are open.
//   <file>.stats/  the persistent statistics (cucore/cache/statistics.hpp), made on first use.
//   <file>.lock    an empty coordination file. Every cache object holds a shared flock() on it
//                  while it has the database open; moving a damaged file aside takes it
//                  exclusively, so no file is ever renamed under a live cucore connection.
//   A symbolic link at <file> is refused (the cache stays unavailable), as the directory
//   backend refuses links (O_NOFOLLOW).
//
// Trust (options.access; docs/cache-sqlite.md, "Trust model"): the directory holding <file>,
// <file> and SQLite's side files (-wal, -shm, -journal: a planted journal would be replayed into
// the database) follow the directory backend's rules. In private mode (the default) each must be
// owned by you or root and writable by no one else; in shared mode anything but world-writable is
// accepted. The constructor throws invalid_argument for one that is not (saying why and how to
// fix it), and a file replaced later by one that is not leaves the cache unavailable (a warning).
// The database is created with the cache's modes (shared mode: 0666 & ~umask, umask default 002);
// SQLite gives its side files the database's mode.
//
// Guarantees
//   - A read returns a value some put() stored for that key, or a miss. A damaged row (checksum,
//     key echo, format version) is a miss and is deleted, guarded by a write id so that a value a
//     peer wrote in the meantime survives.
//   - Every write is one SQLite transaction (BEGIN IMMEDIATE): a process killed at any point
//     loses at most the write it was doing. synchronous=NORMAL under WAL (a power loss may undo
//     the last writes, never corrupt), FULL under a rollback journal.
//   - max_size_bytes is a hard cap on the sum of stored entry sizes (header + code), enforced in
//     the same transaction as the insert: after any successful put the total is within the cap,
//     whatever other processes do. Least-recently-read entries go first. Freed pages go back to
//     the filesystem (auto_vacuum=INCREMENTAL + incremental_vacuum in the same transaction), so
//     the file stays within the cap plus SQLite's page overhead (plus the -wal file, a few MiB at
//     most, while connections are open). An entry larger than the cap is not stored, and the
//     value it would have replaced is removed.
//   - "database is locked" beyond busy_timeout is a miss (get) or a skipped write (put, erase,
//     clear, trim: a warning, or cucore::error under write_failure_policy::strict). It never moves
//     or deletes the file.
//   - A file that is not an SQLite database, is damaged (SQLITE_NOTADB/SQLITE_CORRUPT on open; an
//     SQLITE_CORRUPT from an operation is first confirmed by PRAGMA integrity_check), or holds
//     another schema (another application's, or an older cucore's) is renamed to
//     <file>.corrupt-<UTC time>-<pid> (its -wal/-shm/-journal alongside) and a fresh cache is
//     created, with a warning. Only when no other process has the file open: until then this
//     object behaves as an always-missing cache (with one warning) and retries every second.
//     There is no integrity check on a normal open (it would read the whole file).
//   - A file written by a newer cucore schema is left alone: always missing, with a warning.
//   - A file deleted or replaced behind the cache's back (rm, another tool) is noticed before the
//     next write and within a second by reads, and the path is opened afresh.
//
// Recency: a get records the access time in memory; the recorded times are written in one
// transaction at the next write (before it evicts), at most every touch_flush_interval during
// reads (waiting at most 20 ms for the lock; at most 128 per read, the following reads writing
// the rest 128 at a time), and on close. Each row keeps the latest access time
// any process recorded (max), so across processes the LRU order is exact up to that delay. A read
// of a row already read in the last minute records nothing: hot entries cost no write, even to
// processes that read once and exit, and the LRU order is exact up to that minute.
//
// Journal: WAL on local filesystems. On network and cluster filesystems (NFS, SMB/CIFS, 9p, AFS,
// Ceph, Lustre, GPFS, GFS2, OCFS2, FUSE and a few more, detected with statfs) WAL corrupts the
// database, so a new cache uses a rollback journal (DELETE) there, with a warning, and an existing
// WAL file is switched to it (or, when other connections prevent that, left alone: unavailable).
// An existing file keeps the journal mode it has on a local filesystem.
//
// Thread safety: an object may be shared by threads. It owns one connection, used under a mutex
// (encoding and decoding, the checksum pass, happen outside it); SQLite gives no read parallelism
// within one connection anyway, and a hit holds the mutex for a few microseconds. Any number of
// processes may use the same file. Do not carry an open cache across fork(): open it in the child.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "cucore/cache/program_cache.hpp"

namespace cucore {

enum class sqlite_journal {
  automatic,  // WAL, unless the file is on a network filesystem (then a rollback journal)
  wal,        // WAL even on a network filesystem (only when every process runs on one host)
  rollback,   // a rollback journal (journal_mode=DELETE) everywhere
};

struct sqlite_cache_options {
  // Hard cap on the total stored bytes, enforced at write time; 0 is rejected.
  std::optional<std::uint64_t> max_size_bytes{};
  // How long an operation waits for another connection's lock before giving up.
  std::chrono::milliseconds busy_timeout{5000};
  write_failure_policy on_write_failure = write_failure_policy::warn;
  sqlite_journal journal = sqlite_journal::automatic;
  // How often reads write their coalesced access times back (writes and close always do).
  // 0 writes them back on every read.
  std::chrono::milliseconds touch_flush_interval{1000};
  // Whom the cache trusts: the file, its directory and SQLite's side files (-wal, -shm,
  // -journal) are checked as the directory backend checks its directories and entries (see
  // cache_access and docs/cache-sqlite.md, "Trust model").
  cache_access access = cache_access::private_to_user;
  // As file_stream_cache_options::umask, for the database file (SQLite gives its side files the
  // database's mode) and <file>.lock.
  std::optional<unsigned> umask{};
  // Keep persistent statistics in <file>.stats/ (cucore/cache/statistics.hpp). Off:
  // statistics() is nullptr and only this object's stats() count.
  bool statistics = true;
  // Opt-in: read the database through a memory map of up to this many bytes (SQLite's
  // PRAGMA mmap_size; SQLite caps it at its SQLITE_MAX_MMAP_SIZE, 2 GiB in most builds) instead
  // of a pread() per page: a hit on a 100k-entry cache costs ~30% less. Off (0) by default: a
  // mapped file that something other than SQLite truncates or rewrites in place (truncate, cp or
  // a restore over it, another user of a shared cache), or a disk read error, raises SIGBUS in
  // every process that has it mapped, where pread() gives an error this cache survives (a miss,
  // the file moved aside). Only for a private cache on a local disk. Ignored on network
  // filesystems (no coherent page cache across hosts).
  std::uint64_t mmap_size_bytes = 0;
};

class sqlite_program_cache final : public program_cache {
 public:
  // Opens or creates `file`, creating its parent directories. Throws invalid_argument for bad
  // options; when the parent directory cannot be created, cucore::error under
  // write_failure_policy::strict, else a warning and an always-missing cache. Anything wrong with
  // the file itself degrades (see above) rather than throwing.
  explicit sqlite_program_cache(std::filesystem::path file, sqlite_cache_options options = {});
  ~sqlite_program_cache() override;
  sqlite_program_cache(const sqlite_program_cache&) = delete;
  sqlite_program_cache& operator=(const sqlite_program_cache&) = delete;

  std::optional<object_code> get(cache_key_ref key) override;
  void put(cache_key_ref key, const object_code& code) override;
  bool erase(cache_key_ref key) override;
  // Read from a running total kept by triggers: O(1). Throw cucore::error when the database
  // cannot be read (locked beyond busy_timeout, unavailable).
  std::size_t size() override;
  std::uint64_t size_bytes() override;
  void clear() override;
  cache_stats stats() const override;
  // <file>.stats/, beside the database (no write transaction per hit): see
  // cucore/cache/statistics.hpp. nullptr with options.statistics off.
  std::shared_ptr<cache_statistics> statistics() const override;
  void record_statistics_in(std::shared_ptr<cache_statistics> store, cache_tier tier) override;
  // Maintenance. list() and verify() throw cucore::error when the database cannot be read;
  // trim() follows on_write_failure.
  std::vector<cache_entry_info> list() override;
  cache_verify_report verify(bool remove_bad) override;
  std::size_t trim(std::uint64_t max_size_bytes) override;
  std::string description() const override;
  // <file>.compiler-versions, beside the database.
  std::optional<std::filesystem::path> compiler_version_memo() const override;
  // Single-flight: a lock on one byte of FILE.claims per key (src/cache/claim_file.hpp), held by
  // an open file, so a killed holder's claim dies with it. `lease` is not needed.
  claim_result try_claim(cache_key_ref key, std::chrono::milliseconds lease) override;
  // FILE.claims's times, which an abandoned claim or a failed put sets (one mark for all keys).
  std::uint64_t claim_abandonments(cache_key_ref key) override;
  // inotify on FILE.claims: wakes when the key's lock comes free (released after the put, or its
  // holder died); nullptr without inotify (the waiter polls).
  std::unique_ptr<claim_watch> watch_claim(cache_key_ref key) override;
  // Writes back pending access times (best effort), finalizes the statements, closes the
  // connection and releases the lock file. Idempotent. Any later call but stats(), description()
  // and file() throws cucore::error.
  void close() noexcept override;

  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  struct impl;
  std::filesystem::path file_;
  std::unique_ptr<impl> impl_;
};

}  // namespace cucore
