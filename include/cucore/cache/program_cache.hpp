// The program cache interface: every backend (in-memory, SQLite, directory) implements it.
//
// Keys are bytes: a typed program_cache_key (make_program_cache_key), or any string or byte
// sequence, as the reference allows ("k" as a string and as bytes are the same entry). Values are
// whole object_code objects, symbol mapping included, so name expressions work on a hit.
//
// There is deliberately no contains(): "if (contains(k)) get(k)" races with other processes.
// Call get() and handle the miss.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cucore/locations.hpp"
#include "cucore/object_code.hpp"

namespace cucore {

class cache_statistics;                // cucore/cache/statistics.hpp
enum class cache_tier : std::uint8_t;  // cucore/cache/statistics.hpp

// A borrowed view of a cache key's bytes.
class cache_key_ref {
 public:
  cache_key_ref(std::span<const std::byte> bytes) noexcept : bytes_(bytes) {}  // NOLINT
  cache_key_ref(std::string_view text) noexcept                                // NOLINT
      : bytes_(std::as_bytes(std::span<const char>(text.data(), text.size()))) {}
  cache_key_ref(const std::string& text) noexcept
      : cache_key_ref(std::string_view(text)) {}                                       // NOLINT
  cache_key_ref(const char* text) noexcept : cache_key_ref(std::string_view(text)) {}  // NOLINT
  // Any key type with bytes() (program_cache_key).
  template <class Key>
  requires requires(const Key& k) {
    { k.bytes() } -> std::convertible_to<std::span<const std::byte>>;
  }
  cache_key_ref(const Key& key) noexcept : bytes_(key.bytes()) {}  // NOLINT

  std::span<const std::byte> bytes() const noexcept { return bytes_; }
  std::string_view as_string_view() const noexcept {
    return {reinterpret_cast<const char*>(bytes_.data()), bytes_.size()};
  }
  std::size_t size() const noexcept { return bytes_.size(); }

 private:
  std::span<const std::byte> bytes_;
};

// Counters of one cache object (this process's operations on it).
struct cache_stats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t puts = 0;
  std::uint64_t evictions = 0;
  std::uint64_t corrupt_dropped = 0;  // entries found damaged on read, treated as misses, removed
  std::uint64_t errors = 0;           // I/O failures degraded to misses or skipped writes
};

// One entry as listed by program_cache::list() (the payload is not read).
struct cache_entry_info {
  std::vector<std::byte> key;  // the full key bytes
  code_type type{};
  std::string name;
  std::size_t symbol_count = 0;
  std::uint64_t payload_bytes = 0;  // the code
  std::uint64_t stored_bytes = 0;   // header included
  // Last read (or write), for least-recently-used eviction; nullopt where the backend has none.
  std::optional<std::chrono::system_clock::time_point> last_used;
};

// What verify() found: every entry checked (format, checksum, key echo).
struct cache_verify_report {
  std::size_t entries = 0;  // what was checked (entries, and anything else where entries belong)
  std::size_t ok = 0;
  std::size_t corrupt = 0;  // damaged entries, and what is not an entry at all
  std::size_t removed = 0;  // of the corrupt ones, removed
  // Of the corrupt ones, moved out of an entry's place because they could not be removed (a
  // directory with something inside that cannot be deleted): the key works again, and `notes`
  // says where each went.
  std::size_t moved_aside = 0;
  // For people, one line each: what was found that is not an entry (a directory, a symbolic link,
  // a FIFO, ... where an entry belongs) and what was done about it, and what could not be removed
  // and how to remove it by hand. Damaged entries that were simply removed get no line.
  std::vector<std::string> notes;
};

// What a persistent cache does when a write fails (disk full, read-only directory, lock timeout):
// `warn` logs a warning and carries on as if the entry was not cached; `strict` throws.
enum class write_failure_policy { warn, strict };

// Whom a local persistent cache (directory or SQLite file) trusts. Anyone who can write a cache
// can make its readers run their code: keys are computable from public inputs and the checksum
// detects damage, not forgery. docs/cache-directory.md, "Trust model", has the whole rule.
enum class cache_access {
  // The default. The cache's directories and files must be owned by you (the effective uid) or
  // root and writable by no one else: a cache that is not is refused (invalid_argument, saying
  // why and how to fix it), an entry file that is not is a miss. Files and directories are
  // created without group or world write access.
  private_to_user,
  // A cache shared with other users, typically a group (ccache's umask model): directories and
  // files of other owners and group write access are accepted, since you have said you trust
  // whoever can write the cache; anything world-writable is still refused. Files and directories
  // are created with the permissions the cache's umask leaves (default 002: group-writable).
  shared,
};

