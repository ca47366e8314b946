#pragma once
// Automatic PCH's images (pch/auto_pch.hpp): the registry of this process's prefixes, their image
// files under its own root, the sightings that decide when one is made, and the debug log that
// waits for its locks. Private to pch/auto_pch.cpp.

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/descriptors.hpp"
#include "cucore/log.hpp"
#include "cucore/program.hpp"
#include "pch/auto_pch.hpp"
#include "program/pch_heap.hpp"

namespace cucore::detail::pch_images {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// The images: one directory per prefix key under this process's root, NVRTC's PCH heap.

inline constexpr std::string_view kLog = "automatic PCH: ";
// Images kept per process (LRU beyond either): NVRTC writes the PCH heap's used part, ~190 MB for
// a CUB block-sort prefix.
inline constexpr std::uint64_t kMaxImageBytes = 2ull << 30;
inline constexpr std::size_t kMaxImages = 8;
// The heap's size before the process's first image, unless NVRTC_PCH_HEAP_SIZE or the caller
// chose one: NVRTC's default (256 MiB) is too small for a CuTe prefix (273 MB measured), whose
// second compile would then only grow the heap and its third make the image. The heap is
// reserved address space; only what images use is touched.
inline constexpr std::uint64_t kInitialHeap = 512ull << 20;
// Heap growth when an image does not fit, and the most the heap is grown to.
inline constexpr std::uint64_t kHeapStep = 64ull << 20;
inline constexpr std::uint64_t kMaxHeap = 4ull << 30;
// Prefixes remembered (seen once, or unusable) beyond the images.
inline constexpr std::size_t kMaxRemembered = 4096;
// The compile that makes a prefix's image is its Nth in the process (the first compiles plain:
// making an image costs more than a plain compile, and one-off prefixes never repay it).
// A compile server's worker is told when (set_auto_pch_creation): its requests come from many
// processes, and its server makes an image off the critical path of the compile that asked.
inline constexpr std::uint32_t kCreateAtSighting = 2;

// Debug messages wait until no lock of this file is held (a log handler may compile): within a
// log_scope they are kept, and said when the outermost scope ends.
struct pending_log {
  int depth = 0;
  std::vector<std::string> messages;
};
inline thread_local pending_log pending;

class log_scope {
 public:
  log_scope() { ++pending.depth; }
  ~log_scope() {
    if (--pending.depth > 0) return;
    std::vector<std::string> messages;
    messages.swap(pending.messages);
    for (const auto& m : messages) cucore::log(log_level::debug, m);
  }
  log_scope(const log_scope&) = delete;
  log_scope& operator=(const log_scope&) = delete;
};

inline void debug(const std::string& message) {
  if (pending.depth > 0) {
    pending.messages.push_back(std::string(kLog) + message);
  } else {
    cucore::log(log_level::debug, std::string(kLog) + message);
  }
}

struct file_identity {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  friend bool operator==(const file_identity&, const file_identity&) = default;
};

inline std::optional<file_identity> identity_of(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  file_identity id;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = st.st_size;
  id.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  id.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return id;
}

// The directory NVRTC's front end keeps its PCH-mode memory in (a file under TMPDIR, else /tmp).
inline fs::path nvrtc_temp_directory() {
  const char* t = std::getenv("TMPDIR");
  return (t != nullptr && *t != '\0') ? fs::path(t) : fs::path("/tmp");
}

enum class image_state : std::uint8_t { seen, ready, unusable };

struct image {
  image_state state = image_state::seen;
  fs::path dir;
  fs::path file;
  file_identity id;
  std::uint64_t bytes = 0;
  std::uint64_t last_used = 0;
  std::string maker;  // the program name of the compile that made it
};

class registry {
 public:
  static registry& get() {
    static auto* r = new registry;  // leaked: compiles may run during static destruction
    return *r;
  }

  // Whether automatic PCH is off for the process, and why (said once at debug level).
  bool disabled() {
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    if (!disabled_why_.empty() && !disabled_said_) {
      disabled_said_ = true;
      debug("off for this process: " + disabled_why_);
    }
    return !disabled_why_.empty();
  }

  void disable(const std::string& why) {
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    if (disabled_why_.empty()) disabled_why_ = why;
    debug("off for this process: " + why);
    disabled_said_ = true;
  }

