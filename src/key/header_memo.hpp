#pragma once
// The first layer of include tracking: each header's digest and what a scan of it found, memoised
// by file identity (in this process, and in a file beside a persistent cache), and the small
// record format the memo and the walk manifests are written in.

#include <sys/stat.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/sha256.hpp"
#include "key/conditional_scan.hpp"
#include "key/include_scanner.hpp"
#include "key/include_tracking.hpp"
#include "key/time_macros.hpp"

namespace cucore::detail {

// Files changed more recently than this are hashed on every walk and never memoised: two versions
// written within one timestamp tick (coarse kernel clock, 1 s or 2 s on some file systems) would
// have equal identities.
constexpr std::int64_t kSettleNs = 2'000'000'000;

struct header_identity {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  friend bool operator==(const header_identity&, const header_identity&) = default;
};

inline std::int64_t ns_of(const struct timespec& t) {
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

inline header_identity identity_of(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::uint64_t>(st.st_size), ns_of(st.st_mtim), ns_of(st.st_ctim)};
}

inline std::int64_t now_ns() {
  struct timespec t {};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

inline bool settled(const header_identity& id) {
  return std::max(id.mtime_ns, id.ctime_ns) < now_ns() - kSettleNs;
}

// __has_include through function-like macros: CCCL writes
//   #define _CCCL_HAS_INCLUDE(_X) __has_include(_X)      and then _CCCL_HAS_INCLUDE(<cuda_fp16.h>)
// The scanner sees __has_include(_X); the names are in the wrapper's calls, possibly in other
// files and through other macros that forward to it. So: the parameters such wrappers pass to
// __has_* are noted per file, and every call-shaped IDENT("name") / IDENT(<name>) in the closure
// is taken as a possible __has_include once any wrapper exists (a superset, forwarders included).
struct wrapper_info {
  std::vector<std::string>
      wrapper_parameters;  // parameters a function-like macro passes to __has_*
  std::vector<include_reference>
      header_calls;  // IDENT ( "name" ) and IDENT ( <name> ), as has_include
};

// What one file holds, as far as keys care.
struct scanned_file {
  sha256_digest digest{};
  std::uint64_t size = 0;
  include_scan scan;
  wrapper_info wrappers;
  conditional_structure conditionals;  // for skipping includes in groups never entered
  std::vector<std::string> defined;    // every macro name the file may #define (a superset)
  // Its mentions of __TIME__, __DATE__ or __TIMESTAMP__, paste operators and identifier pieces
  // of those names (scan_time_tokens).
  time_tokens time_macros;
  // Derived (not stored): whether where the file was found matters to what it includes
  // (#include_next, __has_include_next continue the search from there).
  bool continues_search = false;
};

// Digest, scan, wrappers, conditional structure and defined names of `text`.
std::shared_ptr<scanned_file> make_scanned(std::string_view text);

class header_digest_memo {
 public:
  explicit header_digest_memo(std::optional<std::filesystem::path> file) : file_(std::move(file)) {}

  std::shared_ptr<const scanned_file> lookup(const std::string& path, const header_identity& id) {
    std::lock_guard lock(mutex_);
    load_locked();
    auto it = records_.find(path);
    if (it == records_.end() || !(it->second.id == id)) return nullptr;
    return it->second.data;
  }

  void remember(const std::string& path, const header_identity& id,
                std::shared_ptr<const scanned_file> data) {
    std::lock_guard lock(mutex_);
    load_locked();
    records_[path] = record{id, std::move(data)};
    dirty_ = true;
  }

  // lookup(), except that a file another thread of this process is reading and scanning now is
  // waited for rather than read again: threads making keys at once (a program compiling kernels
  // from a thread pool) walk the same headers, and each would otherwise read and hash all of them.
  // nullptr: this thread is to read it, and must call release(path) after (remember() first
  // when it can be memoised).
  std::shared_ptr<const scanned_file> lookup_or_claim(const std::string& path,
                                                      const header_identity& id) {
    std::unique_lock lock(mutex_);
    load_locked();
    for (;;) {
      const auto it = records_.find(path);
      if (it != records_.end() && it->second.id == id) return it->second.data;
      if (claimed_.insert(path).second) return nullptr;
      released_.wait(lock);
    }
  }
  void release(const std::string& path) {
    {
      std::lock_guard lock(mutex_);
      claimed_.erase(path);
    }
    released_.notify_all();
  }

  // Writes the memo back when this process added records: merged with what other processes wrote
  // meanwhile, then temp file + rename, so readers see an old or a new memo, never a torn one.
  // Best effort: a memo that cannot be written only costs hashing later.
  void save() noexcept;

  // The memo's file (and so whether keys made with it are for a persistent cache).
  const std::optional<std::filesystem::path>& file() const { return file_; }

 private:
  struct record {
    header_identity id;
    std::shared_ptr<const scanned_file> data;
  };
  void load_locked();

  std::optional<std::filesystem::path> file_;
  std::mutex mutex_;
  std::condition_variable released_;
  std::unordered_set<std::string> claimed_;  // paths a thread is reading now
  bool loaded_ = false;
  bool dirty_ = false;
  std::unordered_map<std::string, record> records_;
};

// The memo's and the manifests' record format: little-endian integers and length-prefixed strings.
class record_writer {
 public:
  void u8(std::uint8_t v) { out.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) { raw(&v, sizeof v); }
  void u64(std::uint64_t v) { raw(&v, sizeof v); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out.append(s);
  }
  void strs(const std::vector<std::string>& v) {  // a count, then each string
    u32(static_cast<std::uint32_t>(v.size()));
    for (const auto& s : v) str(s);
  }
  void raw(const void* p, std::size_t n) { out.append(static_cast<const char*>(p), n); }
  std::string out;
};

class record_reader {
 public:
  explicit record_reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  std::uint8_t u8() {
    std::uint8_t v = 0;
    raw(&v, 1);
    return v;
  }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    raw(&v, sizeof v);
    return v;
  }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    raw(&v, sizeof v);
    return v;
  }
  std::string str() { return std::string(view()); }
  // A count, then each string (what record_writer::strs wrote); stops at the first error.
  std::vector<std::string> strs() {
    std::vector<std::string> v;
    const std::uint32_t n = u32();
    for (std::uint32_t i = 0; i < n && ok_; ++i) v.push_back(str());
    return v;
  }
  // A string as a view into the input.
  std::string_view view() {
    const std::uint32_t n = u32();
    if (!ok_ || n > in_.size() - pos_) {
      ok_ = false;
      return {};
    }
    const std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  void raw(void* p, std::size_t n) {
    if (!ok_ || n > in_.size() - pos_) {
      ok_ = false;
      return;
    }
    if (n != 0) std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

// A file identity in the memo's and the manifests' records.
void put_identity(record_writer& w, const header_identity& id);
header_identity get_identity(record_reader& r);

// Everything left to read from `fd` (which stays open); false on a read error.
bool read_all(int fd, std::string& data);
// Writes `bytes` to a temp file (mode 0600, or `mode`) beside `file` and renames it over `file`
// (its directory created first): readers see the old file or the new one, never a torn one.
// False when that failed (the temp file is removed). Reading such files back: key_files.hpp.
bool replace_file(const std::filesystem::path& file, std::string_view bytes,
                  std::optional<mode_t> mode = std::nullopt);
// The XXH3 that ends a memo or manifest file.
std::uint64_t checksum_of(std::string_view bytes);

}  // namespace cucore::detail
