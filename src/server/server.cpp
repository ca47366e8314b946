// The compile server: its private directory, the listening process and its worker processes.
#include "cucore/server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "common/descriptors.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "key/compiler_environment.hpp"
#include "loader/libraries.hpp"
#include "loader/shared_library.hpp"
#include "program/auto_pch.hpp"
#include "program/compiler_handles.hpp"
#include "server/internal.hpp"

extern char** environ;

namespace cucore {
namespace server {
namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

std::optional<std::uint64_t> env_number(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || *end != '\0' || v[0] == '-') {
    throw invalid_argument(std::string(name) + "=\"" + v + "\" is not a whole number");
  }
  return n;
}

sockaddr_un socket_address(const fs::path& dir) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = socket_path(dir).string();
  if (path.size() >= sizeof addr.sun_path) {
    throw error("the compile server's socket path \"" + path + "\" is too long for a socket");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// The directory must be ours and private; anything else could let another user read requests or
// answer them.
std::string check_private(const fs::path& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return errno_text("cannot stat \"" + dir.string() + "\"");
  if (!S_ISDIR(st.st_mode)) return "\"" + dir.string() + "\" is not a directory";
  if (st.st_uid != ::geteuid()) {
    return "\"" + dir.string() + "\" belongs to uid " + std::to_string(st.st_uid) + ", not " +
           std::to_string(::geteuid());
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return "\"" + dir.string() + "\" has mode " + mode + ": others can reach it (it must be 0700)";
  }
  return {};
}

std::uint64_t proc_status_bytes(int pid, std::string_view field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, field.size(), field) == 0 && line.size() > field.size() &&
        line[field.size()] == ':') {
      return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10) * 1024;
    }
  }
  return 0;
}

// The state letter of /proc/PID/stat ('R', 'S', 'T' stopped, 'Z', ...), '?' if unreadable.
char process_state(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const auto close = line.rfind(')');  // the name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

std::string mount_namespace(int pid) {
  const std::string link =
      pid == 0 ? "/proc/self/ns/mnt" : "/proc/" + std::to_string(pid) + "/ns/mnt";
  char buf[128];
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += c;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The server process.

using compiler_variables = std::vector<std::pair<std::string, std::optional<std::string>>>;

constexpr const char* kComputeCacheVariable = "CUDA_CACHE_DISABLE";
// Set by the server when it turned the compute cache off for a worker (its clients did not).
constexpr const char* kComputeCacheOffMarker = "CUCORE_SERVER_WORKER_COMPUTE_CACHE_OFF";

// Every variable of the compilers' table (key/compiler_environment.hpp), set or not, as this
// process has them (a worker's CUDA_CACHE_DISABLE as its clients have it: see spawn).
compiler_variables current_compiler_variables() {
  const char* marker = std::getenv(kComputeCacheOffMarker);
  const bool server_set = marker != nullptr && std::string_view(marker) == "1";
  compiler_variables out;
  for (const auto& var : detail::compiler_environment()) {
    const std::string name(var.name);
    const char* value = std::getenv(name.c_str());
    if (server_set && name == kComputeCacheVariable) value = nullptr;
    out.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
  }
  return out;
}

// What tells worker pools apart: the NVRTC file and the compilers' variables.
std::string pool_identity(const std::string& library, const compiler_variables& environment) {
  std::string id = library;
  for (const auto& [name, value] : environment) {
    ((id += '\0') += name) += value ? "=" + *value : std::string("\x01");
  }
  return id;
}

struct worker_slot {
  // Held for one request at a time: the queue is the threads waiting here. (Not a
  // std::timed_mutex: ThreadSanitizer does not see pthread_mutex_clocklock, its timed lock.)
  class slot_lock {
   public:
    // Takes it, or returns false after `wait`.
    bool try_lock_for(std::chrono::milliseconds wait) {
      std::unique_lock lock(mutex_);
      if (!cv_.wait_for(lock, wait, [&] { return !held_; })) return false;
      held_ = true;
      return true;
    }
    void lock() {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return !held_; });
      held_ = true;
    }
    void unlock() {
      {
        const std::lock_guard lock(mutex_);
        held_ = false;
      }
      cv_.notify_one();
    }

   private:
    std::mutex mutex_;
    std::condition_variable cv_;
    bool held_ = false;
  } use;
  std::string library;  // the NVRTC file this slot's process loads (--nvrtc)
  // The variables of the compilers' table its process starts with: NVRTC and libNVVM read some of
  // them once per process (LLVM_OVERRIDE_PRODUCER, measured), so a worker serves only clients
  // with the same values; set per request they would be too late.
  compiler_variables environment;
  std::string pool;  // library and environment: which clients it serves
  std::atomic<int> pid{-1};
  unique_fd fd;
  std::atomic<int> load{0};  // requests routed here, waiting or running
  std::atomic<bool> busy{false};
  std::atomic<bool> making_image{false};  // a prefix's image, after the compile that asked
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> resident{0}, peak{0};
  std::atomic<std::size_t> restarts{0};
};

class compile_server {
 public:
  explicit compile_server(compile_server_settings settings) : settings_(std::move(settings)) {
    if (settings_.workers == 0) {
      settings_.workers = std::max(1u, std::thread::hardware_concurrency());
    }
    own_namespace_ = mount_namespace(0);
    touch();
  }

  // Returns 3 when another server holds the lock.
  int run(int ready_fd);

 private:
  void touch() { last_activity_ = clock::now().time_since_epoch().count(); }
  bool acquire_lock();
  void spawn(worker_slot& w);
  void retire(worker_slot& w, bool kill);
  void serve(unique_fd conn);
  void compile(int conn, const frame& request);
  // Sends `type` with `payload` to `w` (its lock held) and waits for the answer; heartbeats go to
  // `conn` meanwhile (-1: nobody waits). Throws when the worker dies, stops or answers nothing.
  frame run_on_worker(worker_slot& w, frame_type type, std::string_view payload, int conn,
                      bool& client_gone);
  bool claim_image(worker_slot& w, const std::string& route);
  void make_image_after(worker_slot& w, const std::string& route, frame_type type,
                        const std::string& payload);
  std::vector<worker_slot*> pool_of(const std::string& library,
                                    const compiler_variables& environment);
  std::vector<worker_slot*> all_workers();
  std::string status_json();
  void shutdown_workers();

