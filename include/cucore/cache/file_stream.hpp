// A program cache in a directory of atomically written files, shared by many processes.
//
// Layout under the root:
//
//   entries/ab/<62 hex>   one entry per file, named by the SHA-256 of the key (ab = its first byte)
//   tmp/                  staging for writes (mode 0700), and entries being evicted
//   compiler-versions     the compiler version memo (program_cache::compiler_version_memo)
//   claims                an empty file whose byte-range locks are the single-flight claims
//   stats/                the persistent statistics (cucore/cache/statistics.hpp), made on first
//   use
//
// Each file holds the versioned, checksummed entry format (header with the full key, then the
// code); see src/cache/entry_format.hpp. A read verifies all of it, so a damaged, truncated,
// foreign or misplaced file is a miss (and is removed), never a wrong value.
//
// Writes: the entry is written to a new file in tmp/ (O_EXCL), fsync'ed (option), and renamed
// over entries/ab/<name>: readers see the old entry or the new one, never a part. With `fsync`
// the shard directory is fsync'ed after the rename too (and a directory the put had to create,
// in its parent), so a put that returned survives a power loss. Without it a power loss may lose
// recent puts (or leave a torn file, which reads as a miss): the checksum makes that safe, so
// turning fsync off trades durability for speed only. A process killed at any point leaves
// either the old entry or the new one, plus at most a temp file (see below).
//
// Recency: the last use of an entry (its write, or a read) is its access time. A write sets it
// explicitly, and a read sets it on the descriptor it read (futimens, mtime untouched), because
// relatime/noatime mounts make the kernel's own atime useless and the kernel's coarse clock
// would tie entries used within a few milliseconds. A read within a second of the recorded last
// use is not recorded again (it saves a metadata write on hot entries; the order of use is then
// known to within a second).
//
// Size cap (`max_size_bytes`): a soft cap on entries plus files in tmp/. Each cache object keeps
// a running estimate (seeded by a scan on open) that its own puts and erases update; when the
// estimate passes the cap, or after cap/8 bytes of puts since the last scan (so that several
// writers cannot each stay under the cap while together far over it), the put scans the
// directory, corrects the estimate, and if the total is over the cap evicts least-recently-used
// entries until it is at most 90% of the cap (so that a full cache does not rescan on every put).
// Every removal is guarded: the candidate is renamed into tmp/ and removed only if it is still the
// file (device, inode, size, mtime) the scan saw and has not been read since; a file a peer
// replaced (or read) in the meantime is put back, and one a peer already removed counts as
// removed. The total is corrected in every case, so a lost race never makes eviction remove more
// (the over-eviction bug of the reference design). While a file is aside, a reader of that key
// sees a miss, never a wrong value. An entry larger than the cap is not stored. With several
// writers the directory can exceed the cap by up to about cap/8 per writer between scans.
//
// Temp files: a temp file is removed by the next open, eviction or clear() once it is older than
// an hour, or at once when its name shows it was made by a process on this host (same boot, same
// pid namespace) that no longer exists: a killed writer's temp file does not count against the
// cap for an hour. A live writer's temp file is never touched.
//
// Permissions and trust (docs/cache-directory.md, "Trust model"). Anyone who can write a cache
// can make its readers run their code: keys are computable from public inputs and the checksum
// detects damage, not forgery. So under options.access:
//   - private_to_user (the default): the root, entries/ and tmp/ must be owned by you (the
//     effective uid) or root and be neither group- nor world-writable (sticky bit or not);
//     otherwise the constructor throws invalid_argument saying whose it is, its mode, and how to
//     fix it (chmod/chown, or opt in to shared). An entry file owned by another user than
//     the one that opened the cache (and not root) or writable by group or world is a miss with
//     a warning, left in place (a put of the key replaces it; verify() counts it as bad and can
//     remove it). Directories are created 0755 and entry files 0644 (tmp/ 0700), less the process
//     umask, or exactly 0777/0666 less options.umask (with group and world write always removed).
//   - shared: directories and entries of other users and group write access are accepted (you
//     trust whoever can write the cache); anything world-writable is refused as above (an entry:
//     a miss). Directories (tmp/ included) are created 0777 & ~umask and files 0666 & ~umask,
//     exactly, whatever the process umask (umask default 002). Make the root group-owned and
//     set-group-ID (chmod 2770) so that everything created inside belongs to the group.
// Always refused (invalid_argument): a root that is a symbolic link owned by another user (not
// you, not root), who could point it anywhere (a symlink of yours or root's is followed); an
// entries/ or tmp/ that is a symbolic link or not a directory; a root that is not a directory.
// Existing directories keep their modes. Nothing inside the cache is followed through a symbolic
// link: a symlink where an entry file should be is a miss and is removed (not its target); entry
// files are opened with O_NOFOLLOW (and O_NONBLOCK, so a FIFO cannot hang a read); directories are
// scanned with O_NOFOLLOW and lstat; every descriptor is O_CLOEXEC. Parent directories of the
// root are not checked: keep the cache under a directory only you (or the group) can write.
//
// What is not an entry where an entry (or a shard directory) belongs, a directory say, is a miss
// that get() warns about (once per path), counted in stats().errors. A put of that key clears it
// (removing a FIFO, symlink or file; a directory with everything inside it) and stores the entry,
// counting one corrupt_dropped; verify(true) clears them all. A directory is removed without
// following a symbolic link inside it (each link is removed, not its target) and without entering
// another file system; one that cannot be removed entirely (something inside it cannot be
// deleted) is moved aside into tmp/ (or, failing that, renamed beside itself) so that the key
// works again, and the message says where it is and to remove it by hand.
//
// Thread safety: every method may be called concurrently from any number of threads and
// processes on the same directory (get/put/erase take no lock; the size estimate and eviction
// are serialised within one cache object by a mutex; between processes the guarded renames do
// the work). close() must not race with other calls on the same object. A cache object may be
// used in a child after fork() if no other thread was inside one of its methods at the fork.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/statistics.hpp"

