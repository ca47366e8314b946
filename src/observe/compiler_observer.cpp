#include "observe/compiler_observer.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/enum_names.hpp"
#include "observe/compile_replay.hpp"
#include "observe/got_patch.hpp"

namespace cucore::detail {

constexpr auto kObservedCallNames = detail::name_each<observed_call::clock>(
    "open", "stat", "lstat", "opendir", "getenv", "getcwd", "side_effect", "clock");

std::string_view to_string(observed_call call) noexcept {
  return kObservedCallNames(call);
}

struct compiler_observation::state {
  state* outer = nullptr;  // the observation open on this thread before this one
  std::vector<observed_input> seen;
  bool finished = false;
};

namespace {

// Every observation open in the process (any thread), and the observation innermost on this
// thread. A compiler call on a thread with an observation goes to that thread's observations; on
// any other thread (a compiler's own worker threads) to every open one: over-attributing costs a
// store, never a hit.
std::mutex& registry_mutex() {
  static auto* m = new std::mutex;  // leaked: compilers may call in until exit
  return *m;
}
std::vector<compiler_observation::state*>& open_observations() {
  static auto* v = new std::vector<compiler_observation::state*>;
  return *v;
}
std::atomic<int> open_count{0};
thread_local compiler_observation::state* innermost = nullptr;

std::string& unobserved_reason() {
  static auto* s = new std::string;
  return *s;
}

std::vector<std::string>& scratch_roots() {
  static auto* v = new std::vector<std::string>;
  return *v;
}

bool under(std::string_view path, std::string_view root) {
  return path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
         path[root.size()] == '/';
}

void record(observed_call call, bool found, std::string name) {
  if (open_count.load(std::memory_order_acquire) == 0) return;
  const int saved = errno;  // the compiler reads errno after the call
  {
    std::lock_guard lock(registry_mutex());
    for (const auto& root : scratch_roots()) {
      const auto at = name.find('/');  // a side effect's name is "FUNCTION PATH"
      if (at != std::string::npos && under(std::string_view(name).substr(at), root)) {
        errno = saved;
        return;
      }
    }
    if (innermost != nullptr) {
      for (auto* s = innermost; s != nullptr; s = s->outer) s->seen.push_back({call, found, name});
    } else {
      for (auto* s : open_observations()) s->seen.push_back({call, found, name});
    }
  }
  errno = saved;
}

// A path the compiler gave, as the kernel resolves it now: against the working directory of this
// moment when relative.
std::string absolute(const char* path) {
  if (path[0] == '/') return absolute_path(path, "/");
  const int saved = errno;
  char cwd[4096];
  const bool known = ::getcwd(cwd, sizeof cwd) != nullptr;
  errno = saved;
  return absolute_path(path, known ? cwd : "/");
}

void record_name(observed_call call, bool found, const char* name) {
  if (open_count.load(std::memory_order_acquire) == 0) return;
  record(call, found, name != nullptr ? std::string(name) : std::string());
}

void record_path(observed_call call, bool found, const char* path) {
  if (open_count.load(std::memory_order_acquire) == 0) return;
  record(call, found, path != nullptr && path[0] != '\0' ? absolute(path) : std::string());
}

// A side effect: "FUNCTION PATH" (the path made absolute), or "FUNCTION COMMAND".
void record_effect(const char* function, const char* path, bool is_path = true) {
  if (open_count.load(std::memory_order_acquire) == 0) return;
  std::string name = function;
  if (path != nullptr && path[0] != '\0') name.append(" ").append(is_path ? absolute(path) : path);
  record(observed_call::side_effect, true, std::move(name));
}

// The compile's own scratch files: a file it created (opened for writing, creat, mkstemp) and
// removed again (unlink, remove), absent now. NVRTC's front end makes one in TMPDIR in PCH mode
// (measured: /tmp/edg0_PID created, unlinked at once, used through its descriptor). Every input
// about such a path is dropped: its contents were the compile's own.
void drop_scratch_files(std::vector<observed_input>& inputs) {
  std::set<std::string> created, removed;
  for (const auto& in : inputs) {
    if (in.call != observed_call::side_effect) continue;
    const auto space = in.name.find(' ');
    if (space == std::string::npos || in.name.compare(space + 1, 1, "/") != 0) continue;
    const std::string_view function(in.name.data(), space);
    const std::string path = in.name.substr(space + 1);
    if (function == "fopen" || function == "freopen" || function == "open" ||
        function == "openat" || function == "creat" || function == "mkstemp") {
      created.insert(path);
    } else if (function == "unlink" || function == "remove") {
      removed.insert(path);
    }
  }
  std::set<std::string> scratch;
  for (const auto& path : created) {
    struct stat st {};
    if (removed.count(path) != 0 && ::lstat(path.c_str(), &st) != 0) scratch.insert(path);
  }
  if (scratch.empty()) return;
  const auto about_scratch = [&](const observed_input& in) {
    if (in.call == observed_call::getenv || in.call == observed_call::getcwd ||
        in.call == observed_call::clock) {
      return false;
    }
    const auto space = in.name.find(' ');
    const std::string path = in.call == observed_call::side_effect && space != std::string::npos
                                 ? in.name.substr(space + 1)
                                 : in.name;
    return scratch.count(path) != 0;
  };
  inputs.erase(std::remove_if(inputs.begin(), inputs.end(), about_scratch), inputs.end());
}

// A call that answers 0 when it found `path` (stat, access, ...): recorded as `call`, and its
// result handed back to the compiler.
int path_probe(observed_call call, const char* path, int result) {
  record_path(call, result == 0, path);
  return result;
}

// A call that changes the file system: recorded only when it succeeded (a call that failed changed
// nothing), and its result handed back to the compiler.
int file_system_change(const char* function, const char* path, int result) {
  if (result == 0) record_effect(function, path);
  return result;
}

// The mode open() and openat() take after `flags` when those create a file (read only then: the
// caller passed none otherwise), else 0.
mode_t creation_mode(int flags, va_list ap) {
  if ((flags & O_CREAT) == 0 && (flags & O_TMPFILE) != O_TMPFILE) return 0;
  return static_cast<mode_t>(va_arg(ap, int));
}

bool fopen_writes(const char* mode) {
  return mode != nullptr && std::strpbrk(mode, "wa+") != nullptr;
}
bool open_writes(int flags) {
  return (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0;
}

}  // namespace

// -----------------------------------------------------------------------------------------------
// The replacements patched into the compilers' imports. Each calls this process's own C library
// function (the one the compiler would have bound to) and records what it was asked and found.

namespace observed {

extern "C" {

FILE* fopen_(const char* path, const char* mode) {
  FILE* f = std::fopen(path, mode);
  if (fopen_writes(mode)) {
    if (f != nullptr) record_effect("fopen", path);
  } else {
    record_path(observed_call::open, f != nullptr, path);
  }
  return f;
}

FILE* freopen_(const char* path, const char* mode, FILE* stream) {
  FILE* f = std::freopen(path, mode, stream);
  if (path == nullptr || fopen_writes(mode)) {
    record_effect("freopen", path);
  } else {
    record_path(observed_call::open, f != nullptr, path);
  }
  return f;
}

int open_(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = creation_mode(flags, ap);
  va_end(ap);
  // O_CREAT alone on a file that exists creates nothing: NVRTC 13.3+ opens its bundled headers'
  // .nvrtc_install.lock so, to flock it (traced: no write). Observed as an open, not an effect.
  const bool lock_style = (flags & (O_CREAT | O_TRUNC | O_APPEND | O_EXCL)) == O_CREAT &&
                          (flags & O_TMPFILE) != O_TMPFILE && path != nullptr &&
                          ::access(path, F_OK) == 0;
  const int fd = ::open(path, flags, mode);
  if (open_writes(flags) && !lock_style) {
    if (fd >= 0) record_effect("open", path);
  } else if ((flags & O_DIRECTORY) != 0) {
    record_path(observed_call::opendir, fd >= 0, path);
  } else {
    record_path(observed_call::open, fd >= 0, path);
  }
  return fd;
}

int openat_(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = creation_mode(flags, ap);
  va_end(ap);
  const int fd = ::openat(dirfd, path, flags, mode);
  const bool from_descriptor = dirfd != AT_FDCWD && path != nullptr && path[0] != '/';
  if (open_writes(flags) || from_descriptor) {
    // Relative to a descriptor: not a path a key can name (and named as given).
    record_effect("openat", path, !from_descriptor);
  } else {
    record_path(observed_call::open, fd >= 0, path);
  }
  return fd;
}

int open_2_(const char* path, int flags) {
  return open_(path, flags);
}

int creat_(const char* path, mode_t mode) {
  const int fd = ::creat(path, mode);
  if (fd >= 0) record_effect("creat", path);
  return fd;
}

int stat_(const char* path, struct stat* buf) {
  return path_probe(observed_call::stat, path, ::stat(path, buf));
}

int lstat_(const char* path, struct stat* buf) {
  return path_probe(observed_call::lstat, path, ::lstat(path, buf));
}

// glibc before 2.33 exported stat and lstat as these (the compilers are built against such a
// glibc); the version argument selects struct stat's layout, which is this process's.
int xstat_(int, const char* path, struct stat* buf) {
  return stat_(path, buf);
}
int lxstat_(int, const char* path, struct stat* buf) {
  return lstat_(path, buf);
}

int fstatat_(int dirfd, const char* path, struct stat* buf, int flags) {
  const int r = ::fstatat(dirfd, path, buf, flags);
  if (dirfd != AT_FDCWD && path != nullptr && path[0] != '/' && path[0] != '\0') {
    record_effect("fstatat", path, false);  // relative to a descriptor: named as given
  } else if (path != nullptr && path[0] != '\0') {
    record_path((flags & AT_SYMLINK_NOFOLLOW) != 0 ? observed_call::lstat : observed_call::stat,
                r == 0, path);
  }
  return r;
}
int fxstatat_(int, int dirfd, const char* path, struct stat* buf, int flags) {
  return fstatat_(dirfd, path, buf, flags);
}

int access_(const char* path, int mode) {
  return path_probe(observed_call::stat, path, ::access(path, mode));
}

int statfs_(const char* path, struct statfs* buf) {
  return path_probe(observed_call::stat, path, ::statfs(path, buf));
}

DIR* opendir_(const char* path) {
  DIR* d = ::opendir(path);
  record_path(observed_call::opendir, d != nullptr, path);
  return d;
}

ssize_t readlink_(const char* path, char* buf, size_t size) {
  const ssize_t r = ::readlink(path, buf, size);
  record_path(observed_call::lstat, r >= 0, path);
  return r;
}

char* realpath_(const char* path, char* resolved) {
  char* r = ::realpath(path, resolved);
  record_path(observed_call::stat, r != nullptr, path);
  return r;
}

char* getenv_(const char* name) {
  char* value = std::getenv(name);
  record_name(observed_call::getenv, value != nullptr, name);
  return value;
}

char* secure_getenv_(const char* name) {
  char* value = ::secure_getenv(name);
  record_name(observed_call::getenv, value != nullptr, name);
  return value;
}

char* getcwd_(char* buf, size_t size) {
  char* r = ::getcwd(buf, size);
  record(observed_call::getcwd, r != nullptr, {});
  return r;
}

// NVRTC calls ctime() in every compile and expands __DATE__ and __TIME__ from its text.
char* ctime_(const time_t* t) {
  char* r = ::ctime(t);
  record_name(observed_call::clock, r != nullptr, r);
  return r;
}
char* ctime_r_(const time_t* t, char* buf) {
  char* r = ::ctime_r(t, buf);
  record_name(observed_call::clock, r != nullptr, r);
  return r;
}

int chdir_(const char* path) {
  return file_system_change("chdir", path, ::chdir(path));
}
int mkdir_(const char* path, mode_t mode) {
  return file_system_change("mkdir", path, ::mkdir(path, mode));
}
int unlink_(const char* path) {
  return file_system_change("unlink", path, ::unlink(path));
}
int remove_(const char* path) {
  return file_system_change("remove", path, std::remove(path));
}
int rmdir_(const char* path) {
  return file_system_change("rmdir", path, ::rmdir(path));
}
int rename_(const char* from, const char* to) {
  return file_system_change("rename", from, std::rename(from, to));
}
int mkstemp_(char* templ) {
  const int fd = ::mkstemp(templ);
  record_effect("mkstemp", templ);  // the name it made
  return fd;
}
int execv_(const char* path, char* const argv[]) {
  record_effect("execv", path);
  return ::execv(path, argv);
}
int execve_(const char* path, char* const argv[], char* const envp[]) {
  record_effect("execve", path);
  return ::execve(path, argv, envp);
}
int execvp_(const char* file, char* const argv[]) {
  record_effect("execvp", file, false);
  return ::execvp(file, argv);
}
int system_(const char* command) {
  record_effect("system", command, false);
  return std::system(command);
}
pid_t fork_() {
  record_effect("fork", nullptr);
  return ::fork();
}
FILE* popen_(const char* command, const char* type) {
  record_effect("popen", command, false);
  return ::popen(command, type);
}
int connect_(int fd, const struct sockaddr* addr, socklen_t len) {
  record_effect("connect", nullptr);
  return ::connect(fd, addr, len);
}

}  // extern "C"

}  // namespace observed

namespace {

// The functions patched, by the name a compiler imports them under. Variants that no compiler
// imports today (checked: NVRTC, nvJitLink and libNVVM 12.9, 13.0 and 13.5) are listed too, so
// that a release that moves to them is still observed.
const std::vector<got_replacement>& replacements() {
  using namespace observed;
  static const std::vector<got_replacement> table = {
      {"fopen", reinterpret_cast<void*>(&fopen_)},
      {"fopen64", reinterpret_cast<void*>(&fopen_)},
      {"freopen", reinterpret_cast<void*>(&freopen_)},
      {"freopen64", reinterpret_cast<void*>(&freopen_)},
      {"open", reinterpret_cast<void*>(&open_)},
      {"open64", reinterpret_cast<void*>(&open_)},
      {"__open_2", reinterpret_cast<void*>(&open_2_)},
      {"__open64_2", reinterpret_cast<void*>(&open_2_)},
      {"openat", reinterpret_cast<void*>(&openat_)},
      {"openat64", reinterpret_cast<void*>(&openat_)},
      {"creat", reinterpret_cast<void*>(&creat_)},
      {"creat64", reinterpret_cast<void*>(&creat_)},
      {"stat", reinterpret_cast<void*>(&stat_)},
      {"stat64", reinterpret_cast<void*>(&stat_)},
      {"lstat", reinterpret_cast<void*>(&lstat_)},
      {"lstat64", reinterpret_cast<void*>(&lstat_)},
      {"__xstat", reinterpret_cast<void*>(&xstat_)},
      {"__xstat64", reinterpret_cast<void*>(&xstat_)},
      {"__lxstat", reinterpret_cast<void*>(&lxstat_)},
      {"__lxstat64", reinterpret_cast<void*>(&lxstat_)},
      {"fstatat", reinterpret_cast<void*>(&fstatat_)},
      {"fstatat64", reinterpret_cast<void*>(&fstatat_)},
      {"__fxstatat", reinterpret_cast<void*>(&fxstatat_)},
      {"__fxstatat64", reinterpret_cast<void*>(&fxstatat_)},
      {"access", reinterpret_cast<void*>(&access_)},
      {"euidaccess", reinterpret_cast<void*>(&access_)},
      {"eaccess", reinterpret_cast<void*>(&access_)},
      {"statfs", reinterpret_cast<void*>(&statfs_)},
      {"statfs64", reinterpret_cast<void*>(&statfs_)},
      {"opendir", reinterpret_cast<void*>(&opendir_)},
      {"readlink", reinterpret_cast<void*>(&readlink_)},
      {"realpath", reinterpret_cast<void*>(&realpath_)},
      {"getenv", reinterpret_cast<void*>(&getenv_)},
      {"secure_getenv", reinterpret_cast<void*>(&secure_getenv_)},
      {"__secure_getenv", reinterpret_cast<void*>(&secure_getenv_)},
      {"getcwd", reinterpret_cast<void*>(&getcwd_)},
      {"ctime", reinterpret_cast<void*>(&ctime_)},
      {"ctime_r", reinterpret_cast<void*>(&ctime_r_)},
      {"chdir", reinterpret_cast<void*>(&chdir_)},
      {"mkdir", reinterpret_cast<void*>(&mkdir_)},
      {"unlink", reinterpret_cast<void*>(&unlink_)},
      {"remove", reinterpret_cast<void*>(&remove_)},
      {"rmdir", reinterpret_cast<void*>(&rmdir_)},
      {"rename", reinterpret_cast<void*>(&rename_)},
      {"mkstemp", reinterpret_cast<void*>(&mkstemp_)},
      {"mkstemp64", reinterpret_cast<void*>(&mkstemp_)},
      {"execv", reinterpret_cast<void*>(&execv_)},
      {"execve", reinterpret_cast<void*>(&execve_)},
      {"execvp", reinterpret_cast<void*>(&execvp_)},
      {"system", reinterpret_cast<void*>(&system_)},
      {"fork", reinterpret_cast<void*>(&fork_)},
      {"popen", reinterpret_cast<void*>(&popen_)},
      {"connect", reinterpret_cast<void*>(&connect_)},
  };
  return table;
}

}  // namespace

void observe_compiler_library(void* handle, std::string_view what) {
  static std::mutex patching;
  std::lock_guard lock(patching);
  std::string error;
  // The observation's functions, and those a replayed compile moves (compile_replay.hpp).
  static const std::vector<got_replacement> all = [] {
    std::vector<got_replacement> v = replacements();
    const auto& replay = replay_replacements();
    v.insert(v.end(), replay.begin(), replay.end());
    return v;
  }();
  if (!patch_imports(handle, all, error)) {
    std::lock_guard registry(registry_mutex());
    std::string& reason = unobserved_reason();
    if (reason.empty()) reason = std::string(what) + "'s imports could not be patched: " + error;
  }
}

void add_compiler_scratch_root(const std::string& directory) {
  std::lock_guard lock(registry_mutex());
  scratch_roots().push_back(directory);
}

compiler_observation::compiler_observation() : state_(new state) {
  std::lock_guard lock(registry_mutex());
  state_->outer = innermost;
  innermost = state_;
  open_observations().push_back(state_);
  open_count.fetch_add(1, std::memory_order_release);
}

compiler_observation::~compiler_observation() {
  finish();
  delete state_;
}

observed_inputs compiler_observation::finish() {
  observed_inputs out;
  {
    std::lock_guard lock(registry_mutex());
    if (state_->finished) return out;
    state_->finished = true;
    auto& open = open_observations();
    open.erase(std::remove(open.begin(), open.end(), state_), open.end());
    open_count.fetch_sub(1, std::memory_order_release);
    // Observations end in the reverse order of their start on a thread (they are scoped).
    if (innermost == state_) innermost = state_->outer;
    out.unobserved = unobserved_reason();
    out.inputs = std::move(state_->seen);
  }
  std::sort(out.inputs.begin(), out.inputs.end());
  out.inputs.erase(std::unique(out.inputs.begin(), out.inputs.end()), out.inputs.end());
  drop_scratch_files(out.inputs);
  return out;
}

void compiler_observation::add_to_current(const observed_inputs& seen) {
  std::lock_guard lock(registry_mutex());
  for (auto* s = innermost; s != nullptr; s = s->outer) {
    s->seen.insert(s->seen.end(), seen.inputs.begin(), seen.inputs.end());
    if (!seen.unobserved.empty()) {
      s->seen.push_back({observed_call::side_effect, true, "unobserved " + seen.unobserved});
    }
  }
}

std::string absolute_path(std::string_view path, std::string_view cwd) {
  std::string p;
  if (path.empty() || path.front() != '/') (p = cwd) += '/';
  p += path;
  std::string out;
  out.reserve(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '/' && !out.empty() && out.back() == '/') continue;
    if (p[i] == '.' && !out.empty() && out.back() == '/' &&
        (i + 1 == p.size() || p[i + 1] == '/')) {
      ++i;
      continue;
    }
    out += p[i];
  }
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

const observed_inputs& unobserved_compile() {
  static const observed_inputs none{"the compile ran outside an observation", {}};
  return none;
}

namespace {

// Whether the file system of device `dev` (holding `path`) is a pseudo one, asked once per device
// within one check.
class pseudo_file_systems {
 public:
  bool holds(dev_t dev, const std::string& path) {
    for (const auto& [d, pseudo] : known_) {
      if (d == dev) return pseudo;
    }
    struct statfs fs {};
    const bool pseudo = ::statfs(path.c_str(), &fs) != 0 || is_pseudo(static_cast<long>(fs.f_type));
    known_.emplace_back(dev, pseudo);
    return pseudo;
  }

