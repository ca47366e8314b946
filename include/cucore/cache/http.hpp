// A program cache on an HTTP server: a remote tier a fleet shares through any server that answers
// GET and takes PUT (nginx or Apache with WebDAV, an object-store gateway, bazel-remote), speaking
// ccache's HTTP remote-storage convention. Usually behind a local cache (tiered.hpp).
// docs/cache-http.md has the set-up and the security model.
//
// Each entry is one object at BASE/<layout path of the 64 hex digits of SHA-256(key)>: "subdirs"
// (the default, BASE/ab/cdef...), "flat" (BASE/abcdef...) or "bazel" (BASE/ac/abcdef...). The
// object is the versioned, checksummed entry format of the other backends
// (src/cache/entry_format.hpp) with the full key echoed in it, and every get verifies all of it: a
// damaged, truncated or foreign object, or one stored for another key, is a miss (counted in
// stats().corrupt_dropped), never a wrong entry. It is not deleted: the put after the compile
// replaces it.
//
// Failures degrade, they never reach the compile: a get that cannot reach the server, times out,
// or gets anything but 200 or 404 is a miss; a put that fails is dropped. All of them count in
// stats().errors. After a failure of the server (no connection, a timeout, 401/403/407, 408, 429,
// 5xx) calls return at once until a backoff ends (retry_initial, doubling up to retry_max): a down
// or hung server costs one timeout per backoff period, not one per call. The first failure of an
// outage is a warning, the rest are at debug level, the recovery is at info level.
//
// Credentials (a password in the URL's user information, a bearer token, a header's value) are
// never logged: descriptions and messages show them as "***".
//
// HTTP cannot list a server's objects: size, size_bytes, list, verify, trim and clear throw
// cucore::error saying so (maintain the cache on the server). No single-flight claims across
// machines (try_claim is unsupported): each machine coalesces its own processes only.
//
// Thread safety: every method may be called from any number of threads; each call takes an idle
// connection (a libcurl handle kept alive between calls) or opens one. close() must not race with
// other calls. A cache object used in a child after fork() opens its own connections.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/statistics.hpp"

struct curl_slist;  // libcurl's header list

namespace cucore {
namespace detail {
class remote_health;  // src/cache/remote_health.hpp
}  // namespace detail

// Where an object lives under the URL's path (ccache's layouts).
enum class http_layout {
  subdirs,  // BASE/ab/cdef... (the first two hex digits as a directory)
  flat,     // BASE/abcdef...
  bazel,    // BASE/ac/abcdef... (bazel-remote's action cache)
};

// What an http(s) URL says: SCHEME://[USER:PASSWORD@]HOST[:PORT][/PATH][|ATTRIBUTE[=VALUE]]...
// Attributes (ccache's): layout=subdirs|flat|bazel, read-only[=true|false],
// connect-timeout=MS, operation-timeout=MS, bearer-token=TOKEN, header=NAME=VALUE (repeatable),
// keep-alive=true|false. User and password may be percent-encoded (%40 for '@'), and so may
// attribute values (%7C for '|').
struct http_url {
  std::string scheme;  // "http" or "https"
  std::string host;    // an IPv6 address keeps its brackets
  int port = 0;        // 0: the scheme's
  std::string path;    // begins and ends with '/'
  std::string user;
  std::string password;  // basic authentication when user or password is set
  std::optional<http_layout> layout;
  std::optional<bool> read_only;
  std::optional<std::chrono::milliseconds> connect_timeout;
  std::optional<std::chrono::milliseconds> operation_timeout;
  std::optional<std::string> bearer_token;
  std::vector<std::pair<std::string, std::string>> headers;
  std::optional<bool> keep_alive;
  // SCHEME://HOST[:PORT]/PATH/: what object paths are appended to (no credentials).
  std::string base() const;
};

// Parses an http(s) URL with its attributes. Throws invalid_argument naming the URL (its
// credentials replaced by "***") and what is wrong.
http_url parse_http_url(std::string_view url);
// The URL with its password, bearer token and header values replaced by "***".
std::string redact_http_url(std::string_view url);

struct http_cache_options {
  // Where the objects are, with attributes: see http_url. Attributes given in the URL override
  // the fields below.
  std::string url = "http://127.0.0.1:8080/cucore";
  http_layout layout = http_layout::subdirs;
  // Connecting's limit, and the whole request's (connecting included): a request that takes
  // longer is a miss (or a dropped put) and starts a backoff.
  std::chrono::milliseconds connect_timeout{500};
  std::chrono::milliseconds operation_timeout{2000};
  // Never writes: put and erase send nothing (counted in writes_skipped()). For consumers of a
  // cache that CI fills.
  bool read_only = false;
  // Sent as "Authorization: Bearer TOKEN" (a URL with a user or password sends basic
  // authentication instead). Unset: the URL's bearer-token attribute, else
  // $CUCORE_HTTP_BEARER_TOKEN (read at construction), else none.
  std::optional<std::string> bearer_token;
  // The largest entry stored or read: a bigger put is skipped, a bigger object a miss.
  std::uint64_t max_entry_bytes = std::uint64_t{512} << 20;
  // Backoff after a failure: the first retry after retry_initial, then doubling up to retry_max.
  std::chrono::milliseconds retry_initial{1000};
  std::chrono::milliseconds retry_max{30000};
};

class http_program_cache final : public program_cache {
 public:
  // Parses the URL and the options (invalid_argument for a malformed URL, zero or negative
  // timeouts, basic and bearer authentication together). Does not connect: the first call does.
  explicit http_program_cache(http_cache_options options);
  ~http_program_cache() override;
  http_program_cache(const http_program_cache&) = delete;
  http_program_cache& operator=(const http_program_cache&) = delete;

