// What the tests' real servers (redis_test_support.hpp, nginx_test_support.hpp) share: finding
// the executable, free loopback ports, and one child process on such a port, spawned with its
// output in a temporary directory, waited for until it answers and killed (SIGKILL) at the end.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "test_support.hpp"

extern char** environ;

namespace cucore::testing {

// The executable `name` in $PATH's directories, then in `extra_dirs` (':'-separated), or "" when
// there is none.
inline std::string find_executable(std::string_view name, std::string_view extra_dirs = "") {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  if (!extra_dirs.empty()) dirs += ":" + std::string(extra_dirs);
  std::string_view rest = dirs;
  while (!rest.empty()) {
    const auto colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + std::string(name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// 127.0.0.1:port (0: any free port, for bind).
inline sockaddr_in loopback_address(int port = 0) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  return addr;
}

// A TCP socket bound to a free loopback port, listening with `backlog` unless it is 0; throws
// (naming `who`) when that fails. Returns the descriptor, and the port in `port`.
inline int bind_loopback(int& port, int backlog, const char* who) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = loopback_address();
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      (backlog != 0 && ::listen(fd, backlog) != 0) ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error(std::string(who) + ": cannot bind a socket to 127.0.0.1");
  }
  port = ntohs(addr.sin_port);
  return fd;
}

// A port nothing listens on now: bind 127.0.0.1:0, read the port, close. (redis-server 7 does
// not take --port 0.) Another process may take it before the server binds it; the server's start
// retries with another port then.
inline int free_loopback_port() {
  int port = 0;
  ::close(bind_loopback(port, 0, "free_loopback_port"));
  return port;
}

// Connects to 127.0.0.1:port; true if something accepts.
inline bool port_answers(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const sockaddr_in addr = loopback_address(port);
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// One server process on a loopback port. A subclass's constructor calls start_on_a_free_port()
// (where its executable is installed); its start() spawns the server with spawn().
class loopback_server {
 public:
  loopback_server(const loopback_server&) = delete;
  loopback_server& operator=(const loopback_server&) = delete;
  virtual ~loopback_server() { stop(); }

  bool installed() const { return !binary_.empty(); }
  bool running() const { return pid_ > 0; }
  int port() const { return port_; }
  // The server's own log (for a failed test's message).
  std::string log() const { return read_text(dir_.path() / log_name_); }
  // "nginx is not installed (scripts/setup.sh installs nginx-light)": why a test skips.
  std::string not_installed() const { return name_ + " is not installed (" + install_hint_ + ")"; }
  const std::string& name() const { return name_; }

  // Starts the server on port() (again, after stop()); false if it did not answer within 10 s.
  virtual bool start() = 0;
  // SIGKILL: the server dies at once, mid-request if one is running; nothing is left listening.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::kill(pid_, SIGCONT);  // a paused server must run to die
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 protected:
  // `name`: the executable's, found on $PATH, then in `extra_dirs`; `log_name`: the log's file in
  // dir().
  loopback_server(std::string name, std::string install_hint, std::string log_name,
                  std::string_view extra_dirs = "")
      : name_(std::move(name)),
        install_hint_(std::move(install_hint)),
        log_name_(std::move(log_name)),
        binary_(find_executable(name_, extra_dirs)) {}

  // A few tries, each on another free port (one may be taken before the server binds it).
  void start_on_a_free_port() {
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
      port_ = free_loopback_port();
      start();
    }
  }

  // Spawns the executable with `args` (after argv[0]), its stdout and stderr appended to
  // dir()/output_name, and waits (up to 10 s) until `answers()`; false if it exits first (port
  // taken, bad configuration) or does not answer (then stopped).
  bool spawn(const std::vector<std::string>& args, const std::string& output_name,
             const std::function<bool()>& answers) {
    std::vector<std::string> all = {binary_};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string out = (dir_.path() / output_name).string();
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, binary_.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return false;
    pid_ = pid;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      if (answers()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    return false;
  }

  const std::filesystem::path& dir() const { return dir_.path(); }
  pid_t pid() const { return pid_; }

 private:
  std::string name_;
  std::string install_hint_;
  std::string log_name_;
  std::string binary_;
  temp_dir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// Skips the test where the server's executable is not installed; fails it where the server did
// not start.
#define CUCORE_REQUIRE_SERVER(server)                                                            \
  do {                                                                                           \
    if (!(server).installed()) GTEST_SKIP() << (server).not_installed();                         \
    ASSERT_TRUE((server).running()) << (server).name() << " did not start:\n" << (server).log(); \
  } while (0)

}  // namespace cucore::testing