  compile_server_settings settings_;
  unique_fd lock_fd_, listen_fd_;
  std::mutex routes_mutex_;  // guards workers_' list (not the slots) and routes_
  // Each NVRTC library the clients load, with each set of values of the compilers' variables, gets
  // its own pool of settings_.workers slots (a worker compiles with the very file its client
  // loaded, started with its client's variables), at most kMaxPools of them; a slot's process
  // starts at its first request (the pool of the server's own library and variables at start).
  static constexpr std::size_t kMaxPools = 4;
  std::vector<std::unique_ptr<worker_slot>> workers_;
  // Pool and prefix identity → the workers that hold its image, or are making it (not ready).
  struct route_entry {
    worker_slot* worker = nullptr;
    bool ready = false;
  };
  std::unordered_map<std::string, std::vector<route_entry>> routes_;
  std::atomic<std::size_t> queued_{0}, active_{0};
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<clock::rep> last_activity_{0};
  std::atomic<bool> stop_{false};
  std::string own_namespace_;
  clock::time_point started_ = clock::now();
};

// Our lock, on the file that is still at the path (a server exiting unlinks it while holding it:
// a starter that opened the old file retries on the new one).
bool compile_server::acquire_lock() {
  const fs::path path = lock_path(settings_.directory);
  for (int attempt = 0; attempt < 100; ++attempt) {
    unique_fd fd(detail::off_standard_streams(
        ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)));
    if (!fd && errno == ENOENT) {  // a server exiting at that moment removed the directory
      prepare_compile_server_directory(settings_.directory);
      continue;
    }
    if (!fd)
      throw error(errno_text("cannot open the compile server's lock \"" + path.string() + "\""));
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) return false;
      throw error(errno_text("flock \"" + path.string() + "\""));
    }
    struct stat held {
    }, now{};
    if (::fstat(fd.get(), &held) == 0 && ::stat(path.c_str(), &now) == 0 &&
        held.st_ino == now.st_ino && held.st_dev == now.st_dev) {
      lock_fd_ = std::move(fd);
      return true;
    }
  }
  throw error("the compile server's lock file \"" + path.string() + "\" keeps changing");
}

void compile_server::spawn(worker_slot& w) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    throw error(errno_text("socketpair"));
  }
  unique_fd ours(pair[0]), theirs(pair[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, theirs.get(), 3);  // dup2 clears close-on-exec
  const std::string exe = settings_.executable.string();
  std::vector<std::string> args = {exe, "server", "worker", "--fd", "3", "--nvrtc", w.library};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The server's environment, but for the compilers' variables: the pool's.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string name(entry.substr(0, entry.find('=')));
    if (detail::find_compiler_variable(name) == nullptr) env.emplace_back(entry);
  }
  for (const auto& [name, value] : w.environment) {
    if (value) env.push_back(name + "=" + *value);
  }
  // NVRTC keeps ptxas's results in the driver's compute cache (~/.nv/ComputeCache, with a driver
  // installed) and a compile answered from it logs none of ptxas's warnings; a process sees the
  // entries that existed when it first used it (measured on the GPU machine). A long-lived worker
  // would see entries its client's process would not: workers do not use it (unless the client
  // set CUDA_CACHE_DISABLE itself), so a log has ptxas's warnings as a process compiling that PTX
  // for the first time has them.
  const bool client_chose =
      std::any_of(w.environment.begin(), w.environment.end(),
                  [](const auto& v) { return v.first == kComputeCacheVariable && v.second; });
  if (!client_chose) {
    env.push_back(std::string(kComputeCacheVariable) + "=1");
    env.push_back(std::string(kComputeCacheOffMarker) + "=1");
  }
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    errno = rc;
    throw error(errno_text("cannot start a compile server worker \"" + exe + "\""));
  }
  w.pid = pid;
  w.fd = std::move(ours);
  w.resident = 0;
  w.peak = 0;
}

// Ends a worker: its socket closed, it exits at end of file (its automatic PCH files go with it);
// `kill` for one that may be stuck.
void compile_server::retire(worker_slot& w, bool kill) {
  if (w.pid < 0) return;
  w.fd.reset();
  if (kill) ::kill(w.pid, SIGKILL);
  for (int i = 0;; ++i) {
    const pid_t r = ::waitpid(w.pid, nullptr, WNOHANG);
    if (r == w.pid || (r < 0 && errno == ECHILD)) break;
    if (i == 200) ::kill(w.pid, SIGKILL);  // 10 s to finish a compile and exit
    std::this_thread::sleep_for(50ms);
  }
  w.pid = -1;
  {
    const std::lock_guard lock(routes_mutex_);
    for (auto it = routes_.begin(); it != routes_.end();) {
      std::erase_if(it->second, [&](const route_entry& e) { return e.worker == &w; });
      it = it->second.empty() ? routes_.erase(it) : std::next(it);
    }
  }
  ++w.restarts;
}