  // Counts a compile of a prefix (by the text, flags and program name alone: cheap, no header
  // read) and returns how many there were in this process, this one included.
  std::uint32_t sighting(const std::string& seen) {
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    if (sightings_.size() >= kMaxRemembered && !sightings_.contains(seen)) sightings_.clear();
    return ++sightings_[seen];
  }

  // The compiles counted for `seen` start again from none.
  void forget_sightings(const std::string& seen) {
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    sightings_.erase(seen);
  }

  enum class step : std::uint8_t { plain, needs_heap };
  // Without the heap: plain for an unusable prefix.
  step peek(const std::string& identity, auto_pch_status& status) {
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    auto it = images_.find(identity);
    if (it == images_.end()) {
      if (images_.size() >= kMaxRemembered) forget_oldest_remembered();
      it = images_.emplace(identity, image{}).first;
    }
    image& e = it->second;
    e.last_used = ++clock_;
    if (e.state == image_state::unusable) {
      status = auto_pch_status::unusable;
      return step::plain;
    }
    return step::needs_heap;
  }

  struct plan {
    auto_pch_status status = auto_pch_status::off;  // created (to create), used, or plain
    fs::path dir;
    std::string maker;  // used: the program name that made the image
  };
  // With the heap held: use a verified image, or prepare an empty directory to create one in.
  plan claim(const std::string& identity, bool may_create) {
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    plan p;
    auto it = images_.find(identity);
    if (it == images_.end()) it = images_.emplace(identity, image{}).first;  // cleared meanwhile
    if (it->second.state == image_state::unusable) {
      p.status = auto_pch_status::unusable;
      return p;
    }
    image& e = it->second;
    if (e.state == image_state::ready) {
      std::string why;
      if (verified(e, why)) {
        p.status = auto_pch_status::used;
        p.dir = e.dir;
        p.maker = e.maker;
        return p;
      }
      debug("the precompiled header of prefix " + identity.substr(0, 16) + " is not used: " + why +
            "; it is removed and this compile reads the headers");
      drop_image(e);
      p.status = auto_pch_status::discarded;
      return p;
    }
    if (!may_create) {  // a server's worker that was not asked to make it
      p.status = auto_pch_status::first_seen;
      return p;
    }
    // Seen before: this compile makes the image.
    std::error_code ec;
    if (!ensure_root(ec)) {
      p.status = auto_pch_status::off;
      return p;
    }
    e.dir = root_ / (identity.substr(0, 40) + "-" + std::to_string(generation_));
    fs::remove_all(e.dir, ec);
    ec.clear();
    if (!fs::create_directory(e.dir, ec) || ec) {
      debug("cannot create " + e.dir.string() + ": " + ec.message() + "; compiling plain");
      p.status = auto_pch_status::discarded;
      return p;
    }
    p.status = auto_pch_status::created;
    p.dir = e.dir;
    return p;
  }

  // With the heap held, after NVRTC made an image in the claimed directory (compiling `maker`).
  bool created(const std::string& identity, const std::string& maker, std::string& why) {
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    auto it = images_.find(identity);
    if (it == images_.end()) return false;
    image& e = it->second;
    std::vector<fs::path> files;
    std::error_code ec;
    for (fs::directory_iterator d(e.dir, ec), end; !ec && d != end; d.increment(ec)) {
      files.push_back(d->path());
    }
    if (ec || files.size() != 1 || files.front().extension() != ".pch") {
      why = "NVRTC left " + std::to_string(files.size()) + " files in " + e.dir.string();
      drop_image(e);
      return false;
    }
    const auto id = identity_of(files.front());
    if (!id) {
      why = files.front().string() + " is not a regular file";
      drop_image(e);
      return false;
    }
    e.state = image_state::ready;
    e.maker = maker;
    e.file = files.front();
    e.id = *id;
    e.bytes = static_cast<std::uint64_t>(id->size);
    bytes_ += e.bytes;
    ++ready_;
    evict(identity);
    return true;
  }

  // The claimed directory's image is not kept: removed, and the prefix back to seen (or made
  // unusable: no image again in this process).
  void drop(const std::string& identity, bool unusable) {
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    auto it = images_.find(identity);
    if (it == images_.end()) return;
    drop_image(it->second);
    if (unusable) it->second.state = image_state::unusable;
  }

