// Persistent cache statistics: counters kept in the cache itself, summed over every process that
// has used it, shown by `cucore cache stats` and reset by `cucore cache stats --zero`.
//
// Where: a directory beside the entries (the directory cache: ROOT/stats/; the SQLite cache:
// <file>.stats/), holding up to 16 shard files `shard-00` ... `shard-15`. Each shard is one
// 4 KiB file of fixed layout (a 64-byte header: magic "CUCOSTAT", layout version, slot count;
// then 504 little-endian 64-bit counters), created complete under a temporary name and renamed
// into place without replacing (so no process ever sees half a shard), and mapped MAP_SHARED. A
// process records into shard pid % 16 with one lock-free atomic add on the mapping: no lock, no
// system call, no transaction per event (the first event of a process opens, and if need be
// creates, its shard). Processes that share a shard add atomically: totals are exact on one
// machine. On a network filesystem several machines' adds to one shard are not atomic with each
// other: counts from a fleet sharing one cache over NFS are approximate.
//
// Reading sums every shard. A shard file that is damaged or foreign (wrong size, magic, version;
// not a regular file; a symbolic link; not trusted under the cache's cache_access, as entry files
// are) is ignored by readers and skipped by writers (they use the next shard), and replaced by
// zero(). zero() stores zeros into the shards in place (atomically per counter: what other
// processes add meanwhile is kept or lost as a whole), so live processes keep counting into the
// files they have mapped.
//
// Failures never fail a cache operation or a compile: a statistics directory that cannot be
// created or written (a read-only cache, a full disk) is logged once (at debug level for a
// read-only or permission error, which is how read-only caches are meant to be used; at warning
// level otherwise) and the process counts nothing more there. Files are created with the
// cache's modes (cache_access, umask), as its entries are.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cucore/cache/program_cache.hpp"

namespace cucore {

// Which tier of a cache an event happened in: a cache alone is the local tier; a tiered cache
// records its remote tier (Redis) into its local tier's statistics as `remote`.
enum class cache_tier : std::uint8_t { local, remote };

// Storage-level events, as cache_stats counts them.
enum class cache_event : std::uint8_t { hit, miss, put, error, corrupt_dropped, eviction };

// Why a compile that was asked to use a cache went without it.
enum class cache_skip_reason : std::uint8_t {
  // The key cannot see an input (an #include through a macro, precompiled headers, libdevice)
  // and no extra digest was given (extra_digest_required).
  needs_extra_digest,
  // Options the cache refuses whatever the digest (compile-time side effects such as create_pch
  // or time, options a backend cannot take): the key's invalid_argument.
  uncacheable_options,
  // A header the key tracked was not, after the compile, the file it was when the key was made
  // (program_cache_key::check_store): the result was returned, not stored.
  header_changed,
  // The program or a header it includes uses __TIME__, __DATE__ or __TIMESTAMP__: its output
  // depends on the clock (opt in with CUCORE_SLOPPINESS=time_macros to cache it anyway).
  time_macros,
  // An environment variable that makes the compiler write files is set (DUMP_KNOBS_TO_FILE,
  // AS_SECURE_LOG_FILE): a hit would skip writing them.
  compiler_environment,
  // A header the key tracked was modified within its timestamp granularity before the key was
  // made, so a change during the compile might not have shown: the result was not stored.
  header_too_new,
  // The compiler read an input the key does not cover (a file, a search probe, an environment
  // variable, the working directory), seen by the observation of the compile: the result was
  // returned, not stored.
  unkeyed_input,
  // The compiler read an input whose contents no key can name: a file of a pseudo file system
  // (procfs, sysfs, devtmpfs), a file that is not a regular one, or one that is per process
  // (/proc/self/..., /dev/fd/..., /dev/std*); or it wrote a file or ran a program. Returned, not
  // stored; the compile server refuses such a compile (the client compiles it itself).
  process_view_input,
  // An option's value names a file the compiler reads or writes (ptxas's --options-file, ...),
  // which the key does not walk: compiled without the cache.
  option_file,
};
inline constexpr std::size_t cache_skip_reason_count = 9;
// "needs_extra_digest", "uncacheable_options", "header_changed", "time_macros",
// "compiler_environment", "header_too_new", "unkeyed_input", "process_view_input",
// "option_file".
std::string_view to_string(cache_skip_reason reason) noexcept;

// Why a miss missed (docs/cache-keys.md, "Misses that explain themselves"): what differs from the
// nearest earlier key of the same program (same program name, else the same source).
enum class miss_kind : std::uint8_t {
  first_compile,              // no earlier key of this program is known
  source_changed,             // the program text
  header_changed,             // a header's contents (same path)
  headers_changed,            // a header found, or no longer found, or another one found
  option_changed,             // an option (arch, -D, -I, ...), name expressions, the target
  compiler_changed,           // the compiler's identity (its version, build)
  environment_changed,        // a variable of the compilers' table
  working_directory_changed,  // the working directory, where the key holds it
  other,                      // another field (a file time, an extra digest, ...)
};
inline constexpr std::size_t miss_kind_count = 9;
std::string_view to_string(miss_kind kind) noexcept;

struct miss_reason {
  miss_kind kind{};
  std::string detail;  // "kernel.cuh: sha256 f260b716... -> 1a2b3c4d...", "-DN=1 -> -DN=2"
};
struct miss_explanation {
  std::vector<miss_reason> reasons;  // the most telling first; first_compile alone when no key
  std::string nearest_key;           // the earlier key compared with (hex), or ""
  miss_kind kind() const noexcept {
    return reasons.empty() ? miss_kind::other : reasons.front().kind;
  }
};

// The persistent counts of one cache, summed over its shard files.
struct persistent_cache_stats {
  cache_stats local;   // the local tier (the cache itself, if it has no tiers)
  cache_stats remote;  // a tiered cache's remote tier; zero otherwise
  // Compile level (program::compile and `cucore compile` with this cache):
  std::uint64_t compiles = 0;      // misses that ran the compiler
  std::uint64_t compile_hits = 0;  // compiles answered by the cache
  std::uint64_t compile_ns = 0;    // time the compiler ran for `compiles`
  std::array<std::uint64_t, cache_skip_reason_count> skips{};  // by cache_skip_reason
  // Verify mode (docs/verify.md): hits compiled again and compared, and those that differed
  // (stale hits caught; their entries removed).
  std::uint64_t verified = 0;
  std::uint64_t verify_mismatches = 0;
  // Compile-level misses by their explanation's first reason (miss_kind).
  std::array<std::uint64_t, miss_kind_count> misses_by_kind{};
  // When the counts were last zeroed (zero()); nullopt if never.
  std::optional<std::chrono::system_clock::time_point> zeroed_at;
  std::size_t shards = 0;          // shard files summed
  std::size_t shards_ignored = 0;  // damaged or foreign shard files left out