void compile_server::serve(unique_fd conn) {
  ucred cred{};
  socklen_t len = sizeof cred;
  const bool ours = ::getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
                    cred.uid == ::geteuid();
  if (!ours) {
    cucore::log(log_level::warning, "compile server: refused a connection from uid " +
                                        std::to_string(cred.uid) + " (serves uid " +
                                        std::to_string(::geteuid()) + " only)");
    try {
      // Its request is read (bounded) and dropped, so that the refusal is what it reads.
      read_frame(conn.get(), 1s);
    } catch (const std::exception&) {
    }
    try {
      write_frame(conn.get(), frame_type::refusal, "this compile server serves another user", 1s);
    } catch (const std::exception&) {
    }
    return;
  }
  try {
    std::optional<frame> f = read_frame(conn.get(), 5s);
    if (!f) return;
    switch (f->type) {
      case frame_type::status_request:
        write_frame(conn.get(), frame_type::status_reply, status_json(), 5s);
        return;
      case frame_type::stop_request:
        stop_ = true;
        write_frame(conn.get(), frame_type::stopping, {}, 5s);
        return;
      case frame_type::compile_request:
      case frame_type::raw_compile_request:
        // The worker sees the server's files: a client in another mount namespace compiles itself.
        if (cred.pid <= 0 || mount_namespace(cred.pid) != own_namespace_ ||
            own_namespace_.empty()) {
          write_frame(conn.get(), frame_type::refusal,
                      "the client is in another mount namespace than the server", 5s);
          return;
        }
        compile(conn.get(), *f);
        return;
      default:
        write_frame(conn.get(), frame_type::refusal, "unexpected frame", 1s);
        return;
    }
  } catch (const std::exception& e) {
    // A malformed or abandoned request ends its connection, nothing else.
    cucore::log(log_level::debug, std::string("compile server: connection dropped: ") + e.what());
  }
}

std::vector<worker_slot*> compile_server::all_workers() {
  const std::lock_guard lock(routes_mutex_);
  std::vector<worker_slot*> out;
  for (auto& w : workers_) out.push_back(w.get());
  return out;
}

// The library's pool, made at its first request; empty when the server serves kMaxLibraries
// others already. Called with routes_mutex_ held.
std::vector<worker_slot*> compile_server::pool_of(const std::string& library,
                                                  const compiler_variables& environment) {
  const std::string id = pool_identity(library, environment);
  std::vector<worker_slot*> pool;
  std::size_t pools = 0;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    if (i == 0 || workers_[i]->pool != workers_[i - 1]->pool) ++pools;
    if (workers_[i]->pool == id) pool.push_back(workers_[i].get());
  }
  if (pool.empty() && pools < kMaxPools) {
    for (std::size_t i = 0; i < settings_.workers; ++i) {
      auto w = std::make_unique<worker_slot>();
      w->library = library;
      w->environment = environment;
      w->pool = id;
      pool.push_back(w.get());
      workers_.push_back(std::move(w));
    }
  }
  return pool;
}

frame compile_server::run_on_worker(worker_slot& w, frame_type type, std::string_view payload,
                                    int conn, bool& client_gone) {
  if (w.pid < 0) spawn(w);
  write_frame(w.fd.get(), type, payload, 30s);
  for (;;) {
    pollfd p{w.fd.get(), POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(kHeartbeat.count()));
    if (r < 0 && errno != EINTR) throw error(errno_text("poll"));
    if (r > 0) {
      std::optional<frame> answer = read_frame(w.fd.get(), 30s);
      if (!answer) throw wire_error("the worker exited");
      return std::move(*answer);
    }
    // A stopped worker (SIGSTOP, a debugger) is a hung one: heartbeats would hide it.
    if (process_state(w.pid) == 'T') throw error("the worker is stopped");
    if (!client_gone && conn >= 0) {
      try {
        write_frame(conn, frame_type::heartbeat, {}, 1s);
      } catch (const std::exception&) {
        client_gone = true;  // the compile finishes anyway: the worker is in the middle of it
      }
    }
  }
}