  // Prefixes keyed by the whole program name after all: another name's compile from an image of
  // one held the maker's name (formed where the scans do not see it). Said by the prefix's
  // identity without the name; its image (the heap held) goes.
  bool keyed_by_name(const std::string& identity) {
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    return named_.contains(identity);
  }
  void key_by_name(const std::string& identity) {
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    if (named_.size() >= kMaxRemembered) named_.clear();  // at worst, one more recompile each
    named_.insert(identity);
    if (const auto it = images_.find(identity); it != images_.end()) drop_image(it->second);
  }

  // With the heap held: true once per process, before its first image, unless the heap was
  // resized before (by the caller, or by cucore growing it).
  bool first_heap_use() {
    const bool first = !heap_sized_ && !pch_heap_resized();
    heap_sized_ = true;
    return first;
  }

  // With the heap held: every image is unusable after a heap resize; their files go.
  void heap_resized() {
    heap_sized_ = true;
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    ++generation_;
    for (auto& [identity, e] : images_) {
      if (e.state == image_state::ready) drop_image(e);
    }
  }

  // With the heap held: forget everything (cucore::clear_auto_pch).
  void clear() {
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    for (auto& [identity, e] : images_) drop_image(e);
    images_.clear();
    sightings_.clear();
    named_.clear();
  }

  auto_pch_totals totals() {
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    return {ready_, bytes_, root_.string()};
  }

  // At exit, by the process that made the root.
  void remove_root() {
    const log_scope said;
    std::lock_guard lock(mutex_);
    adopt_after_fork();
    if (root_.empty() || owner_ != ::getpid()) return;
    std::error_code ec;
    fs::remove_all(root_, ec);
    if (lock_fd_ >= 0) ::close(lock_fd_);
    lock_fd_ = -1;
    root_.clear();
  }

 private:
  registry() : owner_(::getpid()) {
    on_pch_heap_resize([] { get().heap_resized(); });
    if (const char* v = std::getenv("NVRTC_DISABLE_PCH"); v != nullptr) {
      disabled_why_ = "NVRTC_DISABLE_PCH is set (NVRTC's PCH is off, and says so in every log)";
    }
  }

  // A forked child shares nothing with its parent's images (they are the parent's files, and the
  // parent removes them): it starts afresh.
  void adopt_after_fork() {
    if (owner_ == ::getpid()) return;
    owner_ = ::getpid();
    images_.clear();
    sightings_.clear();
    named_.clear();
    root_.clear();
    if (lock_fd_ >= 0) ::close(lock_fd_);  // a copy: the parent's lock stays the parent's
    lock_fd_ = -1;
    bytes_ = 0;
    ready_ = 0;
  }

