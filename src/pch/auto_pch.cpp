#include "pch/auto_pch.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

#include "common/descriptors.hpp"
#include "common/sha256.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "loader/libraries.hpp"
#include "observe/compiler_observer.hpp"
#include "pch/pch_log.hpp"
#include "program/pch_heap.hpp"

namespace cucore {
namespace detail {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// The images: one directory per prefix key under this process's root, NVRTC's PCH heap.

constexpr std::string_view kLog = "automatic PCH: ";
// Images kept per process (LRU beyond either): NVRTC writes the PCH heap's used part, ~190 MB for
// a CUB block-sort prefix.
constexpr std::uint64_t kMaxImageBytes = 2ull << 30;
constexpr std::size_t kMaxImages = 8;
// The heap's size before the process's first image, unless NVRTC_PCH_HEAP_SIZE or the caller
// chose one: NVRTC's default (256 MiB) is too small for a CuTe prefix (273 MB measured), whose
// second compile would then only grow the heap and its third make the image. The heap is
// reserved address space; only what images use is touched.
constexpr std::uint64_t kInitialHeap = 512ull << 20;
// Heap growth when an image does not fit, and the most the heap is grown to.
constexpr std::uint64_t kHeapStep = 64ull << 20;
constexpr std::uint64_t kMaxHeap = 4ull << 30;
// Prefixes remembered (seen once, or unusable) beyond the images.
constexpr std::size_t kMaxRemembered = 4096;
// The compile that makes a prefix's image is its Nth in the process (the first compiles plain:
// making an image costs more than a plain compile, and one-off prefixes never repay it).
// A compile server's worker is told when (set_auto_pch_creation): its requests come from many
// processes, and its server makes an image off the critical path of the compile that asked.
constexpr std::uint32_t kCreateAtSighting = 2;
std::atomic<auto_pch_creation> g_creation{auto_pch_creation::second_sight};

// Debug messages wait until no lock of this file is held (a log handler may compile): within a
// log_scope they are kept, and said when the outermost scope ends.
struct pending_log {
  int depth = 0;
  std::vector<std::string> messages;
};
thread_local pending_log pending;

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

void debug(const std::string& message) {
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

std::optional<file_identity> identity_of(const fs::path& path) {
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
fs::path nvrtc_temp_directory() {
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

// What counts compiles of a prefix before its key is worth making: the prefix text, the flags
// (arch, -I, -D, ...), what of the program name the prefix shows it may depend on
// (pch_program_name) and the in-memory headers.
std::string sighting_key(const std::string& prefix, const program_options& options,
                         code_type target, std::string_view extra) {
  std::string all = prefix;
  all.push_back('\0');
  all += extra;
  all.push_back('\0');
  for (const auto& f : compiler_flags(options, source_type::cxx, target)) {
    all += f;
    all.push_back('\0');
  }
  all += pch_program_name(prefix, options.name);
  for (const auto& h : options.headers) {
    all.push_back('\0');
    all += h.name;
    all.push_back('\0');
    all += h.contents;
  }
  const auto hex = sha256_hex(std::as_bytes(std::span<const char>(all.data(), all.size())));
  return std::string(hex.data(), hex.size());
}

std::string mib(std::uint64_t bytes) {
  return std::to_string((bytes + (1u << 19)) >> 20) + " MiB";
}

// With the heap held, before the process's first image: NVRTC's PCH heap made kInitialHeap
// unless NVRTC_PCH_HEAP_SIZE set its size (NVRTC reads it at start-up) or it is larger already.
void size_first_heap(const nvrtc_api& api) {
  if (const char* env = std::getenv("NVRTC_PCH_HEAP_SIZE"); env != nullptr && *env != '\0') return;
  std::size_t current = 0;
  if (api.nvrtcGetPCHHeapSize(&current) != NVRTC_SUCCESS || current >= kInitialHeap) return;
  try {
    resize_pch_heap(api, kInitialHeap);
    debug("the PCH heap is " + mib(kInitialHeap) + " (NVRTC's default: " + mib(current) + ")");
  } catch (const std::exception& e) {
    debug(std::string("the PCH heap stays at ") + mib(current) + ": " + e.what());
  }
}

// Probes for prefix keys. An image lives in this process, with its one NVRTC: the key needs no
// NVRTC identity (asking the installed probe costs a compile, ~150 ms), only the header closure,
// with the digests of the cache's memo when the compile goes through a cache.
class prefix_probes final : public compiler_probes {
 public:
  explicit prefix_probes(std::optional<fs::path> memo) : memo_(std::move(memo)) {}
  version_probe nvrtc() const override { return {true, "the NVRTC of this process"}; }
  version_probe nvvm() const override { return {false, "unused"}; }
  linker_probe linker() const override { return {}; }
  std::optional<fs::path> header_digest_memo() const override { return memo_; }

 private:
  std::optional<fs::path> memo_;
};

// The prefix's key: make_program_cache_key over the prefix alone (the flags, the program name as
// pch_program_name keeps it, in-memory headers, and the include closure of the prefix).
std::optional<program_cache_key> prefix_key(const std::string& prefix,
                                            const program_options& options,
                                            const std::string& keyed_name, code_type target,
                                            const std::optional<fs::path>& memo,
                                            std::string_view extra, std::string& why) {
  program_cache_key_inputs in;
  // Only where the caller tells compiles apart beyond the options (a server's worker); an extra
  // digest also lets the key take includes it cannot work out, refused below.
  if (!extra.empty()) in.extra_digest = std::string(extra);
  in.code = prefix;
  in.code_type = source_type::cxx;
  in.options = options;
  in.options.name = keyed_name;
  in.target = target;
  try {
    program_cache_key key = make_program_cache_key(in, prefix_probes(memo));
    if (!key.includes().tracked) {
      why = "the prefix reads no header";
      return std::nullopt;
    }
    if (!key.includes().vouched.empty()) {
      why = "the prefix includes through a macro cucore cannot work out (" +
            key.includes().vouched.front() + ")";
      return std::nullopt;
    }
    return key;
  } catch (const std::exception& e) {
    why = std::string("the prefix has no key: ") + e.what();
    return std::nullopt;
  }
}

// ---------------------------------------------------------------------------------------------
// A defense in depth for images shared across names: the maker's name in the output.

// What NVRTC gave for `prog`: each output it has (PTX, cubin, LTO-IR, Tile IR), apart.
std::vector<std::string> nvrtc_outputs(const nvrtc_api& api, _nvrtcProgram* prog) {
  std::vector<std::string> out;
  const auto add = [&](auto size_of, auto get) {
    std::size_t n = 0;
    if (size_of == nullptr || get == nullptr || size_of(prog, &n) != NVRTC_SUCCESS || n == 0) {
      return;
    }
    std::string bytes(n, '\0');
    if (get(prog, bytes.data()) == NVRTC_SUCCESS) out.push_back(std::move(bytes));
  };
  add(api.nvrtcGetPTXSize, api.nvrtcGetPTX);
  add(api.nvrtcGetCUBINSize, api.nvrtcGetCUBIN);
  add(api.nvrtcGetLTOIRSize, api.nvrtcGetLTOIR);
  add(api.nvrtcGetTileIRSize, api.nvrtcGetTileIR);
  return out;
}

// PTX writes an initialised char array (a string literal's too) as decimals: "65, 46, 99, 117".
std::string decimals(std::string_view text) {
  std::string out;
  for (const char c : text) {
    out += (out.empty() ? "" : ", ") + std::to_string(static_cast<unsigned char>(c));
  }
  return out;
}

bool digit(const std::string_view text, std::size_t at) {
  return at < text.size() && text[at] >= '0' && text[at] <= '9';
}

// Whether `form` occurs in `text` other than inside an occurrence of `own` (the compiling
// program's name, which may hold the maker's: "sub/A.cu" holds "A.cu"). Decimals match whole.
bool occurs_apart(std::string_view text, std::string_view form, std::string_view own,
                  bool numbers) {
  for (std::size_t at = text.find(form); at != std::string_view::npos;
       at = text.find(form, at + 1)) {
    if (numbers && ((at > 0 && digit(text, at - 1)) || digit(text, at + form.size()))) continue;
    bool inside = false;
    for (std::size_t k = own.find(form); !inside && k != std::string_view::npos;
         k = own.find(form, k + 1)) {
      inside = at >= k && text.substr(at - k, own.size()) == own;
    }
    if (!inside) return true;
  }
  return false;
}

// The spelling of `maker` (the name as given, its basename) found in the outputs or the log of a
// compile of `name`, or "".
std::string makers_name_in(const std::string& maker, const std::string& name,
                           const std::vector<std::string>& outputs, const std::string& log) {
  std::vector<std::string> forms{maker};
  if (const std::size_t slash = maker.rfind('/');
      slash != std::string::npos && slash + 1 < maker.size()) {
    forms.push_back(maker.substr(slash + 1));
  }
  const std::string own_numbers = decimals(name);
  for (const auto& form : forms) {
    const std::string numbers = decimals(form);
    if (occurs_apart(log, form, name, false)) return "\"" + form + "\" (in the log)";
    for (const auto& bytes : outputs) {
      if (occurs_apart(bytes, form, name, false)) return "\"" + form + "\"";
      if (occurs_apart(bytes, numbers, own_numbers, true)) {
        return "\"" + form + "\" (as " + numbers + ")";
      }
    }
  }
  return {};
}

}  // namespace

void set_auto_pch_creation(auto_pch_creation when) {
  g_creation = when;
}

auto_pch_totals auto_pch_state() {
  return registry::get().totals();
}

auto_pch_compile::auto_pch_compile(const nvrtc_api& api, std::string_view code,
                                   const program_options& options, code_type target,
                                   std::optional<std::filesystem::path> header_memo,
                                   std::string_view extra_identity)
    : api_(api) {
  const log_scope said;
  // The caller's own PCH options keep their rules (and instantiate_templates_in_pch=true would
  // reorder the output's symbols: a different cubin).
  if (!options.auto_pch.value_or(true) || options.pch.value_or(false) || options.create_pch ||
      options.use_pch || options.pch_dir) {
    return;
  }
  if (options.instantiate_templates_in_pch.value_or(false)) {
    debug("not used: instantiate_templates_in_pch=true changes the order of symbols in the output");
    return;
  }
  registry& reg = registry::get();
  if (reg.disabled()) return;

  status_ = auto_pch_status::no_prefix;
  const pch_prefix scan = scan_pch_prefix(code);
  if (!scan.balanced || scan.line_marker || (!scan.includes && options.pre_include.empty())) {
    return;
  }
  std::string prefix(code.substr(0, scan.end));
  if (prefix.empty()) prefix = "\n";  // pre_include alone
  options_ = options;
  bool may_create = true;
  try {
    sighting_ = sighting_key(prefix, options, target, extra_identity);
    const auto creation = g_creation.load();
    may_create = creation != auto_pch_creation::never;
    if (creation == auto_pch_creation::second_sight &&
        reg.sighting(sighting_) < kCreateAtSighting) {
      status_ = auto_pch_status::first_seen;
      return;
    }
  } catch (const std::exception& e) {
    debug(std::string("not used: ") + e.what());
    return;
  }
  std::string why;
  const std::string keyed_name = pch_program_name(prefix, options.name);
  prefix_key_ = prefix_key(prefix, options, keyed_name, target, header_memo, extra_identity, why);
  if (!prefix_key_) {
    debug("not used for \"" + options.name + "\": " + why);
    return;
  }
  identity_ = prefix_key_->hex();
  // Images are shared across program names where the name cannot reach them (measured:
  // docs/compile-server.md, "Images across program names"); else the whole name keys it too.
  bool whole_name = keyed_name == options.name;
  try {
    whole_name = whole_name ||
                 pch_needs_whole_name(prefix, *prefix_key_, options,
                                      compiler_flags(options, source_type::cxx, target), target);
  } catch (const std::exception&) {
    whole_name = true;
  }
  // A name the scans missed showed in an output from this prefix's image (retry_for_makers_name).
  whole_name = whole_name || (keyed_name != options.name && reg.keyed_by_name(identity_));
  if (whole_name && keyed_name != options.name) {
    const std::string named = identity_ + '\0' + options.name;
    const auto hex = sha256_hex(std::as_bytes(std::span<const char>(named.data(), named.size())));
    identity_.assign(hex.data(), hex.size());
  }
  if (reg.peek(identity_, status_) == registry::step::plain) return;

  heap_ = lock_pch_heap();
  if (reg.first_heap_use()) size_first_heap(api_);
  const registry::plan p = reg.claim(identity_, may_create);
  status_ = p.status;
  if (p.status != auto_pch_status::created && p.status != auto_pch_status::used) {
    heap_.unlock();
    return;
  }
  creating_ = p.status == auto_pch_status::created;
  if (p.status == auto_pch_status::used && p.maker != options.name) maker_ = p.maker;
  flags_ = {"--pch", "--pch-dir=" + p.dir.string()};
  if (!options.instantiate_templates_in_pch)
    flags_.push_back("--instantiate-templates-in-pch=false");
  if (!options.pch_messages) flags_.push_back("--pch-messages=false");
  if (!options.pch_verbose) flags_.push_back("--pch-verbose=false");
  // NVRTC warns (#639, even with --pch-verbose=false) when the heap is too small for an image.
  flags_.push_back("--diag-suppress=639");
}

auto_pch_compile::~auto_pch_compile() {
  // A creation that did not finish (the compile threw) leaves no image behind.
  if (creating_ && heap_.owns_lock()) registry::get().drop(identity_, false);
}

void auto_pch_compile::finish_plain(auto_pch_status status) {
  status_ = status;
  creating_ = false;
  flags_.clear();
  if (heap_.owns_lock()) heap_.unlock();
}

bool auto_pch_compile::retry_for_pch_diagnostics(const std::string& log) {
  const std::string line = pch_diagnostic(log);
  if (line.empty()) return false;
  debug("NVRTC's log for \"" + options_.name + "\" speaks of precompiled headers (" + line +
        "): compiling it again without them, as every compile of its prefix in this process");
  registry::get().drop(identity_, true);
  finish_plain(auto_pch_status::discarded);
  return true;
}

// After a compile from an image another program name made: the output or log holding that name
// means the name reached the image in a way the prefix scans do not see (__BASE_FILE__ pasted
// from one-character pieces, say): compiled again plain, and the prefix's images keyed by the
// whole name from then on. A program that names the other file itself costs a recompile.
bool auto_pch_compile::retry_for_makers_name(_nvrtcProgram* prog, const std::string& log) {
  if (maker_.empty() || maker_ == options_.name) return false;
  const std::string found = makers_name_in(maker_, options_.name, nvrtc_outputs(api_, prog), log);
  if (found.empty()) return false;
  debug("the output of \"" + options_.name + "\" from the precompiled header of prefix " +
        identity_.substr(0, 16) + ", made compiling \"" + maker_ + "\", holds " + found +
        ": compiling it again without it; this prefix's images are keyed by the whole program "
        "name in this process from now on");
  registry::get().key_by_name(identity_);
  finish_plain(auto_pch_status::discarded);
  return true;
}

bool auto_pch_compile::succeeded(_nvrtcProgram* prog, const std::string& log) {
  const log_scope said;
  if (!active()) return false;
  if (retry_for_pch_diagnostics(log)) return true;
  registry& reg = registry::get();
  const nvrtcResult made = api_.nvrtcGetPCHCreateStatus(prog);
  const std::string which = "prefix " + identity_.substr(0, 16) + " of \"" + options_.name + "\"";
  if (!creating_) {
    if (made == NVRTC_SUCCESS) {
      // NVRTC did not take the image offered (and made another): start over at the next compile.
      debug("NVRTC did not use the precompiled header of " + which +
            " and made another; both "
            "are removed");
      reg.drop(identity_, false);
      finish_plain(auto_pch_status::discarded);
      return false;
    }
    if (retry_for_makers_name(prog, log)) return true;
    finish_plain(auto_pch_status::used);
    return false;
  }
  switch (made) {
    case NVRTC_SUCCESS: {
      if (!quiet(log)) {
        debug("the precompiled header of " + which +
              " is not kept: the compile that made it "
              "logged diagnostics, which a compile from it would not repeat for the headers");
        reg.drop(identity_, true);
        finish_plain(auto_pch_status::unusable);
        return false;
      }
      // The headers were read after the prefix's key was made: kept only if each is still the
      // file the key hashed, and had settled then (program_cache_key::check_store).
      if (const auto refusal = prefix_key_->check_store()) {
        debug("the precompiled header of " + which + " is not kept: " + refusal->message);
        reg.drop(identity_, false);
        finish_plain(auto_pch_status::discarded);
        return false;
      }
      std::string why;
      if (!reg.created(identity_, options_.name, why)) {
        debug("the precompiled header of " + which + " is not kept: " + why);
        finish_plain(auto_pch_status::discarded);
        return false;
      }
      finish_plain(auto_pch_status::created);
      return false;
    }
    case NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED: {
      std::size_t required = 0;
      std::size_t current = 0;
      reg.drop(identity_, false);
      if (api_.nvrtcGetPCHHeapSizeRequired(prog, &required) != NVRTC_SUCCESS ||
          api_.nvrtcGetPCHHeapSize(&current) != NVRTC_SUCCESS) {
        reg.drop(identity_, true);
        finish_plain(auto_pch_status::unusable);
        return false;
      }
      const std::uint64_t grown = (required + kHeapStep - 1) / kHeapStep * kHeapStep + kHeapStep;
      if (grown > kMaxHeap) {
        debug("no precompiled header for " + which + ": it needs " + mib(required) +
              " of PCH heap, more than the " + mib(kMaxHeap) + " cucore grows it to");
        reg.drop(identity_, true);
        finish_plain(auto_pch_status::unusable);
        return false;
      }
      try {
        resize_pch_heap(api_, std::max<std::uint64_t>(grown, current));
        debug("the PCH heap (" + mib(current) + ") was too small for " + which + " (" +
              mib(required) + "): grown to " + mib(std::max<std::uint64_t>(grown, current)) +
              "; the next compile of this prefix makes its precompiled header");
      } catch (const std::exception& e) {
        debug(std::string("could not grow the PCH heap: ") + e.what());
        reg.drop(identity_, true);
        finish_plain(auto_pch_status::unusable);
        return false;
      }
      finish_plain(auto_pch_status::discarded);
      return false;
    }
    case NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED:
      debug("NVRTC made no precompiled header for " + which +
            " (it precompiles only leading #include lines at file scope, outside #if and without "
            "#line); its compiles read the headers");
      reg.drop(identity_, true);
      finish_plain(auto_pch_status::unusable);
      return false;
    default:
      debug("NVRTC failed to make the precompiled header of " + which + " (" +
            api_.nvrtcGetErrorString(made) + "); its compiles read the headers");
      reg.drop(identity_, true);
      finish_plain(auto_pch_status::unusable);
      return false;
  }
}

bool auto_pch_compile::failed(const std::string& log) {
  const log_scope said;
  if (!active()) return false;
  const bool was_creating = creating_;
  if (was_creating) {
    // The code does not compile: its next compiles are plain again until it comes back twice (a
    // failing edit-compile loop does not pay for making an image each time).
    registry::get().drop(identity_, false);
    registry::get().forget_sightings(sighting_);
  }
  failure_ = catastrophic_line(log);
  if (failure_.empty()) {
    if (retry_for_pch_diagnostics(log)) return true;
    // An error in the code: the plain compile would report the same (the prefix is quiet, or this
    // compile read the headers itself).
    finish_plain(was_creating ? auto_pch_status::discarded : status_);
    return false;
  }
  debug("compiling \"" + options_.name + "\" with precompiled headers failed (" + failure_ +
        "); compiling it again without them");
  finish_plain(auto_pch_status::discarded);
  return true;
}

void auto_pch_compile::retry_succeeded() {
  if (failure_.empty()) return;
  registry::get().disable("compiling with precompiled headers failed (" + failure_ +
                          ") where compiling without them succeeded; check TMPDIR (" +
                          nvrtc_temp_directory().string() + ") has room");
}

}  // namespace detail

std::string_view to_string(auto_pch_status status) noexcept {
  switch (status) {
    case auto_pch_status::off:
      return "off";
    case auto_pch_status::no_prefix:
      return "no_prefix";
    case auto_pch_status::first_seen:
      return "first_seen";
    case auto_pch_status::created:
      return "created";
    case auto_pch_status::used:
      return "used";
    case auto_pch_status::unusable:
      return "unusable";
    case auto_pch_status::discarded:
      return "discarded";
  }
  return "unknown";
}

void clear_auto_pch() {
  auto heap = detail::lock_pch_heap();
  detail::registry::get().clear();
}

}  // namespace cucore