void compile_server::compile(int conn, const frame& request) {
  const bool raw = request.type == frame_type::raw_compile_request;
  compile_request decoded;
  try {
    decoded = decode_request(request.payload);
  } catch (const wire_error& e) {
    write_frame(conn, frame_type::refusal, std::string("malformed request: ") + e.what(), 5s);
    return;
  }
  const std::string prefix = prefix_identity(decoded);
  const std::string route =
      prefix.empty()
          ? prefix
          : pool_identity(decoded.view.nvrtc_path, decoded.view.environment) + '\0' + prefix;
  worker_slot* chosen = nullptr;
  bool new_prefix = false;
  {
    const std::lock_guard lock(routes_mutex_);
    const std::vector<worker_slot*> pool =
        pool_of(decoded.view.nvrtc_path, decoded.view.environment);
    if (pool.empty()) {
      write_frame(conn, frame_type::refusal,
                  "the server's workers serve " + std::to_string(kMaxPools) +
                      " other NVRTC libraries or compiler environments already",
                  5s);
      return;
    }
    // The least loaded; a worker making an image counts as two requests more (it takes ~4x a
    // plain compile).
    const auto weight = [](const worker_slot* w) { return w->load + (w->making_image ? 2 : 0); };
    chosen = pool.front();
    for (worker_slot* w : pool) {
      if (weight(w) < weight(chosen)) chosen = w;
    }
    // The least loaded worker holding the prefix's image, unless more than two requests wait there
    // beyond the least loaded one: a compile from an image takes ~0.2x, so a short queue there is
    // quicker than a compile from the headers elsewhere, a long one is not. A compile of the
    // prefix on a worker without its image is plain, and that worker may make one afterwards
    // (make_image_after): a popular prefix's image spreads to the workers it keeps busy.
    const auto it = route.empty() ? routes_.end() : routes_.find(route);
    worker_slot* holder = nullptr;
    if (it != routes_.end()) {
      for (const route_entry& e : it->second) {
        if (e.ready && (holder == nullptr || weight(e.worker) < weight(holder))) holder = e.worker;
      }
    }
    if (holder != nullptr && weight(holder) <= weight(chosen) + 2) chosen = holder;
    new_prefix =
        !route.empty() && (it == routes_.end() ||
                           std::none_of(it->second.begin(), it->second.end(),
                                        [&](const route_entry& e) { return e.worker == chosen; }));
    ++chosen->load;
  }
  worker_slot& w = *chosen;
  ++requests_;
  ++queued_;
  std::unique_lock use(w.use, std::defer_lock);
  // A queued request's client hears from the server as a running one's does.
  bool client_gone = false;
  while (!use.try_lock_for(kHeartbeat)) {
    if (client_gone) continue;
    try {
      write_frame(conn, frame_type::heartbeat, {}, 1s);
    } catch (const std::exception&) {
      client_gone = true;
    }
  }
  --queued_;
  ++active_;
  w.busy = true;
  struct done_guard {
    compile_server& s;
    worker_slot& w;
    ~done_guard() {
      w.busy = false;
      --w.load;
      --s.active_;
      s.touch();
    }
  } done{*this, w};
  if (client_gone) return;  // nobody waits for it any more: not compiled

  std::string refusal;
  std::optional<frame> answer;
  try {
    answer = run_on_worker(w, raw ? frame_type::raw_compile_request : frame_type::compile_request,
                           request.payload, conn, client_gone);
  } catch (const std::exception& e) {
    refusal = std::string("the worker failed: ") + e.what();
    retire(w, true);
  }
  if (w.pid > 0) ++w.requests;
  const frame_type reply_type = raw ? frame_type::raw_compile_reply : frame_type::compile_reply;
  // Only a prefix the worker could make an image of (its plain compile succeeded and says
  // first_seen: a prefix, keyed, no image yet; not a caller's auto_pch=false, a prefix without
  // headers, one whose compile logs diagnostics). Claimed before the reply is sent, so that the
  // client's next status shows it being made.
  const bool make_image =
      new_prefix && answer && answer->type == reply_type && w.pid > 0 &&
      reply_succeeded(answer->type, answer->payload) &&
      auto_pch_of_reply(answer->type, answer->payload) == auto_pch_status::first_seen &&
      claim_image(w, route);
  try {
    if (client_gone) {
    } else if (!refusal.empty()) {
      write_frame(conn, frame_type::refusal, refusal, 5s);
    } else if (answer->type == reply_type || answer->type == frame_type::refusal) {
      write_frame(conn, answer->type, answer->payload, 30s);
    } else {
      write_frame(conn, frame_type::refusal, "the worker answered out of turn", 5s);
    }
  } catch (const std::exception& e) {
    cucore::log(log_level::debug, std::string("compile server: reply lost: ") + e.what());
  }
  // Read after the reply (it costs a /proc read or two, nothing the client waits for). A worker
  // past its memory bound is replaced now, its lock still held: no request reaches the old
  // process meanwhile, and it makes no image.
  if (w.pid > 0) {
    w.resident = proc_status_bytes(w.pid, "VmRSS");
    w.peak = std::max<std::uint64_t>(w.peak, proc_status_bytes(w.pid, "VmHWM"));
  }
  if (w.pid > 0 && w.resident > settings_.worker_memory_limit) {
    cucore::log(log_level::info, "compile server: worker " + std::to_string(w.pid) + " holds " +
                                     std::to_string(w.resident >> 20) +
                                     " MiB, over its bound: replaced");
    if (make_image) {
      w.making_image = false;
      const std::lock_guard lock(routes_mutex_);
      if (const auto it = routes_.find(route); it != routes_.end()) {
        std::erase_if(it->second, [&](const route_entry& e) { return e.worker == &w; });
        if (it->second.empty()) routes_.erase(it);
      }
    }
    retire(w, false);
  } else if (make_image) {
    make_image_after(
        w, route,
        raw ? frame_type::raw_compile_request_make_image : frame_type::compile_request_make_image,
        request.payload);
  }
}

// Whether `w` is to make the prefix's image now: no request waits for a worker, `w` has none, and
// no worker is making one (16 workers making one image at once took 8x a plain compile each).
// Then `w`'s entry is added (not ready) and the worker marked as making it.
bool compile_server::claim_image(worker_slot& w, const std::string& route) {
  if (stop_ || queued_ > 0) return false;
  const std::lock_guard lock(routes_mutex_);
  auto& entries = routes_[route];
  for (const route_entry& e : entries) {
    if (e.worker == &w || !e.ready) return false;
  }
  entries.push_back(route_entry{&w, false});
  w.making_image = true;
  return true;
}

// A prefix's image is made by the worker that compiled its first request, after that compile was
// answered, and only when no request waits for a worker (claim_image): a burst of misses of one
// prefix compiles plain on every worker at once (the image would take ~4x a plain compile on its
// critical path), and the image is there for the misses after it. A prefix whose image is not
// made then (requests were waiting) is tried again at its next miss. Called with the worker's lock
// held, after claim_image.
void compile_server::make_image_after(worker_slot& w, const std::string& route, frame_type type,
                                      const std::string& payload) {
  bool made = false;
  try {
    bool nobody = true;
    const frame answer = run_on_worker(w, type, payload, -1, nobody);
    // Made: the worker says created, and the compile succeeded (a failed one leaves no image).
    made = auto_pch_of_reply(answer.type, answer.payload) == auto_pch_status::created &&
           reply_succeeded(answer.type, answer.payload);
  } catch (const std::exception& e) {
    cucore::log(log_level::debug,
                std::string("compile server: making a prefix's image failed: ") + e.what());
    retire(w, true);
  }
  w.making_image = false;
  if (w.pid > 0) {
    w.resident = proc_status_bytes(w.pid, "VmRSS");
    w.peak = std::max<std::uint64_t>(w.peak, proc_status_bytes(w.pid, "VmHWM"));
  }
  // Made: later misses of the prefix may go here. Not made: the prefix's next miss tries again.
  const std::lock_guard lock(routes_mutex_);
  if (const auto it = routes_.find(route); it != routes_.end()) {
    for (route_entry& e : it->second) {
      if (e.worker == &w) e.ready = made;
    }
    std::erase_if(it->second, [&](const route_entry& e) { return e.worker == &w && !e.ready; });
    if (it->second.empty()) routes_.erase(it);
  }
}

