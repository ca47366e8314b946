// A program cache on a Redis server: the remote tier a fleet of machines shares (usually behind a
// local cache, see tiered.hpp). docs/cache-remote.md has the set-up and the security model.
//
// Each entry is one Redis string under "<prefix><64 hex>", the hex being the SHA-256 of the key
// (so a key of any length or bytes makes a short, printable Redis key). The value is the
// versioned, checksummed entry format of the persistent backends (src/cache/entry_format.hpp),
// with the full key echoed in it. Every get verifies all of it: a damaged, truncated or foreign
// value, one stored for another key, or a key of another Redis type (a list, a hash) is a miss,
// never a wrong entry, and is deleted when the cache is writable. The deletion is guarded by a
// server-side script that deletes only if the value is still the one read, so an entry a peer
// replaced in the meantime survives.
//
// Failures degrade, they never reach the compile: a get that cannot reach the server, times out,
// or gets an error reply is a miss; a put that fails (server down, maxmemory with noeviction, a
// read-only replica or ACL user) is dropped. All of them count in stats().errors. A connection
// that failed is dropped, and the next attempt waits out a backoff (retry_initial, doubling up to
// retry_max) during which calls return at once: a down server costs one connect timeout per
// backoff period, not one per call. The first failure of an outage is logged as a warning, the
// rest at debug level, and the reconnection at info level.
//
// Maintenance (size, size_bytes, list, verify, trim, clear) scans the keys under the prefix with
// SCAN (entries only: single-flight claim keys, "<prefix>claim:<hex>", are skipped); it is for
// tools, not hot paths, and throws cucore::error when the server cannot be reached (a tool must not
// report an unreachable cache as empty). It ignores the backoff.
//
// Thread safety: every method may be called from any number of threads (one connection per cache
// object, serialised by a mutex); close() must not race with other calls. Many processes and
// machines may share one server and prefix.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/statistics.hpp"

namespace cucore {
namespace detail {
class remote_health;  // src/cache/remote_health.hpp
}  // namespace detail

// What a redis:// URL says: redis://[[user]:password@]host[:port][/db][?option=value&...].
// Options in the query: prefix=TEXT, ttl=SECONDS, read_only=0|1, connect_timeout_ms=N,
// command_timeout_ms=N. User and password may be percent-encoded (%40 for '@').
struct redis_url {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;      // empty: AUTH with the password only (the "default" user)
  std::string password;  // empty: no AUTH
  std::optional<std::string> prefix;
  std::optional<std::chrono::seconds> ttl;
  std::optional<bool> read_only;
  std::optional<std::chrono::milliseconds> connect_timeout;
  std::optional<std::chrono::milliseconds> command_timeout;
};

// Parses a redis:// URL. Throws invalid_argument naming the URL (its password replaced by "***")
// and what is wrong.
redis_url parse_redis_url(std::string_view url);
// The URL with its password replaced by "***", for messages and logs.
std::string redact_redis_url(std::string_view url);

struct redis_cache_options {
  // Where the server is: see redis_url. Options given in the URL's query override the fields
  // below.
  std::string url = "redis://127.0.0.1:6379/0";
  // Namespace of this cache's keys on the server: caches with different prefixes never see each
  // other's entries. Must not be empty.
  std::string key_prefix = "cucore:v1:";
  std::chrono::milliseconds connect_timeout{500};
  // Each command's limit; a command that takes longer drops the connection (a miss or a dropped
  // put) and starts a backoff.
  std::chrono::milliseconds command_timeout{500};
  // Expiry of entries, counted from their put; unset: entries stay until evicted by the server's
  // maxmemory policy (allkeys-lru is the one to use) or removed.
  std::optional<std::chrono::seconds> ttl{};
  // Never writes: put is a no-op, damaged values are left in place, erase/clear/trim do nothing.
  // For consumers that must not be able to plant entries (pair it with a read-only ACL user).
  bool read_only = false;
  // Backoff after a failure: the first retry after retry_initial, then doubling up to retry_max.
  std::chrono::milliseconds retry_initial{1000};
  std::chrono::milliseconds retry_max{30000};
};

class redis_program_cache final : public program_cache {
 public:
  // Parses the URL and the options (invalid_argument for a malformed URL, an empty prefix, zero or
  // negative timeouts or TTL). Does not connect: the first call does, so a cache whose server is
  // down can be constructed (and misses).
  explicit redis_program_cache(redis_cache_options options);
  ~redis_program_cache() override;
  redis_program_cache(const redis_program_cache&) = delete;
  redis_program_cache& operator=(const redis_program_cache&) = delete;

