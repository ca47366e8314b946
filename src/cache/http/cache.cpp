// The HTTP cache tier (include/cucore/cache/http.hpp): GET, PUT and DELETE of whole entries
// through libcurl, one kept-alive handle per concurrent caller.
#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "cache/entry_format.hpp"
#include "cache/http/curl_api.hpp"
#include "cache/redis_internal.hpp"  // sigpipe_guard
#include "cache/remote_health.hpp"
#include "common/environment.hpp"
#include "common/sha256.hpp"
#include "cucore/cache/http.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"

namespace cucore {
namespace {

constexpr std::size_t kIdleConnections = 8;  // kept alive beyond that many are closed
constexpr std::size_t kUnknownLengthStart = 64 << 10;

// libcurl's global state, set up once before any handle (thread-safe in the libcurl 7.84+ that
// Debian 12 ships; cucore never tears it down, as other users of libcurl may share it).
void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (detail::curl().global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      throw error("http cache: libcurl could not be initialised (curl_global_init failed)");
    }
  });
}

// A failure of the server (as opposed to an answer about one object): it starts a backoff.
bool is_server_failure(long status) {
  return status == 401 || status == 403 || status == 407 || status == 408 || status == 429 ||
         status >= 500;
}

std::string layout_name(http_layout layout) {
  switch (layout) {
    case http_layout::subdirs:
      return "subdirs";
    case http_layout::flat:
      return "flat";
    case http_layout::bazel:
      return "bazel";
  }
  return "?";
}