std::string compile_server::status_json() {
  const auto now = clock::now();
  const double idle_for =
      std::chrono::duration<double>(now.time_since_epoch() - clock::duration(last_activity_))
          .count();
  const double left = active_ > 0
                          ? static_cast<double>(settings_.idle.count())
                          : std::max(0.0, static_cast<double>(settings_.idle.count()) - idle_for);
  std::ostringstream o;
  o << "{\"pid\": " << ::getpid() << ", \"protocol\": " << kProtocolVersion << ", \"directory\": \""
    << json_escape(settings_.directory.string())
    << "\", \"uptime_seconds\": " << std::chrono::duration<double>(now - started_).count()
    << ", \"idle_seconds_left\": " << left << ", \"idle_seconds\": " << settings_.idle.count()
    << ", \"requests\": " << requests_.load() << ", \"queued\": " << queued_.load()
    << ", \"active\": " << active_.load()
    << ", \"worker_memory_limit_bytes\": " << settings_.worker_memory_limit << ", \"workers\": [";
  std::size_t prefixes_total = 0, making_total = 0;
  const std::vector<worker_slot*> workers = all_workers();
  for (std::size_t i = 0; i < workers.size(); ++i) {
    worker_slot& w = *workers[i];
    std::size_t prefixes = 0;
    {
      const std::lock_guard lock(routes_mutex_);
      for (const auto& [route, entries] : routes_) {
        for (const route_entry& e : entries) prefixes += e.worker == &w && e.ready ? 1 : 0;
      }
    }
    prefixes_total += prefixes;
    making_total += w.making_image ? 1 : 0;
    // The pid is read without the slot's lock: a status never waits for a compile (-1: the slot's
    // process starts at its first request).
    const int pid = w.pid.load();
    const std::uint64_t resident = pid > 0 ? proc_status_bytes(pid, "VmRSS") : 0;
    const std::uint64_t peak =
        std::max<std::uint64_t>(w.peak, pid > 0 ? proc_status_bytes(pid, "VmHWM") : 0);
    o << (i ? ", " : "") << "{\"pid\": " << pid << ", \"busy\": " << (w.busy ? "true" : "false")
      << ", \"making_image\": " << (w.making_image ? "true" : "false")
      << ", \"requests\": " << w.requests.load() << ", \"resident_bytes\": " << resident
      << ", \"peak_bytes\": " << peak << ", \"prefixes\": " << prefixes
      << ", \"restarts\": " << w.restarts.load() << ", \"nvrtc\": \"" << json_escape(w.library)
      << "\"}";
  }
  o << "], \"prefixes\": " << prefixes_total << ", \"images_being_made\": " << making_total << "}";
  return o.str();
}

void compile_server::shutdown_workers() {
  for (worker_slot* w : all_workers()) {
    const std::lock_guard use(w->use);
    retire(*w, false);
  }
}

std::atomic<int> g_signal_pipe{-1};
extern "C" void on_stop_signal(int) {
  const int fd = g_signal_pipe.load();
  if (fd >= 0) {
    const char c = 's';
    [[maybe_unused]] const ssize_t n = ::write(fd, &c, 1);
  }
}

int compile_server::run(int ready_fd) {
  struct ready_signal {  // tells the starter once, whatever happens
    int fd;
    void send(char c) {
      if (fd < 0) return;
      [[maybe_unused]] const ssize_t n = ::write(fd, &c, 1);
      ::close(fd);
      fd = -1;
    }
    ~ready_signal() { send('x'); }
  } ready{ready_fd};
  if (ready_fd >= 0) ::fcntl(ready_fd, F_SETFD, FD_CLOEXEC);

  prepare_compile_server_directory(settings_.directory);
  if (!acquire_lock()) {
    ready.send('b');
    return 3;
  }
  const fs::path sock = socket_path(settings_.directory);
  const fs::path lock = lock_path(settings_.directory);
  // Whatever ends the run below, the files go (while the lock is held: no other server's files).
  struct remove_files {
    fs::path sock, lock, dir;
    ~remove_files() {
      ::unlink(sock.c_str());
      ::unlink(lock.c_str());
      ::rmdir(dir.c_str());  // only when empty
    }
  } cleanup{sock, lock, settings_.directory};

  ::unlink(sock.c_str());  // a server killed before it could remove its socket
  listen_fd_.reset(detail::off_standard_streams(
      ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)));
  if (!listen_fd_) throw error(errno_text("socket"));
  const sockaddr_un addr = socket_address(settings_.directory);
  const mode_t old_mask = ::umask(077);
  const int bound = ::bind(listen_fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  ::umask(old_mask);
  if (bound != 0)
    throw error(errno_text("cannot bind the compile server's socket \"" + sock.string() + "\""));
  if (::listen(listen_fd_.get(), 128) != 0) throw error(errno_text("listen"));

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) throw error(errno_text("pipe"));
  unique_fd wake_read(pipe_fds[0]), wake_write(pipe_fds[1]);
  g_signal_pipe = wake_write.get();
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // The pool of the NVRTC the server's own search finds (the one a client with the same
  // environment loads) starts now, so that its first requests do not wait for workers to start.
  if (const auto own = detail::find_in_roots(detail::library_spec_of(toolkit::library::nvrtc))) {
    const auto id = detail::identify_file(*own);
    std::vector<worker_slot*> pool;
    {
      const std::lock_guard lock(routes_mutex_);
      pool = pool_of(id ? id->path : *own, current_compiler_variables());
    }
    for (worker_slot* w : pool) spawn(*w);
  }
  ready.send('r');
  cucore::log(log_level::info, "compile server " + std::to_string(::getpid()) + " listening on " +
                                   sock.string() + " with " + std::to_string(settings_.workers) +
                                   " workers per NVRTC library");

  struct connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<connection> connections;
  constexpr std::size_t kMaxConnections = 256;
  auto reap = [&](bool all) {
    for (auto it = connections.begin(); it != connections.end();) {
      if (all || *it->done) {
        it->thread.join();
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
  };
  while (!stop_) {
    pollfd p[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_read.get(), POLLIN, 0}};
    const int r = ::poll(p, 2, 200);
    if (r < 0 && errno != EINTR) throw error(errno_text("poll"));
    if (r > 0 && (p[1].revents & POLLIN)) break;  // SIGTERM or SIGINT
    if (r > 0 && (p[0].revents & POLLIN)) {
      unique_fd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (conn) {
        reap(false);
        if (connections.size() < kMaxConnections) {
          auto done = std::make_shared<std::atomic<bool>>(false);
          connections.push_back({std::thread([this, c = std::move(conn), done]() mutable {
                                   serve(std::move(c));
                                   *done = true;
                                 }),
                                 done});
        }  // else closed: the client compiles itself
      }
    }
    reap(false);
    const auto idle_for = clock::now().time_since_epoch() - clock::duration(last_activity_);
    if (connections.empty() && active_ == 0 && idle_for > settings_.idle) {
      cucore::log(log_level::info, "compile server: idle, exiting");
      break;
    }
  }
  stop_ = true;
  ::unlink(sock.c_str());  // no new client finds it while the last compiles finish
  listen_fd_.reset();
  reap(true);
  shutdown_workers();
  g_signal_pipe = -1;
  return 0;
}

}  // namespace