namespace cucore {

struct file_stream_cache_options {
  // Soft cap on the bytes in the directory (entries and temp files), least-recently-used
  // eviction (a read counts as a use, not only a write); unset: unbounded. 0 is rejected
  // (invalid_argument).
  std::optional<std::uint64_t> max_size_bytes{};
  // fsync (fdatasync) each entry before renaming it into place, and its directory after. Off,
  // puts are faster and a power loss may lose recent entries, never serve a damaged one.
  bool fsync = true;
  // What a failed write does (disk full, read-only directory, permissions): `warn` logs a warning
  // (the first failure of each kind at warning level, repeats at debug level), counts it in
  // stats().errors and returns as if the entry was not cached; `strict` throws cucore::error.
  write_failure_policy on_write_failure = write_failure_policy::warn;
  // Whom the cache trusts (see "Trust model" above and cache_access).
  cache_access access = cache_access::private_to_user;
  // Permission bits removed from what the cache creates (ccache's umask): directories get
  // 0777 & ~umask, files 0666 & ~umask, whatever the process umask. Unset: in private mode the
  // process umask applies to 0755/0644; in shared mode 002. Private mode always removes group and
  // world write as well; shared mode rejects a umask that leaves world write (invalid_argument),
  // as it does one above 0777.
  std::optional<unsigned> umask{};
  // Keep persistent statistics in root/stats/ (cucore/cache/statistics.hpp). Off: statistics()
  // is nullptr and only this object's stats() count.
  bool statistics = true;
  // A read-only layer (docs/cache-layers.md): the directory is only read. Nothing is created,
  // touched (no access time recorded), removed or swept; a damaged entry is a miss left in place;
  // no statistics, claims or compiler version memo; put, erase, clear and trim throw
  // cucore::error, and verify() reports without removing. Works on a read-only mount.
  bool read_only = false;
};

class file_stream_program_cache final : public program_cache {
 public:
  // Opens (creating what is missing) the cache at `root`, made absolute against the current
  // directory. Throws invalid_argument for max_size_bytes == 0 and for a root refused by the
  // trust rules above; a root that cannot be created is a write failure (`strict`: throws;
  // `warn`: logs, and the cache misses until the directory appears).
  explicit file_stream_program_cache(std::filesystem::path root = default_cache_dir(),
                                     file_stream_cache_options options = {});
  ~file_stream_program_cache() override;
  file_stream_program_cache(const file_stream_program_cache&) = delete;
  file_stream_program_cache& operator=(const file_stream_program_cache&) = delete;