  std::optional<object_code> get(cache_key_ref key) override;
  void put(cache_key_ref key, const object_code& code) override;
  bool erase(cache_key_ref key) override;
  std::size_t size() override;
  std::uint64_t size_bytes() override;
  void clear() override;
  cache_stats stats() const override;
  // Redis keeps no statistics of its own; a tiered cache counts this tier into its local tier's.
  void record_statistics_in(std::shared_ptr<cache_statistics> store, cache_tier tier) override;
  // last_used is the server's idle time of the key (OBJECT IDLETIME) where the server reports it.
  std::vector<cache_entry_info> list() override;
  cache_verify_report verify(bool remove_bad) override;
  // Removes the entries idle longest first until the entries total at most max_size_bytes.
  std::size_t trim(std::uint64_t max_size_bytes) override;
  // "redis redis://host:port/db prefix P" (no password).
  std::string description() const override;
  bool read_only() const noexcept override { return options_.read_only; }
  // Drops the connection; later calls throw cucore::error, except stats() and description().
  void close() noexcept override;
  // Single-flight across machines: SET <prefix>claim:<hex> <random token> NX PX <lease>; renewed
  // every third of the lease while the claim lives (a thread of the claim's), so that a live
  // holder keeps it however long it compiles and a dead one's expires within a lease; released by
  // a script that deletes it only while it still holds this claim's token (a claim that expired
  // and was taken over is not released by the first holder). Unsupported while the server cannot
  // be reached (compile without a claim) and in read_only mode. A claim is released by the
  // process that took it (not in a child forked while it was held: the renewing thread is not
  // there).
  claim_result try_claim(cache_key_ref key, std::chrono::milliseconds lease) override;
  // <prefix>claim:<hex>:abandoned, a counter an abandoned claim's release (or a refused put)
  // increments, living 10 minutes; 0 while it is absent or the server cannot be reached.
  std::uint64_t claim_abandonments(cache_key_ref key) override;
  // A connection of its own, subscribed to the channel <prefix>claim:<hex>, on which a claim's
  // release publishes; nullptr where it cannot subscribe (the waiter polls). A holder that dies
  // publishes nothing: its waiters take over when the lease ends, found by polling.
  std::unique_ptr<claim_watch> watch_claim(cache_key_ref key) override;

  const redis_cache_options& options() const noexcept { return options_; }
  // The URL with the password redacted.
  const std::string& url() const noexcept { return redacted_url_; }
  // The Redis key an entry is stored under: the prefix, then the SHA-256 of the key in hex.
  std::string redis_key(cache_key_ref key) const;

 private:
  struct connection;
  struct reply_deleter {
    void operator()(void* reply) const noexcept;
  };
  using reply_ptr = std::unique_ptr<void, reply_deleter>;

  // Connects if needed; false if the server cannot be reached (or, with respect_backoff, the
  // backoff is running). Called with mutex_ held.
  bool ensure_connected(bool respect_backoff);
  // One command (binary-safe arguments); nullptr when the connection failed (then dropped and a
  // backoff started). Called with mutex_ held.
  reply_ptr command(std::initializer_list<std::string_view> args);
  reply_ptr command(const std::vector<std::string_view>& args);
  void connection_failed(const std::string& why);
  // Maintenance: connects ignoring the backoff, throws cucore::error if that fails.
  void connect_for_maintenance();
  // Every key under the prefix (SCAN). Called with mutex_ held; throws if the connection fails.
  std::vector<std::string> scan_keys();
  // Deletes `rkey` if its value is still `value` (or, with no value, if it is not a string).
  void delete_guarded(const std::string& rkey, const std::string* value);
  // Deletes a claim key if it still holds `token` (the release of a redis claim), publishing the
  // release; `abandoned` counts an abandonment first.
  void release_claim(const std::string& claim_key, const std::string& token,
                     bool abandoned) noexcept;
  // Sets a claim's expiry to `lease` from now if it still holds `token` (a live holder's renewal).
  void renew_claim(const std::string& claim_key, const std::string& token,
                   std::chrono::milliseconds lease) noexcept;
  // <prefix>claim:<64 hex>: the claim's key, and its channel.
  std::string claim_key(cache_key_ref key) const;
  friend class redis_claim;

  redis_cache_options options_;
  redis_url url_;
  std::string redacted_url_;
  // Counters, backoff and outage logging (src/cache/remote_health.hpp, shared with HTTP).
  std::unique_ptr<detail::remote_health> health_;

  std::mutex mutex_;  // guards conn_
  std::unique_ptr<connection> conn_;
};

}  // namespace cucore