fs::path default_directory() {
  if (const char* d = std::getenv("CUCORE_SERVER_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x != nullptr && *x == '/') {
    return fs::path(x) / "cucore";
  }
  return fs::path("/tmp") / ("cucore-server-" + std::to_string(::geteuid()));
}

unique_fd connect_to_server(const fs::path& dir, std::string& why) {
  if (auto problem = check_private(dir); !problem.empty()) {
    why = problem;
    return {};
  }
  unique_fd fd(detail::off_standard_streams(
      ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)));
  if (!fd) {
    why = errno_text("socket");
    return {};
  }
  const sockaddr_un addr = socket_address(dir);
  // Non-blocking: a full backlog (EAGAIN) is no server for this compile, not a wait.
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    why = errno_text("connect to \"" + socket_path(dir).string() + "\"");
    return {};
  }
  return fd;
}

std::chrono::milliseconds client_silence_bound() {
  const auto ms = env_number("CUCORE_SERVER_TIMEOUT_MS");
  return std::chrono::milliseconds(ms.value_or(5000));
}

client_view current_view() {
  client_view v;
  const auto& api = detail::nvrtc("compiling CUDA C++ through the compile server");
  v.nvrtc_path = api.library->path();
  if (const auto id = detail::identify_file(v.nvrtc_path)) {
    v.nvrtc_path = id->path;
    v.nvrtc_device = id->device;
    v.nvrtc_inode = id->inode;
    v.nvrtc_size = id->size;
    v.nvrtc_mtime_ns = id->mtime_ns;
  }
  v.working_directory = detail::working_directory();
  v.environment = current_compiler_variables();
  return v;
}

// ---------------------------------------------------------------------------------------------
// A worker process.

namespace {

// The client's view: its directory and the compilers' variables, as they were there.
// The client's view: its directory. (Its compilers' variables are the worker's own, from its
// start: run_compile_server_worker refuses a request with others.)
void enter_client_view(const client_view& view) {
  if (::chdir(view.working_directory.c_str()) != 0) {
    throw error(
        errno_text("cannot enter the client's directory \"" + view.working_directory + "\""));
  }
}

compile_reply compile_in_worker(const compile_request& q) {
  enter_client_view(q.view);
  program_options options = q.options;
  options.compile_server = compile_server_mode::off;
  // The flags this worker would give NVRTC must be the client's (the toolkit found, every field
  // carried): else the client compiles itself.
  if (compiler_flags(options, source_type::cxx, q.target) != q.flags) {
    throw error("the worker's NVRTC flags for this program differ from the client's");
  }
  program prog(q.code, source_type::cxx, std::move(options));
  compile_reply a;
  try {
    const object_code out = prog.compile(q.target, q.name_expressions);
    a.compiled = true;
    a.target = out.type();
    a.code.assign(reinterpret_cast<const char*>(out.code().data()), out.size());
    a.name = out.name();
    for (const auto& [expr, lowered] : out.symbol_mapping()) {
      a.symbols.push_back(expr);
      a.symbols.push_back(lowered);
    }
    if (const auto& tile = out.tile_ir()) {
      a.tile_ir = std::string(reinterpret_cast<const char*>(tile->code().data()), tile->size());
    }
  } catch (const compile_error& e) {
    a.compiled = false;
    a.backend = e.backend();
    a.status = e.status();
  }
  a.log = prog.log();
  a.auto_pch = prog.last_auto_pch();
  a.pch = prog.last_pch_status();
  return a;
}

// What a plain compile's PCH getters answer in this worker's NVRTC (a compile that used an
// automatic PCH reports these: the client's compile had none), asked once of a tiny program.
struct plain_pch_answers {
  nvrtcResult status = NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED;
  nvrtcResult required_code = NVRTC_SUCCESS;
  std::size_t required = 0;
};

const plain_pch_answers& plain_pch(const detail::nvrtc_api& api) {
  static const plain_pch_answers answers = [&] {
    plain_pch_answers a;
    nvrtcProgram prog = nullptr;
    if (api.nvrtcCreateProgram(&prog, "__global__ void cucore_probe() {}\n", "probe.cu", 0, nullptr,
                               nullptr) != NVRTC_SUCCESS) {
      throw error("the worker's NVRTC cannot create a program");
    }
    detail::nvrtc_program owned(api, prog);
    if (api.nvrtcCompileProgram(prog, 0, nullptr) != NVRTC_SUCCESS) {
      throw error("the worker's NVRTC cannot compile a probe program");
    }
    a.status = api.nvrtcGetPCHCreateStatus(prog);
    a.required_code = api.nvrtcGetPCHHeapSizeRequired(prog, &a.required);
    return a;
  }();
  return answers;
}

// A drop-in's compile: the program's own option list as given, and every getter's answer after
// it, as the client's NVRTC would have given them (automatic PCH where the server has an image,
// with the plain compile's PCH answers and log).
raw_compile_reply compile_raw_in_worker(const compile_request& q) {
  enter_client_view(q.view);
  const auto& api = detail::nvrtc("the compile server's worker");
  program_options options = q.options;
  options.compile_server = compile_server_mode::off;
  // The option list itself tells images apart (the drop-in's reading of it may not).
  std::string identity = "cucore-server-raw-options";
  for (const auto& f : q.flags) (identity += '\0') += f;
  detail::auto_pch_compile automatic(api, q.code, options, code_type::ptx, std::nullopt, identity);
  std::vector<const char*> header_contents, header_names;
  for (const auto& h : options.headers) {
    header_contents.push_back(h.contents.c_str());
    header_names.push_back(h.name.c_str());
  }
  const int header_count = static_cast<int>(header_names.size());
  bool plain_retry = false, force_plain = false;
  for (;;) {
    const bool with_pch = automatic.active() && !force_plain;
    std::vector<std::string> flags = q.flags;
    if (with_pch) flags.insert(flags.end(), automatic.flags().begin(), automatic.flags().end());
    std::vector<const char*> argv;
    for (const auto& f : flags) argv.push_back(f.c_str());
    nvrtcProgram raw = nullptr;
    const nvrtcResult created =
        api.nvrtcCreateProgram(&raw, q.code.c_str(), options.name.c_str(), header_count,
                               header_count ? header_contents.data() : nullptr,
                               header_count ? header_names.data() : nullptr);
    if (created != NVRTC_SUCCESS) {
      throw error(std::string("nvrtcCreateProgram failed: ") + api.nvrtcGetErrorString(created));
    }
    detail::nvrtc_program prog(api, raw);
    for (const auto& e : q.name_expressions) {
      if (api.nvrtcAddNameExpression(prog.get(), e.c_str()) != NVRTC_SUCCESS) {
        throw error("nvrtcAddNameExpression refused \"" + e + "\"");
      }
    }
    const nvrtcResult result = api.nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()),
                                                       argv.empty() ? nullptr : argv.data());
    std::string log;
    if (std::size_t size = 0; api.nvrtcGetProgramLogSize(prog.get(), &size) == NVRTC_SUCCESS) {
      log.assign(size + 1, '\0');
      if (api.nvrtcGetProgramLog(prog.get(), log.data()) != NVRTC_SUCCESS) log.clear();
      log.resize(std::strlen(log.c_str()));
    }
    if (result != NVRTC_SUCCESS) {
      // A failure with an automatic PCH is compiled again plain: its answers (the log, the PCH
      // getters') are then the client's own.
      if (with_pch) {
        plain_retry = automatic.failed(log);  // true: the failure was PCH mode's, not the code's
        force_plain = true;
        continue;
      }
    } else if (plain_retry) {
      automatic.retry_succeeded();
    } else if (with_pch && automatic.succeeded(prog.get(), log)) {
      continue;  // its log speaks of PCH: again, plain
    }
    raw_compile_reply a;
    a.result = result;
    a.record = detail::record_nvrtc_program(api, prog.get(), q.name_expressions);
    a.auto_pch = automatic.status();
    if (with_pch) {
      const auto& plain = plain_pch(api);
      a.record.pch_status = plain.status;
      a.record.pch_required_code = plain.required_code;
      a.record.pch_required = plain.required;
    }
    return a;
  }
}

}  // namespace

}  // namespace server