[[noreturn]] void cannot_list(const std::string& url, std::string_view what) {
  throw error("http cache " + url + ": " + std::string(what) +
              " needs a listing of the server's objects, which HTTP does not give: maintain the "
              "cache on the server (docs/cache-http.md, \"Maintenance\")");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Handles and requests

struct http_program_cache::connection {
  struct easy_deleter {
    void operator()(CURL* c) const noexcept { detail::curl().easy_cleanup(c); }
  };
  std::unique_ptr<CURL, easy_deleter> handle;
  pid_t pid = ::getpid();
  char error[CURL_ERROR_SIZE] = {};
  connection() = default;
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  // A handle inherited through fork() shares its socket (and a TLS session) with the parent:
  // cleaning it up here could send bytes on the parent's connection, so the child leaks it.
  ~connection() {
    if (pid != ::getpid()) (void)handle.release();
  }
};

struct http_program_cache::request {
  CURL* handle = nullptr;
  // A GET's body: grown as it arrives, bounded by `limit`.
  std::optional<detail::uninitialized_bytes> body;
  std::size_t length = 0;
  std::uint64_t limit = 0;
  bool too_large = false;
  // A PUT's body.
  std::span<const std::byte> upload;
  std::size_t sent = 0;

  static std::size_t write(char* data, std::size_t size, std::size_t count, void* self) noexcept {
    auto& r = *static_cast<request*>(self);
    const std::size_t n = size * count;
    long status = 0;
    detail::curl().easy_getinfo(r.handle, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) return n;  // an error page: not kept
    try {
      if (!r.body) {
        curl_off_t expected = -1;
        detail::curl().easy_getinfo(r.handle, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &expected);
        if (expected >= 0 && static_cast<std::uint64_t>(expected) > r.limit) {
          r.too_large = true;
          return 0;  // aborts the transfer
        }
        r.body.emplace(expected >= 0 ? static_cast<std::size_t>(expected)
                                     : std::max(kUnknownLengthStart, n));
      }
      if (r.length + n > r.limit) {
        r.too_large = true;
        return 0;
      }
      if (r.length + n > r.body->size) {  // a length the server did not announce, or a wrong one
        detail::uninitialized_bytes bigger(std::max(r.body->size * 2, r.length + n));
        std::memcpy(bigger.data, r.body->data, r.length);
        r.body = std::move(bigger);
      }
      std::memcpy(r.body->data + r.length, data, n);
      r.length += n;
      return n;
    } catch (...) {  // out of memory: the request fails, the cache goes on
      return 0;
    }
  }

  static std::size_t read(char* out, std::size_t size, std::size_t count, void* self) noexcept {
    auto& r = *static_cast<request*>(self);
    const std::size_t n = std::min(size * count, r.upload.size() - r.sent);
    std::memcpy(out, r.upload.data() + r.sent, n);
    r.sent += n;
    return n;
  }
};

void http_program_cache::slist_deleter::operator()(curl_slist* list) const noexcept {
  detail::curl().slist_free_all(list);
}

// ---------------------------------------------------------------------------------------------
// Construction

http_program_cache::http_program_cache(http_cache_options options)
    : options_(std::move(options)),
      url_(parse_http_url(options_.url)),
      redacted_url_(redact_http_url(options_.url)),
      base_(url_.base()),
      health_(std::make_unique<detail::remote_health>("http cache " + redacted_url_,
                                                      options_.retry_initial, options_.retry_max)) {
  if (url_.layout) options_.layout = *url_.layout;
  if (url_.read_only) options_.read_only = *url_.read_only;
  if (url_.connect_timeout) options_.connect_timeout = *url_.connect_timeout;
  if (url_.operation_timeout) options_.operation_timeout = *url_.operation_timeout;
  const bool basic = !url_.user.empty() || !url_.password.empty();
  if (!options_.bearer_token && !basic) {
    if (url_.bearer_token) {
      options_.bearer_token = url_.bearer_token;
    } else if (const auto token = env::text(env::variable::http_bearer_token)) {
      options_.bearer_token = std::string(*token);
    }
  }
  const std::string who = health_->who() + ": ";
  if (basic && options_.bearer_token) {
    throw invalid_argument(who + "both a user:password in the URL and a bearer token: give one");
  }
  if (options_.bearer_token) {
    const std::string& t = *options_.bearer_token;
    if (t.empty() || std::any_of(t.begin(), t.end(), [](char c) {
          return static_cast<unsigned char>(c) < 33 || c == 127;
        })) {
      throw invalid_argument(who +
                             "the bearer token is empty or has a space or control character "
                             "(check $CUCORE_HTTP_BEARER_TOKEN)");
    }
  }
  if (options_.connect_timeout.count() <= 0 || options_.operation_timeout.count() <= 0) {
    throw invalid_argument(who + "connect_timeout and operation_timeout must be positive");
  }
  if (options_.retry_initial.count() <= 0 || options_.retry_max < options_.retry_initial) {
    throw invalid_argument(who + "retry_initial must be positive and retry_max at least as long");
  }
  if (options_.max_entry_bytes == 0) {
    throw invalid_argument(who + "max_entry_bytes is 0: give the largest entry to store");
  }
  init_curl_once();
  auto append = [](std::unique_ptr<curl_slist, slist_deleter>& list, const std::string& line) {
    curl_slist* next = detail::curl().slist_append(list.get(), line.c_str());
    if (next == nullptr) throw std::bad_alloc();
    (void)list.release();
    list.reset(next);
  };
  std::vector<std::string> lines = {"Expect:"};  // no 100-continue round trip before a PUT
  if (options_.bearer_token) lines.push_back("Authorization: Bearer " + *options_.bearer_token);
  for (const auto& [name, value] : url_.headers) lines.push_back(name + ": " + value);
  for (const std::string& line : lines) {
    append(headers_, line);
    append(put_headers_, line);
  }
  append(put_headers_, "Content-Type: application/octet-stream");
}

http_program_cache::~http_program_cache() = default;

std::string http_program_cache::object_url(cache_key_ref key) const {
  const auto hex = detail::sha256_hex(key.bytes());
  const std::string_view h(hex.data(), hex.size());
  switch (options_.layout) {
    case http_layout::subdirs:
      return base_ + std::string(h.substr(0, 2)) + "/" + std::string(h.substr(2));
    case http_layout::flat:
      return base_ + std::string(h);
    case http_layout::bazel:
      return base_ + "ac/" + std::string(h);
  }
  return base_ + std::string(h);
}

// ---------------------------------------------------------------------------------------------
// Connections, failures and the backoff

std::unique_ptr<http_program_cache::connection> http_program_cache::acquire() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty() && idle_.front()->pid != ::getpid()) idle_.clear();  // inherited (fork)
    if (health_->backing_off()) return nullptr;
    if (!idle_.empty()) {
      std::unique_ptr<connection> conn = std::move(idle_.back());
      idle_.pop_back();
      return conn;
    }
  }
  auto conn = std::make_unique<connection>();
  conn->handle.reset(detail::curl().easy_init());
  CURL* h = conn->handle.get();
  if (h == nullptr) {
    health_->note_error("curl_easy_init failed");
    return nullptr;
  }
  detail::curl().easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for DNS timeouts
  detail::curl().easy_setopt(h, CURLOPT_ERRORBUFFER, conn->error);
  detail::curl().easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  detail::curl().easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  detail::curl().easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                             static_cast<long>(options_.connect_timeout.count()));
  detail::curl().easy_setopt(h, CURLOPT_TIMEOUT_MS,
                             static_cast<long>(options_.operation_timeout.count()));
  detail::curl().easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  detail::curl().easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  detail::curl().easy_setopt(h, CURLOPT_USERAGENT, "cucore");
  if (url_.keep_alive == false) detail::curl().easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
  if (!url_.user.empty() || !url_.password.empty()) {
    // Given to libcurl apart from the URL, so no URL it reports holds them.
    detail::curl().easy_setopt(h, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
    detail::curl().easy_setopt(h, CURLOPT_USERNAME, url_.user.c_str());
    detail::curl().easy_setopt(h, CURLOPT_PASSWORD, url_.password.c_str());
  }
  detail::curl().easy_setopt(h, CURLOPT_WRITEFUNCTION, &request::write);
  detail::curl().easy_setopt(h, CURLOPT_READFUNCTION, &request::read);
  return conn;
}