  // A miss for an absent, unreadable, damaged or foreign entry (damaged ones are removed,
  // stat-guarded, and counted in stats().corrupt_dropped when removed). A directory in the
  // entry's place is a miss with a warning naming it, left for put() or verify(). Records the
  // read for eviction.
  std::optional<object_code> get(cache_key_ref key) override;
  // Stores atomically, clearing a directory (or a file where the shard directory belongs) that
  // holds the entry's place; failures follow on_write_failure.
  void put(cache_key_ref key, const object_code& code) override;
  // Removes the entry; false if there was none (or, under `warn`, if it could not be removed).
  bool erase(cache_key_ref key) override;
  // Files under entries/*/ and their total size: a directory scan each call (orphans from other
  // format versions and damaged files included; temp files excluded).
  std::size_t size() override;
  std::uint64_t size_bytes() override;
  // Removes every entry (guarded: an entry a peer replaces meanwhile survives) and stale temp
  // files; temp files of writes in progress are left alone. Shard directories are kept.
  void clear() override;
  cache_stats stats() const override;
  // root/stats/ (see cucore/cache/statistics.hpp); nullptr with options.statistics off.
  std::shared_ptr<cache_statistics> statistics() const override { return statistics_; }
  void record_statistics_in(std::shared_ptr<cache_statistics> store, cache_tier tier) override;
  // Entries whose header reads correctly and whose file name matches their key; payloads are not
  // read (a bounded prefix of each file is). last_used is the recorded last use (the atime).
  std::vector<cache_entry_info> list() override;
  // Reads and checks every file under entries/ (format, checksum, key echo against the file's
  // name); anything else there (stray files, symlinks, FIFOs, directories inside a shard) counts
  // as corrupt. remove_bad removes them, guarded like eviction; a directory with what is inside it
  // (or moved aside, see above), and directories earlier repairs left in tmp/ are retried. The
  // report's notes say what was not an entry and what was done about it.
  cache_verify_report verify(bool remove_bad) override;
  // Evicts least-recently-used entries until the entries total at most max_size_bytes (temp
  // files not counted); returns how many it removed.
  std::size_t trim(std::uint64_t max_size_bytes) override;
  std::string description() const override;
  // root/compiler-versions: outside entries/ and tmp/, so eviction, clear() and verify() leave it.
  std::optional<std::filesystem::path> compiler_version_memo() const override;
  bool read_only() const noexcept override { return options_.read_only; }
  // Single-flight: a lock on one byte of root/claims per key (src/cache/claim_file.hpp), held
  // by an open file, so a killed holder's claim dies with it. `lease` is not needed.
  claim_result try_claim(cache_key_ref key, std::chrono::milliseconds lease) override;
  // The claims file's times, which an abandoned claim or a failed put sets (one mark for all keys).
  std::uint64_t claim_abandonments(cache_key_ref key) override;
  // inotify: wakes when the entry is renamed into its shard directory or the key's lock comes free
  // (released, or its holder died); nullptr without inotify (the waiter polls).
  std::unique_ptr<claim_watch> watch_claim(cache_key_ref key) override;
  // Marks the cache closed (it holds no descriptors between calls); later calls throw
  // cucore::error, except stats(), description() and root().
  void close() noexcept override;

