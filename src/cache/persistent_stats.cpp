// Persistent cache statistics: shard files of 64-bit counters, mapped MAP_SHARED and added to
// with lock-free atomics (include/cucore/cache/statistics.hpp has the design).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "cache/posix_file.hpp"
#include "cache/trust.hpp"
#include "common/enum_names.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"

namespace cucore {
namespace posix = detail::posix;

namespace {

// Across processes the counters are only atomic if the operations never take a lock.
static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free);

constexpr char kMagic[8] = {'C', 'U', 'C', 'O', 'S', 'T', 'A', 'T'};
constexpr std::uint32_t kLayoutVersion = 1;
constexpr std::size_t kFileBytes = 4096;
constexpr std::size_t kHeaderBytes = 64;
constexpr std::uint32_t kSlots = (kFileBytes - kHeaderBytes) / 8;  // 504
constexpr unsigned kShards = 16;
// Fresh shards are written under this prefix, then renamed; zero() removes those older than
// kStaleTemporary (left by a process that died in between).
constexpr char kTemporaryPrefix[] = ".new-";
constexpr std::chrono::minutes kStaleTemporary{10};

struct shard_header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t slots;
  std::byte reserved[kHeaderBytes - 16];
};
static_assert(sizeof(shard_header) == kHeaderBytes);

// Slot numbers: part of the file format, so only ever appended to. Eight per tier.
constexpr std::size_t slot_of(cache_tier tier, cache_event event) {
  return static_cast<std::size_t>(tier) * 8 + static_cast<std::size_t>(event);
}
constexpr std::size_t kCompiles = 16;
constexpr std::size_t kCompileHits = 17;
constexpr std::size_t kCompileNs = 18;
constexpr std::size_t kZeroedAtNs = 19;  // unix time in ns of the last zero(); readers take the max
constexpr std::size_t kVerified = 20;    // hits verify mode compiled again
constexpr std::size_t kVerifyMismatches = 21;  // ... whose fresh output differed
constexpr std::size_t kSkips = 24;             // 16 slots for skip reasons
static_assert(cache_skip_reason_count <= 16);
constexpr std::size_t kMissKinds = 40;  // 16 slots for miss kinds
static_assert(miss_kind_count <= 16);

std::string shard_name(unsigned index) {
  char name[16];
  std::snprintf(name, sizeof name, "shard-%02u", index);
  return name;
}

std::uint64_t* counters_of(void* mapping) noexcept {
  return reinterpret_cast<std::uint64_t*>(static_cast<std::byte*>(mapping) + kHeaderBytes);
}

bool header_ok(const void* mapping) noexcept {
  shard_header h{};
  std::memcpy(&h, mapping, sizeof h);
  return std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 && h.version == kLayoutVersion &&
         h.slots == kSlots;
}

// A mapped shard file, unmapped on destruction.
struct shard_map {
  void* data = nullptr;
  shard_map() = default;
  shard_map(shard_map&& o) noexcept : data(std::exchange(o.data, nullptr)) {}
  shard_map& operator=(shard_map&& o) noexcept {
    if (this != &o) {
      if (data != nullptr) ::munmap(data, kFileBytes);
      data = std::exchange(o.data, nullptr);
    }
    return *this;
  }
  ~shard_map() {
    if (data != nullptr) ::munmap(data, kFileBytes);
  }
  std::uint64_t* counters() const noexcept { return counters_of(data); }
};