void http_program_cache::release(std::unique_ptr<connection> conn) noexcept {
  if (!conn) return;
  std::lock_guard lock(mutex_);
  if (health_->closed() || idle_.size() >= kIdleConnections) return;
  idle_.push_back(std::move(conn));
}

http_program_cache::outcome http_program_cache::perform(connection& conn, request& req) {
  req.handle = conn.handle.get();
  conn.error[0] = '\0';
  detail::curl().easy_setopt(req.handle, CURLOPT_WRITEDATA, &req);
  detail::curl().easy_setopt(req.handle, CURLOPT_READDATA, &req);
  detail::redis::sigpipe_guard guard;  // OpenSSL writes with write(2)
  const CURLcode rc = detail::curl().easy_perform(req.handle);
  outcome o;
  if (rc != CURLE_OK) {
    o.error = conn.error[0] != '\0' ? std::string(conn.error) : detail::curl().easy_strerror(rc);
    if (rc == CURLE_OPERATION_TIMEDOUT) {
      o.error = "no answer within " + std::to_string(options_.operation_timeout.count()) + " ms (" +
                o.error + ")";
    }
    return o;
  }
  o.transport_ok = true;
  detail::curl().easy_getinfo(req.handle, CURLINFO_RESPONSE_CODE, &o.status);
  return o;
}

void http_program_cache::server_failed(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    idle_.clear();  // their connections may be as broken as this one
  }
  health_->failed(why);
}

void http_program_cache::server_answered() {
  health_->answered();
  health_->reachable();
}

// ---------------------------------------------------------------------------------------------
// The cache

std::optional<object_code> http_program_cache::get(cache_key_ref key) {
  health_->check_open();
  auto miss = [this] {
    health_->counters().misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  };
  std::unique_ptr<connection> conn = acquire();
  if (!conn) return miss();
  const std::string url = object_url(key);
  request req;
  req.limit = options_.max_entry_bytes;
  CURL* h = conn->handle.get();
  detail::curl().easy_setopt(h, CURLOPT_URL, url.c_str());
  detail::curl().easy_setopt(h, CURLOPT_HTTPGET, 1L);
  detail::curl().easy_setopt(h, CURLOPT_CUSTOMREQUEST, nullptr);
  detail::curl().easy_setopt(h, CURLOPT_HTTPHEADER, headers_.get());
  const outcome o = perform(*conn, req);
  if (!o.transport_ok) {
    if (req.too_large) {
      release(std::move(conn));
      health_->note_error("GET " + url + ": the object is larger than max_entry_bytes (" +
                          std::to_string(options_.max_entry_bytes) + ")");
      return miss();
    }
    conn.reset();
    server_failed("GET: " + o.error);
    return miss();
  }
  release(std::move(conn));
  if (o.status == 404 || o.status == 410) {
    server_answered();
    return miss();
  }
  if (o.status != 200) {
    if (is_server_failure(o.status)) {
      server_failed("GET answered HTTP " + std::to_string(o.status));
    } else {
      health_->note_error("GET " + url + " answered HTTP " + std::to_string(o.status));
    }
    return miss();
  }
  server_answered();
  detail::decoded_entry decoded =
      req.body ? detail::decode_entry(std::move(*req.body), req.length, key.bytes())
               : detail::decode_entry(std::vector<std::byte>(), key.bytes());
  if (decoded.status == detail::entry_status::ok) {
    health_->counters().hits.fetch_add(1, std::memory_order_relaxed);
    return std::move(decoded.code);
  }
  // Damaged, foreign, or another key's: never returned. The put after the compile replaces it.
  health_->counters().corrupt_dropped.fetch_add(1, std::memory_order_relaxed);
  log(log_level::debug, health_->who() + ": " + url + " is not this key's entry (" +
                            std::string(detail::to_string(decoded.status)) + "): a miss");
  return miss();
}

