// A real nginx for the HTTP tier's tests and benchmark: one process (master_process off, so a
// SIGKILL leaves no workers behind) on a free loopback port, its configuration, logs, temporary
// files and document root in a temporary directory. Locations:
//   /cache/     WebDAV PUT and DELETE (what the cache writes), files under root()/cache
//   /nodelete/  PUT only: DELETE is answered 405
//   /auth/      PUT and DELETE, 401 unless "Authorization: <auth_value>" is sent
//   /fail/      500 to everything
//   /garbage/   200 "garbage" to everything
//   /slow/      proxied to a loopback socket that accepts and never answers
// Tests skip (GTEST_SKIP) where nginx is not installed.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "redis_test_support.hpp"  // free_loopback_port
#include "test_support.hpp"

extern char** environ;

namespace cucore::testing {

// The nginx on PATH or in /usr/sbin (Debian's), or "" when there is none.
inline std::string find_nginx() {
  const char* path = std::getenv("PATH");
  std::string dirs = std::string(path ? path : "/usr/local/bin:/usr/bin:/bin") + ":/usr/sbin:/sbin";
  std::string_view rest = dirs;
  while (!rest.empty()) {
    const auto colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    const std::string candidate = (dir.empty() ? "." : dir) + "/nginx";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// Connects to 127.0.0.1:port; true if something accepts.
inline bool port_answers(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// A socket listening on a loopback port that never accepts: connections complete (the backlog)
// and then hear nothing.
class silent_listener {
 public:
  silent_listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 64) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw std::runtime_error("silent_listener: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(addr.sin_port);
  }
  silent_listener(const silent_listener&) = delete;
  silent_listener& operator=(const silent_listener&) = delete;
  ~silent_listener() {
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

class nginx_server {
 public:
  // `auth_value`: the Authorization header /auth/ requires.
  explicit nginx_server(std::string auth_value = "Bearer s3cret-token")
      : binary_(find_nginx()), auth_value_(std::move(auth_value)) {
    if (binary_.empty()) return;
    std::filesystem::create_directories(root() / "cache");
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
      port_ = free_loopback_port();
      start();
    }
  }
  nginx_server(const nginx_server&) = delete;
  nginx_server& operator=(const nginx_server&) = delete;
  ~nginx_server() { stop(); }

  bool installed() const { return !binary_.empty(); }
  bool running() const { return pid_ > 0; }
  int port() const { return port_; }
  std::filesystem::path root() const { return dir_.path() / "root"; }
  // http://127.0.0.1:PORT/LOCATION
  std::string url(std::string_view location = "cache", std::string_view suffix = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + std::string(location) +
           std::string(suffix);
  }
  std::string log() const { return read_text(dir_.path() / "error.log"); }
  std::string access_log() const { return read_text(dir_.path() / "access.log"); }
  // nginx logs a request after its response is sent, so the last line can lag the client:
  // waits (up to 5 s) for at least `lines` lines, then returns the log.
  std::string access_log_with(std::size_t lines) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
      std::string text = access_log();
      if (static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) >= lines ||
          std::chrono::steady_clock::now() > deadline)
        return text;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // Starts nginx on port() (again, after stop()); false if it did not answer within 10 s.
  bool start() {
    write_config();
    std::vector<std::string> args = {binary_,
                                     "-p",
                                     dir_.path().string() + "/",
                                     "-e",
                                     (dir_.path() / "error.log").string(),
                                     "-c",
                                     (dir_.path() / "nginx.conf").string()};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string out = (dir_.path() / "stderr.log").string();
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
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited: port taken, bad configuration
        pid_ = -1;
        return false;
      }
      if (port_answers(port_)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    return false;
  }
  // SIGKILL: one process (master_process off), so nothing is left listening.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 private:
  void write_config() const {
    const std::string d = dir_.path().string();
    const std::string dav =
        "dav_methods PUT DELETE; create_full_put_path on; dav_access user:rw; "
        "client_max_body_size 0;";
    const std::string conf =
        "daemon off;\n"
        "master_process off;\n"
        "pid " +
        d +
        "/nginx.pid;\n"
        "error_log " +
        d +
        "/error.log info;\n"
        "events { worker_connections 256; }\n"
        "http {\n"
        "  access_log " +
        d +
        "/access.log;\n"
        "  client_body_temp_path " +
        d +
        "/tmp-body;\n"
        "  proxy_temp_path " +
        d +
        "/tmp-proxy;\n"
        "  fastcgi_temp_path " +
        d +
        "/tmp-fastcgi;\n"
        "  uwsgi_temp_path " +
        d +
        "/tmp-uwsgi;\n"
        "  scgi_temp_path " +
        d +
        "/tmp-scgi;\n"
        "  keepalive_requests 100000;\n"
        "  server {\n"
        "    listen 127.0.0.1:" +
        std::to_string(port_) +
        ";\n"
        "    root " +
        root().string() +
        ";\n"
        "    location /cache/ { " +
        dav +
        " }\n"
        "    location /nodelete/ { dav_methods PUT; create_full_put_path on; "
        "client_max_body_size 0; }\n"
        "    location /auth/ { if ($http_authorization != \"" +
        auth_value_ + "\") { return 401; } " + dav +
        " }\n"
        "    location /fail/ { return 500; }\n"
        "    location /garbage/ { return 200 \"garbage\"; }\n"
        "    location /slow/ { proxy_pass http://127.0.0.1:" +
        std::to_string(hang_.port()) +
        "; proxy_read_timeout 60s; }\n"
        "  }\n"
        "}\n";
    write_text(dir_.path() / "nginx.conf", conf);
  }

  std::string binary_;
  std::string auth_value_;
  temp_dir dir_;
  silent_listener hang_;
  int port_ = 0;
  pid_t pid_ = -1;
};

#define CUCORE_REQUIRE_NGINX(server)                                                    \
  do {                                                                                  \
    if (!(server).installed()) {                                                        \
      GTEST_SKIP() << "nginx is not installed (scripts/setup.sh installs nginx-light)"; \
    }                                                                                   \
    ASSERT_TRUE((server).running()) << "nginx did not start:\n" << (server).log();      \
  } while (0)

}  // namespace cucore::testing