  std::optional<object_code> get(cache_key_ref key) override;
  void put(cache_key_ref key, const object_code& code) override;
  // DELETE; false if there was none, or the server refuses deletion (405, 403: logged at debug).
  bool erase(cache_key_ref key) override;
  // HTTP cannot list objects: these throw cucore::error.
  std::size_t size() override;
  std::uint64_t size_bytes() override;
  void clear() override;
  std::vector<cache_entry_info> list() override;
  cache_verify_report verify(bool remove_bad) override;
  std::size_t trim(std::uint64_t max_size_bytes) override;
  cache_stats stats() const override;
  // The server keeps no statistics; a tiered cache counts this tier into its local tier's.
  void record_statistics_in(std::shared_ptr<cache_statistics> store, cache_tier tier) override;
  // "http http://host:port/path/ layout subdirs" (credentials redacted), "(read-only)" after.
  std::string description() const override;
  // The read-only attribute or option: a tiered cache then never puts into or erases from it.
  bool read_only() const noexcept override { return options_.read_only; }
  // Drops the connections; later calls throw cucore::error, except stats() and description().
  void close() noexcept override;

  const http_cache_options& options() const noexcept { return options_; }
  // The URL with its credentials redacted.
  const std::string& url() const noexcept { return redacted_url_; }
  // Where `key`'s object is: base() then the layout's path.
  std::string object_url(cache_key_ref key) const;
  // Puts and erases a read-only cache did not send, and puts over max_entry_bytes.
  std::uint64_t writes_skipped() const noexcept {
    return writes_skipped_.load(std::memory_order_relaxed);
  }

 private:
  struct connection;
  struct request;
  struct slist_deleter {
    void operator()(curl_slist* list) const noexcept;
  };
  // What one request did: transport failure (with why), or an HTTP status.
  struct outcome {
    bool transport_ok = false;
    long status = 0;
    std::string error;
  };

  // An idle connection, or a new one; nullptr while the backoff runs (counted as an error).
  std::unique_ptr<connection> acquire();
  void release(std::unique_ptr<connection> conn) noexcept;
  outcome perform(connection& conn, request& req);
  // A failure of the server: counted, logged (warning once per outage), backoff started.
  void server_failed(const std::string& why);
  // A request that reached the server and was answered: ends an outage.
  void server_answered();

  http_cache_options options_;
  http_url url_;
  std::string redacted_url_;
  std::string base_;
  // Every request's headers (authorization, the URL's, no "Expect: 100-continue"); a put's adds
  // its content type.
  std::unique_ptr<curl_slist, slist_deleter> headers_;
  std::unique_ptr<curl_slist, slist_deleter> put_headers_;
  std::atomic<std::uint64_t> writes_skipped_{0};
  // Counters, backoff and outage logging (src/cache/remote_health.hpp, shared with Redis).
  std::unique_ptr<detail::remote_health> health_;

  std::mutex mutex_;  // guards idle_
  std::vector<std::unique_ptr<connection>> idle_;
};

}  // namespace cucore