  bool ensure_root(std::error_code& ec) {
    if (!root_.empty()) return true;
    const fs::path tmp = nvrtc_temp_directory();
    if (::access(tmp.c_str(), W_OK | X_OK) != 0) {
      const std::string why = tmp.string() +
                              " (TMPDIR, where NVRTC keeps its PCH-mode memory) is "
                              "not a writable directory: " +
                              std::strerror(errno);
      disabled_why_ = why;
      disabled_said_ = true;
      debug("off for this process: " + why);
      return false;
    }
    sweep_stale(tmp);
    std::string templ = (tmp / ("cucore-pch-" + std::to_string(::getpid()) + "-XXXXXX")).string();
    if (::mkdtemp(templ.data()) == nullptr) {
      const std::string why =
          "cannot create a directory in " + tmp.string() + ": " + std::strerror(errno);
      disabled_why_ = why;
      disabled_said_ = true;
      debug("off for this process: " + why);
      ec = std::error_code(errno, std::generic_category());
      return false;
    }
    const fs::path root = templ;
    const int fd = detail::off_standard_streams(
        ::open((root / "owner.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (fd >= 0) ::close(fd);
      fs::remove_all(root, ec);
      disabled_why_ = "cannot lock " + (root / "owner.lock").string();
      disabled_said_ = true;
      debug("off for this process: " + disabled_why_);
      return false;
    }
    root_ = root;
    lock_fd_ = fd;
    // NVRTC's PCH files there are this process's, made from headers a prefix key covers.
    detail::add_compiler_scratch_root(root_.string());
    // Removed at exit (a crash leaves it to the next process's sweep).
    static const struct remover {
      ~remover() { registry::get().remove_root(); }
    } at_exit;
    return true;
  }

  // Roots of processes that ended without removing them (killed, crashed): nobody holds their lock.
  static void sweep_stale(const fs::path& tmp) {
    std::error_code ec;
    for (fs::directory_iterator d(tmp, ec), end; !ec && d != end; d.increment(ec)) {
      const std::string name = d->path().filename().string();
      if (!name.starts_with("cucore-pch-")) continue;
      std::error_code e2;
      if (!d->is_directory(e2) || d->is_symlink(e2)) continue;
      const int fd = detail::off_standard_streams(
          ::open((d->path() / "owner.lock").c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
      if (fd < 0) continue;  // not made by cucore (or not yet locked): left alone
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
        fs::remove_all(d->path(), e2);
        debug("removed " + d->path().string() + ", left by a process that ended");
      }
      ::close(fd);
    }
  }

  // Whether e's file is still the one NVRTC wrote, alone in its directory (NVRTC reads every
  // .pch file there, and a truncated one crashes the process).
  bool verified(const image& e, std::string& why) const {
    const auto id = identity_of(e.file);
    if (!id) {
      why = e.file.string() + " is gone";
      return false;
    }
    if (!(*id == e.id)) {
      why = e.file.string() + " changed on disk (" + std::to_string(id->size) + " bytes, was " +
            std::to_string(e.id.size) + ")";
      return false;
    }
    std::error_code ec;
    std::size_t count = 0;
    for (fs::directory_iterator d(e.dir, ec), end; !ec && d != end; d.increment(ec)) ++count;
    if (ec || count != 1) {
      why = e.dir.string() + " holds " + std::to_string(count) + " files, not only " +
            e.file.filename().string();
      return false;
    }
    return true;
  }

  void drop_image(image& e) {
    if (e.state == image_state::ready) {
      bytes_ -= e.bytes;
      --ready_;
    }
    if (!e.dir.empty()) {
      std::error_code ec;
      fs::remove_all(e.dir, ec);
    }
    if (e.state == image_state::ready) e.state = image_state::seen;
    e.dir.clear();
    e.file.clear();
    e.maker.clear();
    e.bytes = 0;
  }

  // Least recently used images beyond the limits (never the one just made).
  void evict(const std::string& keep) {
    while (ready_ > 1 && (ready_ > kMaxImages || bytes_ > kMaxImageBytes)) {
      image* oldest = nullptr;
      std::string oldest_id;
      for (auto& [identity, e] : images_) {
        if (e.state != image_state::ready || identity == keep) continue;
        if (oldest == nullptr || e.last_used < oldest->last_used) {
          oldest = &e;
          oldest_id = identity;
        }
      }
      if (oldest == nullptr) return;
      debug("removed the precompiled header of prefix " + oldest_id.substr(0, 16) +
            " (least recently used; keeping at most " + std::to_string(kMaxImages) + " images, " +
            std::to_string(kMaxImageBytes >> 20) + " MiB)");
      drop_image(*oldest);
    }
  }

  void forget_oldest_remembered() {
    auto oldest = images_.end();
    for (auto it = images_.begin(); it != images_.end(); ++it) {
      if (it->second.state == image_state::ready) continue;
      if (oldest == images_.end() || it->second.last_used < oldest->second.last_used) oldest = it;
    }
    if (oldest != images_.end()) images_.erase(oldest);
  }

  std::mutex mutex_;
  pid_t owner_;
  fs::path root_;
  int lock_fd_ = -1;
  std::string disabled_why_;
  bool disabled_said_ = false;
  std::uint64_t generation_ = 0;
  bool heap_sized_ = false;  // guarded by `heap`, not mutex_
  std::uint64_t clock_ = 0;
  std::uint64_t bytes_ = 0;
  std::size_t ready_ = 0;
  std::unordered_map<std::string, image> images_;             // by prefix key
  std::unordered_map<std::string, std::uint32_t> sightings_;  // by sighting_key
  std::unordered_set<std::string> named_;                     // key_by_name
};

}  // namespace cucore::detail::pch_images