  const std::filesystem::path& root() const noexcept { return root_; }

 private:
  struct scan_entry;
  struct scan_result;
  struct removal_outcome;
  struct obstacle_outcome;

  void check_open() const;
  void check_writable(const char* what) const;  // check_open, and not a read-only layer
  std::string entry_path(cache_key_ref key, std::string* shard_dir = nullptr) const;
  // `hint`, when given, follows the error in the message: what to do about it.
  void write_failed(const std::string& what, const std::string& path, std::error_code ec,
                    const std::string& hint = {});
  // Counts a failure that degrades to a miss or a skipped removal; logged at debug level.
  void note_error(std::string_view what, const std::string& path, std::error_code ec) noexcept;
  // Removes candidate.path if it is still the file the snapshot saw (and, with keep_if_read, has
  // not been read since); see src/cache/directory/removal.cpp. remove_guarded counts failures.
  removal_outcome remove_guarded(const scan_entry& candidate, bool keep_if_read);
  removal_outcome try_remove(const scan_entry& candidate, bool keep_if_read);
  // Clears what is not an entry from where an entry (or a shard directory) belongs: a directory
  // (with everything in it, never following a symbolic link out of the cache), a symbolic link,
  // a FIFO, ... Moves it aside when it cannot be removed; see removal.cpp.
  obstacle_outcome clear_obstacle(const scan_entry& candidate);
  // Warns (once per path and cache object) that a directory holds an entry's place.
  void warn_obstacle(const std::string& path);
  bool ensure_directories(std::error_code& ec);
  scan_result scan(bool with_tmp);
  void sweep_stale_tmp();
  std::size_t evict_to(std::uint64_t target, scan_result& scanned, std::uint64_t& total);
  void after_put(std::uint64_t added, std::uint64_t old_size);

  std::filesystem::path root_;
  std::string root_str_;
  std::string entries_dir_;  // root/entries (no trailing slash: O_NOFOLLOW must see the name)
  std::string tmp_dir_;      // root/tmp
  file_stream_cache_options options_;
  // The modes this cache creates with (from options_.access and umask; see detail::trust).
  unsigned dir_mode_ = 0755, tmp_dir_mode_ = 0700, file_mode_ = 0644;
  bool exact_modes_ = false;
  unsigned euid_ = 0;  // the opener's effective uid: whose entries private mode trusts (and root's)
  std::atomic<bool> closed_{false};

  mutable detail::cache_counters stats_;
  std::shared_ptr<cache_statistics> statistics_;  // root/stats

  std::mutex tracker_mutex_;  // guards the fields below
  std::uint64_t tracked_bytes_ = 0;
  std::uint64_t written_since_scan_ = 0;
  std::mutex evict_mutex_;  // one eviction scan at a time in this object

  std::mutex warned_mutex_;
  std::vector<int> warned_errnos_;         // write failures already logged at warning level
  std::vector<std::string> warned_paths_;  // obstacles already logged at warning level
};

namespace detail {
// Test-only hooks, called at the points where another process could interleave, so that tests
// can stage a peer's action deterministically. Not an API: set only from tests, never while
// caches are in use on other threads.
struct file_stream_test_hooks {
  // get(): after the entry's bytes were read, before they are decoded and the read is recorded.
  std::function<void(const std::string& path)> after_read;
  // Eviction, clear(), trim(), verify() and get()'s prune: after the snapshot, before the
  // guarded removal of `path`.
  std::function<void(const std::string& path)> before_remove;
  // put(): the new entry is complete in its temp file, not yet renamed into place.
  std::function<void(const std::string& tmp_path)> before_commit;
  // Each directory scan that eviction or the size estimate does.
  std::function<void()> on_scan;
};
void set_file_stream_test_hooks(const file_stream_test_hooks* hooks) noexcept;
}  // namespace detail

}  // namespace cucore