compile_server_settings compile_server_settings_from_environment() {
  compile_server_settings s;
  s.directory = server::default_directory();
  if (const auto n = server::env_number("CUCORE_SERVER_WORKERS")) s.workers = *n;
  if (const auto n = server::env_number("CUCORE_SERVER_IDLE_SECONDS")) {
    s.idle = std::chrono::seconds(*n);
  }
  if (const auto n = server::env_number("CUCORE_SERVER_WORKER_MEMORY_MB")) {
    s.worker_memory_limit = *n << 20;
  }
  return s;
}

std::filesystem::path prepare_compile_server_directory(const std::filesystem::path& directory) {
  if (directory.empty() || !directory.is_absolute()) {
    throw invalid_argument("the compile server's directory \"" + directory.string() +
                           "\" is not an absolute path");
  }
  if (::mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) {
    throw error(server::errno_text("cannot create the compile server's directory \"" +
                                   directory.string() + "\""));
  }
  if (auto problem = server::check_private(directory); !problem.empty()) {
    throw error("refusing the compile server's directory: " + problem);
  }
  return directory;
}

int run_compile_server(const compile_server_settings& settings, int ready_fd) {
  compile_server_settings s = settings;
  if (s.executable.empty())
    throw invalid_argument("the compile server needs its workers' executable");
  // The workers compile in-process, whatever the user's setting.
  ::unsetenv("CUCORE_COMPILE_SERVER");
  server::compile_server srv(std::move(s));
  return srv.run(ready_fd);
}