  // An estimate of the compile time the cache saved: compile_hits times the mean time of the
  // compiles counted here (the entries do not record their own compile times). nullopt while no
  // compile has been counted (after a zero, until the next miss).
  std::optional<std::chrono::nanoseconds> compile_time_saved() const noexcept;
  std::uint64_t skips_total() const noexcept;
};

// The persistent counters of one cache (see the top of this file). Thread-safe.
class cache_statistics {
 public:
  // `directory` is not touched until the first event is recorded (or zero() runs): opening a
  // cache to read it creates nothing. access and umask: the cache's (trust and file modes).
  explicit cache_statistics(std::filesystem::path directory,
                            cache_access access = cache_access::private_to_user,
                            std::optional<unsigned> umask = {});
  ~cache_statistics();
  cache_statistics(const cache_statistics&) = delete;
  cache_statistics& operator=(const cache_statistics&) = delete;

  // Recording: lock-free, never throws, never fails the caller.
  void add(cache_tier tier, cache_event event, std::uint64_t n = 1) noexcept;
  void record_compile(std::chrono::nanoseconds elapsed) noexcept;
  void record_compile_hit() noexcept;
  void record_skip(cache_skip_reason reason) noexcept;
  // A hit verify mode compiled again: `mismatch` when the fresh output differed.
  void record_verify(bool mismatch) noexcept;
  // A compile-level miss, by why it missed.
  void record_miss(miss_kind kind) noexcept;

  // The sum of every shard (zero when there are none). Never throws for what it finds on disk.
  persistent_cache_stats read() const;
  // Stores zeros in every shard and replaces damaged ones; throws cucore::error when the
  // directory cannot be written (a read-only cache), saying which file and why.
  void zero();

  const std::filesystem::path& directory() const noexcept { return directory_; }

 private:
  std::uint64_t* shard_for_writing() noexcept;
  void add_slot(std::size_t slot, std::uint64_t n) noexcept;

  std::filesystem::path directory_;
  std::string dir_;
  cache_access access_;
  std::optional<unsigned> umask_;
  std::atomic<std::uint64_t*> counters_{nullptr};  // this process's shard, once mapped
  std::atomic<bool> unusable_{false};              // failed once: count nothing more
  std::mutex open_mutex_;
  void* mapping_ = nullptr;  // guarded by open_mutex_; unmapped by the destructor
};

namespace detail {

// True on a thread while single-flight looks again for an entry another process or thread is
// compiling (get_or_compile): those lookups' misses are waiting, not misses, and are not counted
// (a stampede would otherwise count every poll of every waiter). Their hits count.
inline thread_local bool waiting_for_entry = false;

// One counter of a backend's cache_stats: the process's own count (what stats() returns), also
// added to the cache's persistent statistics once attached. Drop-in for the std::atomic the
// backends used (fetch_add, load), so that there is one way to count.
class cache_counter {
 public:
  cache_counter() noexcept = default;
  explicit cache_counter(cache_event event) noexcept : event_(event) {}
  std::uint64_t fetch_add(std::uint64_t n,
                          std::memory_order order = std::memory_order_seq_cst) noexcept {
    // A lookup made while waiting for another process's entry is not a miss (single-flight).
    if (event_ == cache_event::miss && waiting_for_entry) return value_.load(order);
    if (sink_ != nullptr && n != 0) sink_->add(tier_, event_, n);
    return value_.fetch_add(n, order);
  }
  std::uint64_t load(std::memory_order order = std::memory_order_seq_cst) const noexcept {
    return value_.load(order);
  }
  // Before the cache is used (not thread-safe against fetch_add).
  void attach(cache_statistics* sink, cache_tier tier, cache_event event) noexcept {
    sink_ = sink;
    tier_ = tier;
    event_ = event;
  }

 private:
  std::atomic<std::uint64_t> value_{0};
  cache_statistics* sink_ = nullptr;
  cache_tier tier_ = cache_tier::local;
  cache_event event_ = cache_event::hit;
};

// A backend's counters (cache_stats as cache_counter members).
struct cache_counters {
  cache_counter hits{cache_event::hit}, misses{cache_event::miss}, puts{cache_event::put},
      evictions{cache_event::eviction}, corrupt_dropped{cache_event::corrupt_dropped},
      errors{cache_event::error};
  // Also counts into `sink` as `tier` (nullptr: in-process only). Before the cache is used.
  void attach(cache_statistics* sink, cache_tier tier) noexcept;
  cache_stats snapshot() const noexcept;
};

}  // namespace detail
}  // namespace cucore