// A claim on a key: the right to compile it while other processes (and threads) that miss the
// same key wait for its entry instead of compiling it too (single-flight; see single_flight.hpp).
// Destroying the claim releases it. A claim dies with its process: a lock held by an open file
// (directory, SQLite) is released by the kernel, and a Redis claim expires after its lease.
class cache_claim {
 public:
  virtual ~cache_claim() = default;
  cache_claim() = default;
  cache_claim(const cache_claim&) = delete;
  cache_claim& operator=(const cache_claim&) = delete;
  // The holder lets go without having stored an entry (its compile or its store threw): says so
  // where other processes can see it (program_cache::claim_abandonments), so that the waiters
  // compile side by side, each getting the error itself, instead of taking the claim over one
  // after another. Called before the claim is destroyed, which releases it as always. The default
  // does nothing (the waiters then take over one at a time, as after a holder's death).
  virtual void abandon() noexcept {}
};

// A waiter's view of a claim held elsewhere (single_flight.hpp): what wakes it before its next
// poll. Made by program_cache::watch_claim.
class claim_watch {
 public:
  virtual ~claim_watch() = default;
  claim_watch() = default;
  claim_watch(const claim_watch&) = delete;
  claim_watch& operator=(const claim_watch&) = delete;
  // Waits at most `timeout` for a sign that the key's entry was stored or its claim came free:
  // true on one (which may be spurious: the caller looks), false when the time ran out.
  virtual bool wait(std::chrono::milliseconds timeout) = 0;
  // A descriptor that becomes readable when there may be a sign, -1 when there is none (cucore's
  // tiered cache waits on both tiers' watches at once with poll(2)).
  virtual int native_handle() const noexcept { return -1; }
};

// What program_cache::try_claim found.
enum class claim_status {
  owned,           // this caller holds the claim (in claim_result::claim): it compiles
  held_elsewhere,  // another process or thread holds it: wait for the entry
  unsupported,     // this cache cannot claim (or cannot now: a remote tier is down): compile
};

struct claim_result {
  claim_status status = claim_status::unsupported;
  std::unique_ptr<cache_claim> claim;  // set when owned; releases on destruction
};

// How compiles through a cache coalesce (single_flight.hpp). Set on the cache object before it
// is shared between threads.
struct single_flight_options {
  // Off: every miss compiles, as before single-flight existed.
  bool enabled = true;
  // How long a claim outlives its holder where the holder's death cannot release it (Redis): a
  // live holder renews its claim every third of this, so that however long it compiles it keeps
  // it; a dead holder's claim expires within this, and one waiter takes over. Shorter: waiters
  // replace a dead holder sooner; but a holder that cannot reach the server for a whole lease (a
  // network stall) loses its claim, and a second machine starts compiling too (harmless, only
  // slower).
  std::chrono::milliseconds lease{30000};
  // How long a process waits for another one's entry before it compiles itself. Longer than your
  // slowest compile, and longer than the lease, so that when a remote holder died the waiters take
  // over as its lease ends rather than waiting this out.
  std::chrono::milliseconds max_wait{45000};
  // Waiters look for the entry after poll_initial, then at doubling intervals up to poll_max.
  std::chrono::milliseconds poll_initial{2};
  std::chrono::milliseconds poll_max{20};
  // Wake waiters by the cache's notifications where it has them (program_cache::watch_claim:
  // inotify on a directory or SQLite cache, Redis pub/sub), polling every poll_max besides. Off:
  // they poll only.
  bool notify = true;
};

// What every cache object starts with: the defaults above, with the environment's overrides read
// at the cache's construction: CUCORE_SINGLE_FLIGHT=0 (or off, false, no) turns single-flight off,
// CUCORE_SINGLE_FLIGHT_WAIT=SECONDS sets max_wait. A malformed value is ignored with a warning.
single_flight_options default_single_flight_options();

// Owned by a std::shared_ptr, a cache lets verify mode's background thread remove a stale entry
// the moment it finds one (docs/verify.md); owned otherwise, the entry goes at this process's
// next compile through the cache object.
class program_cache : public std::enable_shared_from_this<program_cache> {
 public:
  virtual ~program_cache() = default;