 private:
  static bool is_pseudo(long type) {
    constexpr long kProc = 0x9fa0;
    constexpr long kSysfs = 0x62656572;
    constexpr long kDevpts = 0x1cd1;
    constexpr long kDebugfs = 0x64626720;
    constexpr long kTracefs = 0x74726163;
    constexpr long kCgroup2 = 0x63677270;
    constexpr long kCgroup = 0x27e0eb;
    return type == kProc || type == kSysfs || type == kDevpts || type == kDebugfs ||
           type == kTracefs || type == kCgroup2 || type == kCgroup;
  }
  std::vector<std::pair<dev_t, bool>> known_;
};

bool process_view_path(const std::string& path, pseudo_file_systems& file_systems) {
  for (const std::string_view root : {"/proc", "/sys", "/dev"}) {
    if (path.size() >= root.size() && path.compare(0, root.size(), root) == 0 &&
        (path.size() == root.size() || path[root.size()] == '/')) {
      return true;
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;               // absent: what a probe found
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return true;  // FIFO, device, socket
  return file_systems.holds(st.st_dev, path);  // procfs, sysfs, ... mounted elsewhere
}

}  // namespace

bool is_process_view_path(const std::string& path) {
  pseudo_file_systems file_systems;
  return process_view_path(path, file_systems);
}

const observed_input* first_process_view_input(const observed_inputs& seen) {
  pseudo_file_systems file_systems;
  const auto is_process_view_path = [&](const std::string& path) {
    return process_view_path(path, file_systems);
  };
  // Found or not: whether /dev/stdin or /proc/self/fd/0 opens is this process's answer too
  // (measured: with stdin closed, NVRTC's __has_include("/dev/stdin") is false).
  for (const auto& in : seen.inputs) {
    if (in.call == observed_call::side_effect) return &in;
    if (in.call != observed_call::getenv && in.call != observed_call::getcwd &&
        in.call != observed_call::clock && is_process_view_path(in.name)) {
      return &in;
    }
  }
  return nullptr;
}

std::string clock_in_output(const observed_inputs& seen, std::string_view output) {
  for (const auto& in : seen.inputs) {
    // ctime's text: "Www Mmm dd hh:mm:ss yyyy\n", the day padded with a blank.
    if (in.call != observed_call::clock || in.name.size() < 24) continue;
    const std::string date = in.name.substr(4, 7) + in.name.substr(20, 4);
    const std::string time = in.name.substr(11, 8);
    for (const auto& text : {date, time}) {
      if (output.find(text) != std::string_view::npos) return text;
      // PTX writes an initialised byte array as decimals: {49, 48, 58, ...}.
      std::string decimals;
      for (const char c : text) {
        decimals += (decimals.empty() ? "" : ", ") + std::to_string(static_cast<unsigned char>(c));
      }
      if (output.find(decimals) != std::string_view::npos) return text;
    }
  }
  return {};
}

}  // namespace cucore::detail