// Opens dir/name as a shard: a regular file (no link followed) of the right size, trusted under
// `access`, with our header. nullopt-like empty map if it is not one; `ec` set for errors other
// than "not a valid shard" (ENOENT included).
shard_map map_shard(const std::string& path, bool writable, cache_access access, uid_t euid,
                    std::error_code& ec, bool& invalid) {
  invalid = false;
  shard_map m;
  posix::unique_fd fd = posix::open_file(
      path, (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0, ec);
  if (!fd) {
    if (ec == std::errc::too_many_symbolic_link_levels || ec == std::errc::is_a_directory) {
      invalid = true;
    }
    return m;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    ec = posix::last_error();
    return m;
  }
  if (!S_ISREG(st.st_mode) || st.st_size != static_cast<off_t>(kFileBytes) ||
      !detail::trust::acceptable(st, access, euid)) {
    invalid = true;
    return m;
  }
  void* p = ::mmap(nullptr, kFileBytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                   fd.get(), 0);
  if (p == MAP_FAILED) {
    ec = posix::last_error();
    return m;
  }
  m.data = p;
  if (!header_ok(p)) {
    invalid = true;
    return shard_map{};  // unmaps
  }
  return m;
}

// Writes a fresh shard (header, zeros) under a temporary name in `dir`; returns its path.
std::string write_fresh_shard(const std::string& dir, const detail::trust::create_modes& modes,
                              std::error_code& ec) {
  const std::string tmp = dir + "/" + kTemporaryPrefix + std::to_string(::getpid()) + "-" +
                          std::to_string(posix::random_u64() % 1'000'000'000);
  posix::unique_fd fd =
      posix::open_file(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, modes.file, ec);
  if (!fd) return {};
  (void)detail::trust::set_created_file_mode(fd.get(), modes);
  std::vector<std::byte> bytes(kFileBytes);
  shard_header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kLayoutVersion;
  h.slots = kSlots;
  std::memcpy(bytes.data(), &h, sizeof h);
  if ((ec = posix::write_fully(fd.get(), bytes)) || (ec = fd.close())) {
    (void)posix::unlink_path(tmp);
    return {};
  }
  return tmp;
}

bool quiet_failure(std::error_code ec) {
  return ec == std::errc::permission_denied || ec == std::errc::read_only_file_system ||
         ec == std::errc::operation_not_permitted;
}

// Creates `dir` if missing and checks it is a directory we trust. Empty if fine, else a sentence
// that names it and says what is wrong; `quiet`: a permission or read-only error (a read-only
// cache), not worth a warning.
std::string prepare_directory(const std::string& dir, cache_access access,
                              const detail::trust::create_modes& modes, bool& quiet) {
  quiet = false;
  auto failed = [&](std::string_view what, std::error_code ec) {
    quiet = quiet_failure(ec);
    return "cannot " + std::string(what) + " " + dir + ": " + ec.message();
  };
  struct stat st {};
  if (std::error_code ec = posix::lstat_path(dir, st)) {
    if (ec != std::errc::no_such_file_or_directory) return failed("use", ec);
    bool created = false;
    if ((ec = posix::make_directory(dir, modes.dir, created))) return failed("create", ec);
    if (created) (void)detail::trust::set_created_dir_mode(dir, modes.dir, modes);
    if ((ec = posix::lstat_path(dir, st))) return failed("use", ec);
  }
  if (!S_ISDIR(st.st_mode)) {
    return dir + " is a symbolic link or not a directory; remove it (it is made again)";
  }
  return detail::trust::problem(st, access, "statistics directory", dir);
}

}  // namespace

constexpr auto kMissKindNames = detail::name_each<miss_kind::other>(
    "first_compile", "source_changed", "header_changed", "headers_changed", "option_changed",
    "compiler_changed", "environment_changed", "working_directory_changed", "other");

std::string_view to_string(miss_kind kind) noexcept {
  return kMissKindNames(kind, "other");
}

constexpr auto kCacheSkipReasonNames = detail::name_each<cache_skip_reason::option_file>(
    "needs_extra_digest", "uncacheable_options", "header_changed", "time_macros",
    "compiler_environment", "header_too_new", "unkeyed_input", "process_view_input", "option_file");

std::string_view to_string(cache_skip_reason reason) noexcept {
  return kCacheSkipReasonNames(reason);
}

std::optional<std::chrono::nanoseconds> persistent_cache_stats::compile_time_saved()
    const noexcept {
  if (compiles == 0) return std::nullopt;
  const long double mean = static_cast<long double>(compile_ns) / compiles;
  return std::chrono::nanoseconds(static_cast<std::int64_t>(mean * compile_hits));
}

std::uint64_t persistent_cache_stats::skips_total() const noexcept {
  std::uint64_t n = 0;
  for (const auto s : skips) n += s;
  return n;
}

cache_statistics::cache_statistics(std::filesystem::path directory, cache_access access,
                                   std::optional<unsigned> umask)
    : directory_(std::move(directory)), dir_(directory_.string()), access_(access), umask_(umask) {
  (void)detail::trust::modes_for(access_, umask_);  // a bad umask is the caller's error, now
}

cache_statistics::~cache_statistics() {
  if (mapping_ != nullptr) ::munmap(mapping_, kFileBytes);
}

std::uint64_t* cache_statistics::shard_for_writing() noexcept {
  std::lock_guard lock(open_mutex_);
  if (auto* c = counters_.load(std::memory_order_acquire)) return c;
  if (unusable_.load(std::memory_order_relaxed)) return nullptr;
  std::error_code ec;
  std::string why;
  bool quiet = false;
  try {
    const detail::trust::create_modes modes = detail::trust::modes_for(access_, umask_);
    why = prepare_directory(dir_, access_, modes, quiet);
    if (why.empty()) {
      const uid_t euid = ::geteuid();
      const unsigned first = static_cast<unsigned>(::getpid()) % kShards;
      for (unsigned i = 0; i < kShards; ++i) {
        const std::string path = dir_ + "/" + shard_name((first + i) % kShards);
        bool invalid = false;
        shard_map m = map_shard(path, true, access_, euid, ec, invalid);
        if (!m.data && !invalid && ec == std::errc::no_such_file_or_directory) {
          // Create it whole under another name, then move it in without replacing one a peer
          // made meanwhile (whose counts would otherwise vanish with the file it maps).
          const std::string tmp = write_fresh_shard(dir_, modes, ec);
          if (tmp.empty()) break;
          ec = posix::rename_no_replace(tmp, path);
          if (ec) (void)posix::unlink_path(tmp);
          if (ec && ec != std::errc::file_exists) break;
          m = map_shard(path, true, access_, euid, ec, invalid);
        }
        if (m.data) {
          mapping_ = std::exchange(m.data, nullptr);
          counters_.store(counters_of(mapping_), std::memory_order_release);
          return counters_of(mapping_);
        }
        if (!invalid) break;  // an I/O error: the next shard would fail alike
        ec = {};              // damaged or foreign: try the next one (zero() replaces it)
      }
      quiet = quiet_failure(ec);
      why = ec ? "cannot open or create a shard file in " + dir_ + ": " + ec.message()
               : "every shard file in " + dir_ +
                     " is damaged (cucore cache stats --zero replaces them)";
    }
    unusable_.store(true, std::memory_order_relaxed);
    log(quiet ? log_level::debug : log_level::warning,
        "cache statistics: " + why + "; this process records no statistics for this cache");
  } catch (...) {
    unusable_.store(true, std::memory_order_relaxed);
  }
  return nullptr;
}

void cache_statistics::add_slot(std::size_t slot, std::uint64_t n) noexcept {
  std::uint64_t* c = counters_.load(std::memory_order_acquire);
  if (c == nullptr) [[unlikely]] {
    if (unusable_.load(std::memory_order_relaxed)) return;
    c = shard_for_writing();
    if (c == nullptr) return;
  }
  std::atomic_ref<std::uint64_t>(c[slot]).fetch_add(n, std::memory_order_relaxed);
}

void cache_statistics::add(cache_tier tier, cache_event event, std::uint64_t n) noexcept {
  add_slot(slot_of(tier, event), n);
}

void cache_statistics::record_compile(std::chrono::nanoseconds elapsed) noexcept {
  add_slot(kCompiles, 1);
  add_slot(kCompileNs, static_cast<std::uint64_t>(std::max<std::int64_t>(0, elapsed.count())));
}

void cache_statistics::record_compile_hit() noexcept {
  add_slot(kCompileHits, 1);
}

void cache_statistics::record_verify(bool mismatch) noexcept {
  add_slot(kVerified, 1);
  if (mismatch) add_slot(kVerifyMismatches, 1);
}

void cache_statistics::record_miss(miss_kind kind) noexcept {
  add_slot(kMissKinds + static_cast<std::size_t>(kind), 1);
}

void cache_statistics::record_skip(cache_skip_reason reason) noexcept {
  add_slot(kSkips + static_cast<std::size_t>(reason), 1);
}

persistent_cache_stats cache_statistics::read() const {
  persistent_cache_stats out;
  std::error_code ec;
  posix::directory_reader dir = posix::directory_reader::open(dir_, ec);
  if (!dir) return out;  // no statistics yet (or none readable): zeros
  const uid_t euid = ::geteuid();
  std::uint64_t sums[kSlots] = {};
  std::uint64_t zeroed = 0;
  posix::directory_reader::entry e{};
  while (dir.next(e, ec)) {
    if (std::strncmp(e.name, "shard-", 6) != 0) continue;
    bool invalid = false;
    std::error_code open_ec;
    const shard_map m = map_shard(dir_ + "/" + e.name, false, access_, euid, open_ec, invalid);
    if (!m.data) {
      if (invalid) ++out.shards_ignored;
      continue;
    }
    ++out.shards;
    std::uint64_t* c = m.counters();
    for (std::size_t i = 0; i < kSlots; ++i) {
      const std::uint64_t v = std::atomic_ref<std::uint64_t>(c[i]).load(std::memory_order_relaxed);
      if (i == kZeroedAtNs) {
        zeroed = std::max(zeroed, v);
      } else {
        sums[i] += v;
      }
    }
  }
  auto tier = [&](cache_tier t) {
    cache_stats s;
    s.hits = sums[slot_of(t, cache_event::hit)];
    s.misses = sums[slot_of(t, cache_event::miss)];
    s.puts = sums[slot_of(t, cache_event::put)];
    s.errors = sums[slot_of(t, cache_event::error)];
    s.corrupt_dropped = sums[slot_of(t, cache_event::corrupt_dropped)];
    s.evictions = sums[slot_of(t, cache_event::eviction)];
    return s;
  };
  out.local = tier(cache_tier::local);
  out.remote = tier(cache_tier::remote);
  out.compiles = sums[kCompiles];
  out.compile_hits = sums[kCompileHits];
  out.compile_ns = sums[kCompileNs];
  out.verified = sums[kVerified];
  out.verify_mismatches = sums[kVerifyMismatches];
  for (std::size_t i = 0; i < miss_kind_count; ++i) out.misses_by_kind[i] = sums[kMissKinds + i];
  for (std::size_t i = 0; i < cache_skip_reason_count; ++i) out.skips[i] = sums[kSkips + i];
  if (zeroed != 0) {
    out.zeroed_at = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::nanoseconds(zeroed)));
  }
  return out;
}

