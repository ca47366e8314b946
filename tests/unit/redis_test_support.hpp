// A real redis-server for the tests, on a free loopback port, and a raw hiredis client to look at
// and damage what the cache stored. Tests skip (GTEST_SKIP) where redis-server is not installed.
#pragma once

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "test_support.hpp"

extern char** environ;

namespace cucore::testing {

// The redis-server on PATH, or "" when there is none.
inline std::string find_redis_server() {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    const auto colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    const std::string candidate = (dir.empty() ? "." : dir) + "/redis-server";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// A port nothing listens on now: bind 127.0.0.1:0, read the port, close. (redis-server 7 does
// not take --port 0.) Another process may take it before the server binds it; the server's start
// retries with another port then.
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind(127.0.0.1:0) failed");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

struct reply_deleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

// A plain hiredis connection: what an operator (or an attacker) with redis-cli could do.
class raw_redis {
 public:
  raw_redis(int port, std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) {
    timeval tv{static_cast<time_t>(timeout.count() / 1000),
               static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
    context_.reset(redisConnectWithTimeout("127.0.0.1", port, tv));
    if (context_ && !context_->err) redisSetTimeout(context_.get(), tv);
  }
  bool ok() const { return context_ && !context_->err; }
  // nullptr when the connection failed.
  reply_ptr command(const std::vector<std::string>& args) {
    if (!ok()) return nullptr;
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lengths.push_back(a.size());
    }
    return reply_ptr(static_cast<redisReply*>(redisCommandArgv(
        context_.get(), static_cast<int>(argv.size()), argv.data(), lengths.data())));
  }
  // The reply's text (string, status or error), or "" for none.
  std::string text(const std::vector<std::string>& args) {
    reply_ptr r = command(args);
    return r && r->str ? std::string(r->str, r->len) : std::string();
  }
  long long integer(const std::vector<std::string>& args) {
    reply_ptr r = command(args);
    return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  }

 private:
  struct context_deleter {
    void operator()(redisContext* c) const noexcept { redisFree(c); }
  };
  std::unique_ptr<redisContext, context_deleter> context_;
};

// A redis-server child process: no persistence, loopback only. Stopped (SIGKILL) by the
// destructor. start() waits, bounded, until it answers PING (with any reply).
class redis_server {
 public:
  explicit redis_server(std::vector<std::string> extra_args = {})
      : binary_(find_redis_server()), extra_args_(std::move(extra_args)) {
    if (binary_.empty()) return;
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
      port_ = free_loopback_port();
      start();
    }
  }
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;
  ~redis_server() { kill(); }

  bool installed() const { return !binary_.empty(); }
  bool running() const { return pid_ > 0; }
  int port() const { return port_; }
  std::string url(std::string_view suffix = "") const {
    return "redis://127.0.0.1:" + std::to_string(port_) + std::string(suffix);
  }

  // Starts the server on port() (again, after kill()); false if it did not answer within 10 s.
  bool start() {
    std::vector<std::string> args = {
        binary_,  "--port", std::to_string(port_), "--bind",     "127.0.0.1",
        "--save", "",       "--appendonly",        "no",         "--daemonize",
        "no",     "--dir",  dir_.path().string(),  "--loglevel", "warning"};
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = (dir_.path() / "redis.log").string();
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, binary_.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return false;
    pid_ = pid;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited: port taken, bad argument
        pid_ = -1;
        return false;
      }
      // Any reply will do: a server with requirepass answers NOAUTH.
      raw_redis client(port_, std::chrono::milliseconds(200));
      if (client.command({"PING"})) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill();
    return false;
  }
  // SIGKILL: the server dies at once, mid-command if one is running; its data is gone.
  void kill() { signal_and_reap(SIGKILL); }
  // SIGSTOP / SIGCONT: a server that accepts connections but does not answer.
  void pause() const { ::kill(pid_, SIGSTOP); }
  void resume() const { ::kill(pid_, SIGCONT); }
  std::string log() const { return read_text(dir_.path() / "redis.log"); }

  raw_redis client() const { return raw_redis(port_); }

 private:
  void signal_and_reap(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    ::kill(pid_, SIGCONT);  // a paused server must run to die
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

  std::string binary_;
  std::vector<std::string> extra_args_;
  temp_dir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

#define CUCORE_REQUIRE_REDIS(server)                                                      \
  do {                                                                                    \
    if (!(server).installed()) {                                                          \
      GTEST_SKIP() << "redis-server is not installed (scripts/setup.sh installs it)";     \
    }                                                                                     \
    ASSERT_TRUE((server).running()) << "redis-server did not start:\n" << (server).log(); \
  } while (0)

}  // namespace cucore::testing