  // The entry, or nullopt on a miss. A damaged or unreadable entry is a miss (and is removed);
  // get never throws for what it finds on disk.
  virtual std::optional<object_code> get(cache_key_ref key) = 0;
  // Stores (or replaces) the entry.
  virtual void put(cache_key_ref key, const object_code& code) = 0;
  // Removes the entry; false if there was none.
  virtual bool erase(cache_key_ref key) = 0;
  // Number of entries and their total size in bytes, as stored.
  virtual std::size_t size() = 0;
  virtual std::uint64_t size_bytes() = 0;
  virtual void clear() = 0;
  virtual cache_stats stats() const = 0;

  // Maintenance, for tools (`cucore cache ls|verify|trim`). Not meant for hot paths.
  virtual std::vector<cache_entry_info> list() = 0;
  // Checks every entry; with remove_bad, removes the damaged ones (stat-guarded where it matters).
  virtual cache_verify_report verify(bool remove_bad) = 0;
  // Evicts least-recently-used entries until the cache holds at most `max_size_bytes`; returns
  // how many entries it removed.
  virtual std::size_t trim(std::uint64_t max_size_bytes) = 0;
  // "in-memory", "directory /path", "sqlite /path/file.db": for messages and `cucore cache stats`.
  virtual std::string description() const = 0;

  // Where this cache remembers compiler versions (by library file identity), so that a hit in a
  // fresh process loads no compiler; nullopt for caches that do not outlive the process.
  virtual std::optional<std::filesystem::path> compiler_version_memo() const {
    return std::nullopt;
  }
  // The counters this cache keeps in itself, summed over every process that used it (see
  // cucore/cache/statistics.hpp; `cucore cache stats`): the directory and SQLite caches keep
  // them, and a tiered cache has its local tier's. nullptr for caches that do not outlive the
  // process or keep none (in-memory, Redis alone).
  virtual std::shared_ptr<cache_statistics> statistics() const { return nullptr; }
  // Also count this cache's events into `store`, as `tier` (a tiered cache hands its remote tier
  // its local tier's statistics). Call before the cache is used; caches without counters ignore
  // it. The cache keeps `store` alive.
  virtual void record_statistics_in(std::shared_ptr<cache_statistics> store, cache_tier tier) {
    (void)store;
    (void)tier;
  }
  // Releases resources early (the destructor does the same). Using a closed cache is an error.
  virtual void close() noexcept {}
  // A read-only layer (docs/cache-layers.md): looked up, never written. A tiered cache never
  // puts into, erases from or claims in such a tier; the cache's own put/erase/clear/trim throw.
  virtual bool read_only() const noexcept { return false; }

  // Tries to claim `key` for a compile (never blocks on another holder). `lease` bounds the
  // claim's life where a dead holder cannot release it (Redis). The claim must not outlive the
  // cache. The default cannot claim (unsupported); the backends cucore ships all can. Never
  // throws for what it finds in the cache: a failure is `unsupported`, and the caller compiles.
  virtual claim_result try_claim(cache_key_ref key, std::chrono::milliseconds lease) {
    (void)key;
    (void)lease;
    return {};
  }
  // A value that changes whenever a holder of `key`'s claim abandons it (cache_claim::abandon) or
  // a store into this cache fails, so that a waiter that gets the claim without finding an entry
  // can tell a holder that gave up (the waiters then compile side by side) from one that died (one
  // waiter takes over, the others keep waiting). It may change for other keys' abandonments too
  // (the directory and SQLite caches keep one for all keys). 0 where the cache does not tell (the
  // default). Never throws.
  virtual std::uint64_t claim_abandonments(cache_key_ref key) {
    (void)key;
    return 0;
  }
  // What wakes a waiter on `key`'s claim before its next poll (see claim_watch); nullptr where the
  // cache has nothing (the default: the waiter polls). Never throws.
  virtual std::unique_ptr<claim_watch> watch_claim(cache_key_ref key) {
    (void)key;
    return nullptr;
  }
  // How compiles through this cache coalesce: program::compile and get_or_compile read it.
  const single_flight_options& single_flight() const noexcept { return single_flight_; }
  void set_single_flight(const single_flight_options& options) noexcept {
    single_flight_ = options;
  }

  // Bulk put of (key, object_code) pairs. Not transactional: a failure leaves earlier puts done.
  template <std::ranges::input_range Items>
  void update(Items&& items) {
    for (auto&& [key, code] : items) put(cache_key_ref(key), code);
  }

 private:
  single_flight_options single_flight_ = default_single_flight_options();
};

}  // namespace cucore
