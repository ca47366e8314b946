// A real redis-server for the tests, on a free loopback port, and a raw hiredis client to look at
// and damage what the cache stored. Tests skip (GTEST_SKIP) where redis-server is not installed.
#pragma once

#include <hiredis/hiredis.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loopback_server.hpp"

namespace cucore::testing {

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
class redis_server final : public loopback_server {
 public:
  explicit redis_server(std::vector<std::string> extra_args = {})
      : loopback_server("redis-server", "scripts/setup.sh installs it", "redis.log"),
        extra_args_(std::move(extra_args)) {
    if (installed()) start_on_a_free_port();
  }

  std::string url(std::string_view suffix = "") const {
    return "redis://127.0.0.1:" + std::to_string(port()) + std::string(suffix);
  }

  bool start() override {
    std::vector<std::string> args = {
        "--port", std::to_string(port()), "--bind",     "127.0.0.1",   "--save",
        "",       "--appendonly",         "no",         "--daemonize", "no",
        "--dir",  dir().string(),         "--loglevel", "warning"};
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    // Any reply will do: a server with requirepass answers NOAUTH.
    return spawn(args, "redis.log", [this] {
      return raw_redis(port(), std::chrono::milliseconds(200)).command({"PING"}) != nullptr;
    });
  }
  // SIGKILL: the server dies at once, mid-command if one is running; its data is gone.
  void kill() { stop(); }
  // SIGSTOP / SIGCONT: a server that accepts connections but does not answer.
  void pause() const { ::kill(pid(), SIGSTOP); }
  void resume() const { ::kill(pid(), SIGCONT); }

  raw_redis client() const { return raw_redis(port()); }

 private:
  std::vector<std::string> extra_args_;
};

#define CUCORE_REQUIRE_REDIS(server) CUCORE_REQUIRE_SERVER(server)

}  // namespace cucore::testing
