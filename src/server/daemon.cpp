// The compile server's listening process: its lock and socket, its connections, its worker
// processes' lives and its status (routing.cpp sends each compile to a worker).
#include "server/daemon.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "common/descriptors.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "key/compiler_environment.hpp"
#include "loader/libraries.hpp"
#include "loader/shared_library.hpp"
#include "server/status.hpp"

extern char** environ;

namespace cucore::server {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string mount_namespace(int pid) {
  const std::string link =
      pid == 0 ? "/proc/self/ns/mnt" : "/proc/" + std::to_string(pid) + "/ns/mnt";
  char buf[128];
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

constexpr const char* kComputeCacheVariable = "CUDA_CACHE_DISABLE";
// Set by the server when it turned the compute cache off for a worker (its clients did not).
constexpr env::variable kComputeCacheOffMarker = env::variable::server_worker_compute_cache_off;

}  // namespace

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

// A worker's CUDA_CACHE_DISABLE as its clients have it: see spawn.
compiler_variables current_compiler_variables() {
  const bool server_set = env::flag(kComputeCacheOffMarker).value.value_or(false);
  compiler_variables out;
  for (const auto& var : detail::compiler_environment()) {
    const std::string name(var.name);
    const char* value = std::getenv(name.c_str());
    if (server_set && name == kComputeCacheVariable) value = nullptr;
    out.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
  }
  return out;
}

compile_server::compile_server(compile_server_settings settings) : settings_(std::move(settings)) {
  if (settings_.workers == 0) {
    settings_.workers = std::max(1u, std::thread::hardware_concurrency());
  }
  own_namespace_ = mount_namespace(0);
  touch();
}

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
    env.push_back(std::string(env::name(kComputeCacheOffMarker)) + "=1");
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

std::string compile_server::status_json() {
  const auto now = clock::now();
  const double idle_for =
      std::chrono::duration<double>(now.time_since_epoch() - clock::duration(last_activity_))
          .count();
  status_report report;
  report.pid = ::getpid();
  report.directory = settings_.directory.string();
  report.uptime_seconds = std::chrono::duration<double>(now - started_).count();
  report.idle_seconds_left =
      active_ > 0 ? static_cast<double>(settings_.idle.count())
                  : std::max(0.0, static_cast<double>(settings_.idle.count()) - idle_for);
  report.idle_seconds = settings_.idle.count();
  report.requests = requests_.load();
  report.queued = queued_.load();
  report.active = active_.load();
  report.worker_memory_limit_bytes = settings_.worker_memory_limit;
  for (worker_slot* slot : all_workers()) {
    worker_slot& w = *slot;
    status_report::worker& r = report.workers.emplace_back();
    {
      const std::lock_guard lock(routes_mutex_);
      for (const auto& [route, entries] : routes_) {
        for (const route_entry& e : entries) r.counts.prefixes += e.worker == &w && e.ready ? 1 : 0;
      }
    }
    // The pid is read without the slot's lock: a status never waits for a compile (-1: the slot's
    // process starts at its first request).
    const int pid = w.pid.load();
    r.counts.pid = pid;
    r.counts.busy = w.busy;
    r.counts.making_image = w.making_image;
    r.counts.requests = w.requests.load();
    r.counts.resident_bytes = pid > 0 ? proc_status_bytes(pid, "VmRSS") : 0;
    r.counts.peak_bytes =
        std::max<std::uint64_t>(w.peak, pid > 0 ? proc_status_bytes(pid, "VmHWM") : 0);
    r.counts.restarts = w.restarts.load();
    r.nvrtc = w.library;
  }
  return server::status_json(report);
}

void compile_server::shutdown_workers() {
  for (worker_slot* w : all_workers()) {
    const std::lock_guard use(w->use);
    retire(*w, false);
  }
}

namespace {

std::atomic<int> g_signal_pipe{-1};
extern "C" void on_stop_signal(int) {
  const int fd = g_signal_pipe.load();
  if (fd >= 0) {
    const char c = 's';
    [[maybe_unused]] const ssize_t n = ::write(fd, &c, 1);
  }
}

}  // namespace

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

}  // namespace cucore::server

namespace cucore {

compile_server_settings compile_server_settings_from_environment() {
  compile_server_settings s;
  s.directory = server::default_directory();
  if (const auto n = server::env_number(env::variable::server_workers)) s.workers = *n;
  if (const auto n = server::env_number(env::variable::server_idle_seconds)) {
    s.idle = std::chrono::seconds(*n);
  }
  if (const auto n = server::env_number(env::variable::server_worker_memory_mb)) {
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
  ::unsetenv(env::name(env::variable::compile_server).data());
  server::compile_server srv(std::move(s));
  return srv.run(ready_fd);
}

}  // namespace cucore
