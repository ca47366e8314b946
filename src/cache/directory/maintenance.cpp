// The directory cache's scans: the size estimate and eviction after a put, size, clear, and the
// maintenance the `cucore cache` tool uses (list, verify, trim).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cache/directory/internal.hpp"
#include "cache/entry_format.hpp"
#include "cache/key_files.hpp"
#include "cache/trust.hpp"

namespace cucore {
namespace posix = detail::posix;
using detail::directory::hooks;
using detail::directory::removal;
using detail::directory::walk_entries;
using detail::directory::walk_item;
using detail::directory::walk_tmp;

namespace {

// list() reads this much of a file first, and more only for a header that does not fit.
constexpr std::size_t kHeaderPrefixBytes = 64 * 1024;

// Whether `item`'s location is where its key puts it: entries/<hex[0:2]>/<hex[2:]>.
bool location_matches(const walk_item& item, std::span<const std::byte> key) {
  const auto hex = detail::sha256_hex(key);
  return item.shard == std::string_view(hex.data(), 2) &&
         item.name == std::string_view(hex.data() + 2, 62);
}

// Reads a whole regular file without following a symlink; `st` is set to what fstat says of the
// file read. Empty optional when it is not a regular file or cannot be read.
std::optional<std::vector<std::byte>> read_whole(const std::string& path, struct stat& st) {
  std::error_code ec;
  posix::unique_fd fd =
      posix::open_file(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0, ec);
  if (!fd) return std::nullopt;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  std::vector<std::byte> data;
  try {
    data.resize(static_cast<std::size_t>(st.st_size));
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  }
  std::size_t got = 0;
  if (posix::read_fully(fd.get(), data, got)) return std::nullopt;
  data.resize(got);
  return data;
}

// The header of the entry in `fd` (a regular file of `size` bytes), reading only a prefix of it.
std::optional<detail::entry_header> read_header(int fd, std::uint64_t size) {
  if (size <= kHeaderPrefixBytes) {
    std::vector<std::byte> data(static_cast<std::size_t>(size));
    std::size_t got = 0;
    if (posix::pread_fully(fd, data, 0, got) || got != data.size()) return std::nullopt;
    return detail::read_entry_header(data);
  }
  // read_entry_header wants a span of the whole file (it checks the payload length against it)
  // but reads only the header: present the file as lazily-zeroed memory of its full size with
  // just a prefix read in, and read more only if the header turns out longer than the prefix.
  posix::anonymous_memory memory(static_cast<std::size_t>(size));
  if (!memory.valid()) return std::nullopt;
  std::size_t have = 0;
  for (std::size_t want = kHeaderPrefixBytes;; want = std::min<std::uint64_t>(want * 2, size)) {
    std::size_t got = 0;
    if (posix::pread_fully(fd, memory.bytes().subspan(have, want - have), have, got)) {
      return std::nullopt;
    }
    have += got;
    if (have < want) return std::nullopt;  // shorter than its size: changed under us
    if (std::memcmp(memory.bytes().data(), detail::kEntryMagic.data(),
                    detail::kEntryMagic.size()) != 0) {
      return std::nullopt;  // a foreign file: do not read on
    }
    auto header = detail::read_entry_header(memory.bytes());
    // Every byte the parser looked at was read when the payload starts within what was read.
    if (header && header->payload_offset <= have) return header;
    if (have == size) return std::nullopt;
  }
}

}  // namespace

void file_stream_program_cache::after_put(std::uint64_t added, std::uint64_t old_size) {
  const std::uint64_t cap = *options_.max_size_bytes;
  bool scan_now = false;
  {
    std::lock_guard lock(tracker_mutex_);
    tracked_bytes_ += added;
    tracked_bytes_ -= std::min(tracked_bytes_, old_size);
    written_since_scan_ += added;
    scan_now = tracked_bytes_ > cap || written_since_scan_ > cap / 8;
  }
  if (!scan_now) return;

  std::unique_lock evicting(evict_mutex_, std::try_to_lock);
  if (!evicting) return;  // another thread of this object is scanning right now
  sweep_stale_tmp();
  scan_result s = scan(/*with_tmp=*/true);
  std::uint64_t total = s.entry_bytes + s.tmp_bytes;
  if (total > cap) {
    const std::uint64_t target = cap - cap / 10;
    evict_to(target, s, total);
  }
  std::lock_guard lock(tracker_mutex_);
  tracked_bytes_ = total;
  written_since_scan_ = 0;
}

// Evicts least-recently-read entries of `scanned` until `total` is at most `target`; `total` is
// kept equal to what the directory holds, however the races with peers go.
std::size_t file_stream_program_cache::evict_to(std::uint64_t target, scan_result& scanned,
                                                std::uint64_t& total) {
  std::sort(
      scanned.entries.begin(), scanned.entries.end(), [](const scan_entry& a, const scan_entry& b) {
        const auto ka = std::make_tuple(posix::to_ns(a.st.st_atim), posix::to_ns(a.st.st_mtim));
        const auto kb = std::make_tuple(posix::to_ns(b.st.st_atim), posix::to_ns(b.st.st_mtim));
        if (ka != kb) return ka < kb;
        return a.path < b.path;
      });
  std::size_t evicted = 0;
  for (const scan_entry& e : scanned.entries) {
    if (total <= target) break;
    const removal_outcome r = remove_guarded(e, /*keep_if_read=*/true);
    if (r.delta < 0) {
      total -= std::min<std::uint64_t>(total, static_cast<std::uint64_t>(-r.delta));
    } else {
      total += static_cast<std::uint64_t>(r.delta);
    }
    if (r.result == removal::removed) {
      ++evicted;
      stats_.evictions.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return evicted;
}

file_stream_program_cache::scan_result file_stream_program_cache::scan(bool with_tmp) {
  if (const auto* h = hooks(); h != nullptr && h->on_scan) h->on_scan();
  scan_result s;
  walk_entries(entries_dir_, [&](walk_item&& item) {
    if (!item.in_shard || !S_ISREG(item.st.st_mode)) return;
    s.entry_bytes += static_cast<std::uint64_t>(item.st.st_size);
    s.entries.push_back(scan_entry{std::move(item.path), item.st});
  });
  if (with_tmp) {
    walk_tmp(tmp_dir_, [&](int, const char*, const struct stat& st) {
      if (S_ISREG(st.st_mode)) s.tmp_bytes += static_cast<std::uint64_t>(st.st_size);
    });
  }
  return s;
}

std::size_t file_stream_program_cache::size() {
  check_open();
  std::size_t n = 0;
  walk_entries(entries_dir_, [&](walk_item&& item) {
    if (item.in_shard && S_ISREG(item.st.st_mode)) ++n;
  });
  return n;
}

std::uint64_t file_stream_program_cache::size_bytes() {
  check_open();
  std::uint64_t n = 0;
  walk_entries(entries_dir_, [&](walk_item&& item) {
    if (item.in_shard && S_ISREG(item.st.st_mode)) n += static_cast<std::uint64_t>(item.st.st_size);
  });
  return n;
}

void file_stream_program_cache::clear() {
  check_writable("clear");
  std::lock_guard evicting(evict_mutex_);
  walk_entries(entries_dir_, [&](walk_item&& item) {
    if (!item.in_shard || S_ISDIR(item.st.st_mode)) return;
    (void)remove_guarded({item.path, item.st}, false);
  });
  sweep_stale_tmp();
  // The key's files beside the entries: temp files a killed writer left (key_files.hpp).
  detail::sweep_key_files(*compiler_version_memo());
  if (options_.max_size_bytes) {
    scan_result s = scan(/*with_tmp=*/true);
    std::lock_guard lock(tracker_mutex_);
    tracked_bytes_ = s.entry_bytes + s.tmp_bytes;
    written_since_scan_ = 0;
  }
}

// -----------------------------------------------------------------------------------------------
// Maintenance: list, verify, trim

std::vector<cache_entry_info> file_stream_program_cache::list() {
  check_open();
  std::vector<cache_entry_info> out;
  walk_entries(entries_dir_, [&](walk_item&& item) {
    if (!item.in_shard || !S_ISREG(item.st.st_mode)) return;
    std::error_code ec;
    posix::unique_fd fd =
        posix::open_file(item.path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0, ec);
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    auto header = read_header(fd.get(), static_cast<std::uint64_t>(st.st_size));
    if (!header || !location_matches(item, header->key)) return;
    cache_entry_info info =
        detail::entry_info(std::move(*header), static_cast<std::uint64_t>(st.st_size));
    info.last_used = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::nanoseconds(posix::to_ns(st.st_atim))));
    out.push_back(std::move(info));
  });
  return out;
}

cache_verify_report file_stream_program_cache::verify(bool remove_bad) {
  check_open();
  remove_bad = remove_bad && !options_.read_only;  // a read-only layer is reported on only
  cache_verify_report report;
  std::lock_guard evicting(evict_mutex_);
  // What is not an entry at all (a directory, a symlink, a FIFO, ...): cleared, and noted.
  auto clear = [&](const walk_item& item) {
    if (!remove_bad) {
      report.notes.push_back(item.path + " is " + detail::directory::kind_of(item.st.st_mode) +
                             ", not an entry");
      return;
    }
    obstacle_outcome o = clear_obstacle({item.path, item.st});
    if (o.result == obstacle_outcome::removed) ++report.removed;
    if (o.result == obstacle_outcome::moved_aside) ++report.moved_aside;
    if (o.result == obstacle_outcome::removed || o.result == obstacle_outcome::moved_aside) {
      stats_.corrupt_dropped.fetch_add(1, std::memory_order_relaxed);
    }
    if (!o.note.empty()) report.notes.push_back(std::move(o.note));
  };
  if (remove_bad) {
    // Temp files of the key's files that a killed writer left (key_files.hpp).
    detail::sweep_key_files(*compiler_version_memo());
    // Directories an earlier repair moved aside into tmp/ but could not remove entirely.
    const std::string prefix = std::string(detail::directory::kAsidePrefix) + "-";
    walk_tmp(tmp_dir_, [&](int dir_fd, const char* name, const struct stat& st) {
      if (!S_ISDIR(st.st_mode) || std::string_view(name).substr(0, prefix.size()) != prefix) {
        return;
      }
      const std::string path = tmp_dir_ + "/" + name;
      struct stat tmp_st {};
      if (::fstat(dir_fd, &tmp_st) != 0) return;
      const auto t = detail::directory::remove_tree(dir_fd, name, path, tmp_st.st_dev);
      if (t.error) {
        report.notes.push_back("could not remove " + path +
                               " (set aside by an earlier repair): " + t.failed_at + ": " +
                               t.error.message() + "; remove it by hand: rm -rf " + path);
      }
    });
  }
  walk_entries(entries_dir_, [&](walk_item&& item) {
    ++report.entries;
    if (!S_ISREG(item.st.st_mode)) {
      ++report.corrupt;
      return clear(item);
    }
    struct stat st = item.st;  // what is removed must be what was checked
    bool good = false;
    // An untrusted entry (see get()) counts as bad, whatever it holds.
    if (item.in_shard &&
        detail::trust::acceptable(item.st, options_.access, static_cast<uid_t>(euid_))) {
      if (auto data = read_whole(item.path, st)) {
        auto header = detail::read_entry_header(*data);
        if (header && location_matches(item, header->key)) {
          const std::vector<std::byte> key = std::move(header->key);
          good = detail::decode_entry(std::move(*data), key).status == detail::entry_status::ok;
        }
      }
    }
    if (good) {
      ++report.ok;
      return;
    }
    ++report.corrupt;
    if (!remove_bad) return;
    const removal_outcome r = remove_guarded({item.path, st}, false);
    if (r.result == removal::removed) {
      ++report.removed;
      stats_.corrupt_dropped.fetch_add(1, std::memory_order_relaxed);
    } else if (r.result == removal::failed) {
      report.notes.push_back("could not remove the damaged entry " + item.path + ": " +
                             r.error.message() + "; remove it by hand: rm -f " + item.path);
    }
  });
  return report;
}

std::size_t file_stream_program_cache::trim(std::uint64_t max_size_bytes) {
  check_writable("trim");
  std::lock_guard evicting(evict_mutex_);
  sweep_stale_tmp();
  scan_result s = scan(/*with_tmp=*/true);
  std::uint64_t total = s.entry_bytes;
  const std::size_t evicted = evict_to(max_size_bytes, s, total);
  if (options_.max_size_bytes) {
    std::lock_guard lock(tracker_mutex_);
    tracked_bytes_ = total + s.tmp_bytes;
    written_since_scan_ = 0;
  }
  return evicted;
}

}  // namespace cucore