void http_program_cache::put(cache_key_ref key, const object_code& code) {
  health_->check_open();
  if (options_.read_only) {
    writes_skipped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const std::vector<std::byte> entry = detail::encode_entry(key.bytes(), code);
  if (entry.size() > options_.max_entry_bytes) {
    writes_skipped_.fetch_add(1, std::memory_order_relaxed);
    log(log_level::debug, "http cache " + redacted_url_ + ": an entry of " +
                              std::to_string(entry.size()) +
                              " bytes is over max_entry_bytes: not stored");
    return;
  }
  std::unique_ptr<connection> conn = acquire();
  if (!conn) return;
  const std::string url = object_url(key);
  request req;
  req.upload = entry;
  CURL* h = conn->handle.get();
  detail::curl().easy_setopt(h, CURLOPT_URL, url.c_str());
  detail::curl().easy_setopt(h, CURLOPT_CUSTOMREQUEST, nullptr);
  detail::curl().easy_setopt(h, CURLOPT_UPLOAD, 1L);
  detail::curl().easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(entry.size()));
  detail::curl().easy_setopt(h, CURLOPT_HTTPHEADER, put_headers_.get());
  const outcome o = perform(*conn, req);
  if (!o.transport_ok) {
    conn.reset();
    server_failed("PUT: " + o.error);
    return;
  }
  release(std::move(conn));
  if (o.status >= 200 && o.status < 300) {
    server_answered();
    health_->counters().puts.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (is_server_failure(o.status)) {
    server_failed("PUT answered HTTP " + std::to_string(o.status));
    return;
  }
  // 405 (no WebDAV), 409 (no parent collection), 413 (too large): up, but it will not take it.
  health_->put_refused("HTTP " + std::to_string(o.status) + " for " + url,
                       "the entry is not cached remotely; does the server take PUT there? repeats "
                       "are logged at debug level");
}

bool http_program_cache::erase(cache_key_ref key) {
  health_->check_open();
  if (options_.read_only) {
    writes_skipped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  std::unique_ptr<connection> conn = acquire();
  if (!conn) return false;
  const std::string url = object_url(key);
  request req;
  CURL* h = conn->handle.get();
  detail::curl().easy_setopt(h, CURLOPT_URL, url.c_str());
  detail::curl().easy_setopt(h, CURLOPT_HTTPGET, 1L);
  detail::curl().easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
  detail::curl().easy_setopt(h, CURLOPT_HTTPHEADER, headers_.get());
  const outcome o = perform(*conn, req);
  detail::curl().easy_setopt(h, CURLOPT_CUSTOMREQUEST, nullptr);
  if (!o.transport_ok) {
    conn.reset();
    server_failed("DELETE: " + o.error);
    return false;
  }
  release(std::move(conn));
  if (o.status >= 200 && o.status < 300) return true;
  if (o.status != 404) {
    log(log_level::debug, "http cache " + redacted_url_ + ": DELETE " + url + " answered HTTP " +
                              std::to_string(o.status) + " (the server may not allow deletion)");
  }
  return false;
}

std::size_t http_program_cache::size() {
  health_->check_open();
  cannot_list(redacted_url_, "counting entries");
}

std::uint64_t http_program_cache::size_bytes() {
  health_->check_open();
  cannot_list(redacted_url_, "measuring the cache");
}

void http_program_cache::clear() {
  health_->check_open();
  cannot_list(redacted_url_, "clear");
}

std::vector<cache_entry_info> http_program_cache::list() {
  health_->check_open();
  cannot_list(redacted_url_, "list");
}

cache_verify_report http_program_cache::verify(bool /*remove_bad*/) {
  health_->check_open();
  cannot_list(redacted_url_, "verify");
}

std::size_t http_program_cache::trim(std::uint64_t /*max_size_bytes*/) {
  health_->check_open();
  cannot_list(redacted_url_, "trim");
}

cache_stats http_program_cache::stats() const {
  return health_->stats();
}

void http_program_cache::record_statistics_in(std::shared_ptr<cache_statistics> store,
                                              cache_tier tier) {
  health_->record_statistics_in(std::move(store), tier);
}

std::string http_program_cache::description() const {
  std::string out = "http " + base_ + " layout " + layout_name(options_.layout);
  if (options_.read_only) out += " (read-only)";
  return out;
}

void http_program_cache::close() noexcept {
  std::lock_guard lock(mutex_);
  health_->close();
  idle_.clear();
}

}  // namespace cucore