int run_compile_server_worker(int fd, const std::string& nvrtc) {
  using namespace std::chrono_literals;
  server::unique_fd conn(fd);
  ::signal(SIGPIPE, SIG_IGN);
  // The very file the clients of this worker's pool loaded.
  if (!nvrtc.empty()) detail::pin_library(detail::library_spec_of(toolkit::library::nvrtc), nvrtc);
  // The compilers' variables as NVRTC sees them at its start (some are read once per process):
  // a request with other values is another pool's (the server never sends one here).
  const server::compiler_variables own_environment = server::current_compiler_variables();
  detail::file_identity own{};
  try {  // loaded now, so the first request does not pay for it
    const auto& api = detail::nvrtc("the compile server's worker");
    if (auto id = detail::identify_file(api.library->path())) own = *id;
  } catch (const std::exception& e) {
    cucore::log(log_level::warning, std::string("compile server worker: ") + e.what());
  }
  for (;;) {
    std::optional<server::frame> f;
    try {
      f = server::read_frame(conn.get(), 24h);
    } catch (const std::exception&) {
      return 1;
    }
    if (!f) return 0;  // the server closed: exit, the automatic PCH files with us
    using server::frame_type;
    const bool raw = f->type == frame_type::raw_compile_request ||
                     f->type == frame_type::raw_compile_request_make_image;
    const bool make_image = f->type == frame_type::compile_request_make_image ||
                            f->type == frame_type::raw_compile_request_make_image;
    if (!raw && !make_image && f->type != frame_type::compile_request) return 1;
    // The server decides where and when a prefix's image is made (after the compile that asked,
    // off its critical path): any other compile uses an image this worker holds, and makes none.
    detail::set_auto_pch_creation(make_image ? detail::auto_pch_creation::now
                                             : detail::auto_pch_creation::never);
    frame_type type = raw ? frame_type::raw_compile_reply : frame_type::compile_reply;
    std::string payload;
    try {
      const server::compile_request q = server::decode_request(f->payload);
      if (own.path.empty() || q.view.nvrtc_path != own.path || q.view.nvrtc_inode != own.inode ||
          q.view.nvrtc_device != own.device || q.view.nvrtc_size != own.size ||
          q.view.nvrtc_mtime_ns != own.mtime_ns) {
        throw error("the client loaded another NVRTC (\"" + q.view.nvrtc_path +
                    "\") than the worker (\"" + own.path + "\")");
      }
      if (q.view.environment != own_environment) {
        throw error("the client's compiler variables differ from the worker's");
      }
      // Observed: the client's store gate checks what it read. A compile that read this
      // process's own view (/dev/stdin, /proc/self, the host's name, ...) is the client's to make.
      const auto observed = [](auto&& compile_it) {
        detail::compiler_observation watch;
        auto reply = compile_it();
        reply.observed = watch.finish();
        if (const auto* in = detail::first_process_view_input(reply.observed)) {
          throw error("the compile read " + in->name +
                      ", whose contents are the worker's own: the client compiles it");
        }
        return server::encode(reply);
      };
      payload = raw ? observed([&] { return server::compile_raw_in_worker(q); })
                    : observed([&] { return server::compile_in_worker(q); });
    } catch (const std::exception& e) {
      type = frame_type::refusal;
      payload = e.what();
    }
    try {
      server::write_frame(conn.get(), type, payload, 60s);
    } catch (const std::exception&) {
      return 1;
    }
  }
}

namespace {

// One request and its answer on a fresh connection; nullopt when nothing answers.
std::optional<server::frame> ask(const std::filesystem::path& dir, server::frame_type type) {
  using namespace std::chrono_literals;
  std::string why;
  server::unique_fd fd = server::connect_to_server(dir, why);
  if (!fd) return std::nullopt;
  try {
    server::write_frame(fd.get(), type, {}, 5s);
    return server::read_frame(fd.get(), 5s);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::uint64_t json_number(std::string_view json, std::string_view key, std::size_t from = 0) {
  const std::string needle = "\"" + std::string(key) + "\": ";
  const auto at = json.find(needle, from);
  if (at == std::string_view::npos) return 0;
  return std::strtoull(std::string(json.substr(at + needle.size(), 24)).c_str(), nullptr, 10);
}

std::filesystem::path g_server_program;
std::mutex g_server_program_mutex;

}  // namespace

std::optional<compile_server_status> query_compile_server(const std::filesystem::path& directory) {
  const auto answer = ask(directory, server::frame_type::status_request);
  if (!answer || answer->type != server::frame_type::status_reply) return std::nullopt;
  compile_server_status s;
  s.json = answer->payload;
  const std::string_view j = s.json;
  s.pid = static_cast<int>(json_number(j, "pid"));
  s.queued = json_number(j, "queued");
  s.requests = json_number(j, "requests");
  s.images_being_made = json_number(j, "images_being_made");
  if (const auto at = j.find("\"idle_seconds_left\": "); at != std::string_view::npos) {
    s.idle_seconds_left = std::strtod(std::string(j.substr(at + 21, 24)).c_str(), nullptr);
  }
  for (auto at = j.find("{\"pid\": ", 1); at != std::string_view::npos;
       at = j.find("{\"pid\": ", at + 1)) {
    compile_server_worker_status w;
    w.pid = static_cast<int>(json_number(j, "pid", at));
    w.busy = j.substr(j.find("\"busy\": ", at) + 8, 4) == "true";
    w.making_image = j.substr(j.find("\"making_image\": ", at) + 16, 4) == "true";
    w.requests = json_number(j, "requests", at);
    w.resident_bytes = json_number(j, "resident_bytes", at);
    w.peak_bytes = json_number(j, "peak_bytes", at);
    w.prefixes = json_number(j, "prefixes", at);
    w.restarts = json_number(j, "restarts", at);
    s.workers.push_back(w);
  }
  return s;
}

bool stop_compile_server(const std::filesystem::path& directory, std::chrono::milliseconds wait) {
  const auto status = query_compile_server(directory);
  const auto answer = ask(directory, server::frame_type::stop_request);
  if (!answer || answer->type != server::frame_type::stopping) return false;
  // Stopped when the process is gone (or a zombie its parent has yet to reap): its files go first.
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (status && std::chrono::steady_clock::now() < deadline) {
    std::ifstream stat("/proc/" + std::to_string(status->pid) + "/stat");
    std::string pid, name, state;
    if (!(stat >> pid >> name >> state) || state == "Z") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void set_compile_server_program(std::filesystem::path executable) {
  const std::lock_guard lock(g_server_program_mutex);
  g_server_program = std::move(executable);
}

bool start_compile_server(const std::filesystem::path& directory) {
  std::filesystem::path exe;
  {
    const std::lock_guard lock(g_server_program_mutex);
    exe = g_server_program;
  }
  if (exe.empty()) {
    if (const char* p = std::getenv("CUCORE_SERVER_PROGRAM"); p != nullptr && *p != '\0') exe = p;
  }
  if (exe.empty()) {
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path ? path : "");
    for (std::string d; std::getline(dirs, d, ':');) {
      if (!d.empty() && ::access((d + "/cucore").c_str(), X_OK) == 0) {
        exe = d + "/cucore";
        break;
      }
    }
  }
  if (exe.empty()) return false;
  // "cucore server start" daemonizes and returns once the server listens: spawned, not forked,
  // since the caller may have threads.
  std::string dir_arg = "--dir=" + directory.string();
  std::string exe_s = exe.string();
  std::vector<char*> argv = {exe_s.data(), const_cast<char*>("server"), const_cast<char*>("start"),
                             dir_arg.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe_s.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace cucore