void cache_statistics::zero() {
  const detail::trust::create_modes modes = detail::trust::modes_for(access_, umask_);
  std::error_code ec;
  bool quiet = false;
  if (std::string why = prepare_directory(dir_, access_, modes, quiet); !why.empty()) {
    throw error("cannot zero the cache statistics: " + why);
  }
  const uid_t euid = ::geteuid();
  const auto now_ns = static_cast<std::uint64_t>(posix::to_ns(posix::now_realtime()));
  bool stamped = false;
  // Every shard name a writer may use, and any other shard-* file found (a layout with more
  // shards): valid ones are zeroed in place, damaged or foreign ones replaced.
  std::vector<std::string> names;
  std::vector<std::string> temporaries;  // ".new-*": fresh shards not renamed in (yet)
  for (unsigned i = 0; i < kShards; ++i) names.push_back(shard_name(i));
  if (posix::directory_reader dir = posix::directory_reader::open(dir_, ec)) {
    posix::directory_reader::entry e{};
    while (dir.next(e, ec)) {
      if (std::strncmp(e.name, "shard-", 6) == 0 &&
          std::find(names.begin(), names.end(), e.name) == names.end()) {
        names.emplace_back(e.name);
      } else if (std::strncmp(e.name, kTemporaryPrefix, std::strlen(kTemporaryPrefix)) == 0) {
        temporaries.emplace_back(e.name);
      }
    }
  }
  // A process that died between writing a fresh shard and renaming it in left its temporary
  // file behind; one older than kStaleTemporary is such a leftover (a writer renames or removes
  // its own within microseconds). Best effort: what cannot be removed stays.
  for (const std::string& name : temporaries) {
    const std::string path = dir_ + "/" + name;
    struct stat st {};
    if (posix::lstat_path(path, st) || !S_ISREG(st.st_mode)) continue;
    const std::int64_t age_ns = static_cast<std::int64_t>(now_ns) - posix::to_ns(st.st_mtim);
    if (age_ns > std::chrono::nanoseconds(kStaleTemporary).count()) (void)posix::unlink_path(path);
  }
  // Replaces `path` (damaged or foreign; or missing, with replace false) by a fresh shard.
  auto fresh = [&](const std::string& path, bool replace) {
    const std::string tmp = write_fresh_shard(dir_, modes, ec);
    if (tmp.empty()) {
      throw error("cannot zero the cache statistics: cannot create a file in " + dir_ + ": " +
                  ec.message());
    }
    ec = replace ? posix::rename_path(tmp, path) : posix::rename_no_replace(tmp, path);
    if (ec == std::errc::file_exists) ec = {};  // a writer made it meanwhile: fresh anyway
    if (ec) {
      (void)posix::unlink_path(tmp);
      throw error("cannot zero the cache statistics: cannot replace " + path + ": " + ec.message());
    }
  };
  auto zero_shard = [&](const std::string& path, bool& invalid) {
    ec = {};
    const shard_map m = map_shard(path, true, access_, euid, ec, invalid);
    if (!m.data) return false;
    std::uint64_t* c = m.counters();
    for (std::size_t i = 0; i < kSlots; ++i) {
      std::atomic_ref<std::uint64_t>(c[i]).store(i == kZeroedAtNs ? now_ns : 0,
                                                 std::memory_order_relaxed);
    }
    stamped = true;
    return true;
  };
  for (const std::string& name : names) {
    const std::string path = dir_ + "/" + name;
    bool invalid = false;
    if (zero_shard(path, invalid) || (!invalid && ec == std::errc::no_such_file_or_directory)) {
      continue;
    }
    if (!invalid) {
      throw error("cannot zero the cache statistics in " + path + ": " + ec.message());
    }
    fresh(path, /*replace=*/true);
    (void)zero_shard(path, invalid);
  }
  if (!stamped) {  // no shard yet: make one, to keep the time of the zero
    const std::string path = dir_ + "/" + shard_name(0);
    fresh(path, /*replace=*/false);
    bool invalid = false;
    if (!zero_shard(path, invalid)) {
      throw error("cannot zero the cache statistics in " + path + ": " +
                  (invalid ? std::string("not a valid shard file") : ec.message()));
    }
  }
}

namespace detail {

void cache_counters::attach(cache_statistics* sink, cache_tier tier) noexcept {
  hits.attach(sink, tier, cache_event::hit);
  misses.attach(sink, tier, cache_event::miss);
  puts.attach(sink, tier, cache_event::put);
  evictions.attach(sink, tier, cache_event::eviction);
  corrupt_dropped.attach(sink, tier, cache_event::corrupt_dropped);
  errors.attach(sink, tier, cache_event::error);
}

cache_stats cache_counters::snapshot() const noexcept {
  cache_stats s;
  s.hits = hits.load(std::memory_order_relaxed);
  s.misses = misses.load(std::memory_order_relaxed);
  s.puts = puts.load(std::memory_order_relaxed);
  s.evictions = evictions.load(std::memory_order_relaxed);
  s.corrupt_dropped = corrupt_dropped.load(std::memory_order_relaxed);
  s.errors = errors.load(std::memory_order_relaxed);
  return s;
}

}  // namespace detail
}  // namespace cucore
