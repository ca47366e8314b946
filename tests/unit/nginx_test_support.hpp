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

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include "loopback_server.hpp"

namespace cucore::testing {

// A socket listening on a loopback port that never accepts: connections complete (the backlog)
// and then hear nothing.
class silent_listener {
 public:
  silent_listener() : fd_(bind_loopback(port_, 64, "silent_listener")) {}
  silent_listener(const silent_listener&) = delete;
  silent_listener& operator=(const silent_listener&) = delete;
  ~silent_listener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int port_ = 0;
  int fd_ = -1;
};

class nginx_server final : public loopback_server {
 public:
  // `auth_value`: the Authorization header /auth/ requires.
  explicit nginx_server(std::string auth_value = "Bearer s3cret-token")
      : loopback_server("nginx", "scripts/setup.sh installs nginx-light", "error.log",
                        "/usr/sbin:/sbin"),
        auth_value_(std::move(auth_value)) {
    if (!installed()) return;
    std::filesystem::create_directories(root() / "cache");
    start_on_a_free_port();
  }

  std::filesystem::path root() const { return dir() / "root"; }
  // http://127.0.0.1:PORT/LOCATION
  std::string url(std::string_view location = "cache", std::string_view suffix = "") const {
    return "http://127.0.0.1:" + std::to_string(port()) + "/" + std::string(location) +
           std::string(suffix);
  }
  std::string access_log() const { return read_text(dir() / "access.log"); }
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

  bool start() override {
    write_config();
    const std::string d = dir().string();
    return spawn({"-p", d + "/", "-e", d + "/error.log", "-c", d + "/nginx.conf"}, "stderr.log",
                 [this] { return port_answers(port()); });
  }

 private:
  void write_config() const {
    const std::string d = dir().string();
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
        std::to_string(port()) +
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
    write_text(dir() / "nginx.conf", conf);
  }

  std::string auth_value_;
  silent_listener hang_;
};

#define CUCORE_REQUIRE_NGINX(server) CUCORE_REQUIRE_SERVER(server)

}  // namespace cucore::testing
