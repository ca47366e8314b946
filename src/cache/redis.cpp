#include "cucore/cache/redis.hpp"

#include <hiredis/hiredis.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "cache/entry_format.hpp"
#include "cache/percent_decoding.hpp"
#include "cache/posix_file.hpp"
#include "cache/redis_internal.hpp"
#include "cache/remote_health.hpp"
#include "common/sha256.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"

namespace cucore {

// The helpers both Redis files share (cache/redis_internal.hpp).
using namespace detail::redis;

namespace {

constexpr std::string_view kScheme = "redis://";
constexpr std::size_t kScanCount = 1000;            // keys asked for per SCAN round trip
constexpr std::size_t kReaderBufferKeep = 4 << 20;  // see ensure_connected

// ---------------------------------------------------------------------------------------------
// URLs

// The URL's password replaced by "***" (or, for userinfo without ':', all of it, which is
// likely a password someone forgot the ':' in front of).
std::string redact(std::string_view url) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return std::string(url);
  const std::size_t start = scheme_end + 3;
  const std::size_t query = std::min(url.find('?', start), url.size());
  const std::size_t at = url.substr(0, query).rfind('@');
  if (at == std::string_view::npos || at < start) return std::string(url);
  const std::string_view userinfo = url.substr(start, at - start);
  const std::size_t colon = userinfo.find(':');
  const std::string user =
      colon == std::string_view::npos ? "" : std::string(userinfo.substr(0, colon));
  return std::string(url.substr(0, start)) + user + (colon == std::string_view::npos ? "" : ":") +
         "***" + std::string(url.substr(at));
}

[[noreturn]] void bad_url(std::string_view url, const std::string& what) {
  throw invalid_argument("redis cache URL \"" + redact(url) + "\": " + what +
                         " (expected redis://[[user]:password@]host[:port][/db][?option=value&...];"
                         " see docs/cache-remote.md)");
}

std::string percent_decode(std::string_view url, std::string_view text, std::string_view part) {
  return detail::percent_decode(text, part, [&](const std::string& what) { bad_url(url, what); });
}

// ---------------------------------------------------------------------------------------------
// Keys

// `text` with the glob characters SCAN's MATCH knows escaped.
std::string glob_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// Deletes KEYS[1] only if it still holds ARGV[1]: a peer's fresh entry survives.
constexpr std::string_view kDeleteIfValue =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
// Deletes KEYS[1] only if it is (still) not a string.
constexpr std::string_view kDeleteIfNotString =
    "local t = redis.call('TYPE', KEYS[1]).ok "
    "if t ~= 'string' and t ~= 'none' then return redis.call('DEL', KEYS[1]) end return 0";

}  // namespace

// ---------------------------------------------------------------------------------------------
// URL parsing

std::string redact_redis_url(std::string_view url) {
  return redact(url);
}

redis_url parse_redis_url(std::string_view url) {
  if (url.starts_with("rediss://")) {
    bad_url(url,
            "TLS (rediss://) is not supported: reach the server over a private network or a"
            " TLS tunnel, and use redis://");
  }
  if (!url.starts_with(kScheme)) bad_url(url, "it does not start with redis://");
  redis_url out;
  std::string_view rest = url.substr(kScheme.size());
  std::string_view query;
  if (const auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  // The userinfo ends at the last '@', so a password may hold '@', ':' and '/' unencoded.
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    std::tie(out.user, out.password) = detail::decode_userinfo(
        rest.substr(0, at),
        "the part before '@' has no ':': write redis://:PASSWORD@host for a password alone, or "
        "redis://USER:PASSWORD@host",
        [&](const std::string& what) { bad_url(url, what); });
    rest = rest.substr(at + 1);
  }
  std::string_view hostport = rest;
  std::string_view path;
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    hostport = rest.substr(0, slash);
    path = rest.substr(slash + 1);
  }
  const auto [host, port_text] =
      detail::split_host_port(hostport, [&](const std::string& what) { bad_url(url, what); });
  // An IPv6 address without its brackets.
  out.host = std::string(host.starts_with('[') ? host.substr(1, host.size() - 2) : host);
  for (char c : out.host) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '#' || c == '@') {
      bad_url(url, "the host \"" + out.host + "\" is not a host name or address");
    }
  }
  if (!port_text.empty()) {
    const auto port = parse_integer(port_text, 1, 65535);
    if (!port) bad_url(url, "the port \"" + std::string(port_text) + "\" is not a number 1-65535");
    out.port = static_cast<int>(*port);
  }
  if (!path.empty()) {
    const auto db = parse_integer(path, 0, std::numeric_limits<int>::max());
    if (!db) {
      bad_url(url,
              "the database \"" + std::string(path) + "\" is not a number (redis://host:port/0)");
    }
    out.db = static_cast<int>(*db);
  }
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    if (eq == std::string_view::npos)
      bad_url(url, "option \"" + std::string(pair) + "\" has no '=VALUE'");
    const std::string_view name = pair.substr(0, eq);
    const std::string value =
        percent_decode(url, pair.substr(eq + 1), "option " + std::string(name));
    auto positive = [&](long long max) {
      const auto v = parse_integer(value, 1, max);
      if (!v) {
        bad_url(url,
                "option " + std::string(name) + "=\"" + value + "\" is not a positive integer");
      }
      return *v;
    };
    if (name == "prefix") {
      if (value.empty())
        bad_url(url, "option prefix= is empty: give the key namespace, e.g. prefix=cucore:");
      out.prefix = value;
    } else if (name == "ttl") {
      out.ttl = std::chrono::seconds(positive(std::numeric_limits<int>::max()));
    } else if (name == "read_only" || name == "readonly") {
      if (value == "1" || value == "true" || value == "yes") {
        out.read_only = true;
      } else if (value == "0" || value == "false" || value == "no") {
        out.read_only = false;
      } else {
        bad_url(url,
                "option " + std::string(name) + "=\"" + value + "\" is not 0, 1, true or false");
      }
    } else if (name == "connect_timeout_ms") {
      out.connect_timeout = std::chrono::milliseconds(positive(3'600'000));
    } else if (name == "command_timeout_ms") {
      out.command_timeout = std::chrono::milliseconds(positive(3'600'000));
    } else {
      bad_url(url, "unknown option \"" + std::string(name) +
                       "\": use prefix, ttl, read_only, connect_timeout_ms or command_timeout_ms");
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The connection

struct redis_program_cache::connection {
  struct context_deleter {
    void operator()(redisContext* c) const noexcept { redisFree(c); }
  };
  std::unique_ptr<redisContext, context_deleter> context;
  pid_t pid = 0;  // the process that connected: a forked child must not share the socket
};

void redis_program_cache::reply_deleter::operator()(void* reply) const noexcept {
  freeReplyObject(reply);
}

redis_program_cache::redis_program_cache(redis_cache_options options)
    : options_(std::move(options)),
      url_(parse_redis_url(options_.url)),
      redacted_url_(redact(options_.url)),
      health_(std::make_unique<detail::remote_health>("redis cache " + redacted_url_,
                                                      options_.retry_initial, options_.retry_max)) {
  if (url_.prefix) options_.key_prefix = *url_.prefix;
  if (url_.ttl) options_.ttl = url_.ttl;
  if (url_.read_only) options_.read_only = *url_.read_only;
  if (url_.connect_timeout) options_.connect_timeout = *url_.connect_timeout;
  if (url_.command_timeout) options_.command_timeout = *url_.command_timeout;
  const std::string who = health_->who() + ": ";
  if (options_.key_prefix.empty()) {
    throw invalid_argument(who + "key_prefix is empty: give a namespace such as \"cucore:v1:\"");
  }
  if (options_.connect_timeout.count() <= 0 || options_.command_timeout.count() <= 0) {
    throw invalid_argument(who + "connect_timeout and command_timeout must be positive");
  }
  if (options_.ttl && options_.ttl->count() <= 0) {
    throw invalid_argument(who + "ttl must be positive (leave it unset for no expiry)");
  }
  if (options_.retry_initial.count() <= 0 || options_.retry_max < options_.retry_initial) {
    throw invalid_argument(who + "retry_initial must be positive and retry_max at least as long");
  }
}

redis_program_cache::~redis_program_cache() = default;

std::string redis_program_cache::redis_key(cache_key_ref key) const {
  const auto hex = detail::sha256_hex(key.bytes());
  return options_.key_prefix + std::string(hex.data(), hex.size());
}

void redis_program_cache::connection_failed(const std::string& why) {
  conn_.reset();
  health_->failed(why);
}

bool redis_program_cache::ensure_connected(bool respect_backoff) {
  if (conn_ && conn_->pid != ::getpid()) conn_.reset();  // inherited through fork()
  if (conn_) return true;
  if (respect_backoff && health_->backing_off()) return false;
  auto next = std::make_unique<connection>();
  next->pid = ::getpid();
  next->context.reset(
      redisConnectWithTimeout(url_.host.c_str(), url_.port, to_timeval(options_.connect_timeout)));
  if (!next->context || next->context->err) {
    connection_failed(next->context ? std::string(next->context->errstr)
                                    : std::string("out of memory"));
    return false;
  }
  if (redisSetTimeout(next->context.get(), to_timeval(options_.command_timeout)) != REDIS_OK) {
    connection_failed("cannot set the command timeout");
    return false;
  }
  redisEnableKeepAlive(next->context.get());
  // hiredis frees its read buffer after each reply with more than 16 KiB spare, so every large
  // hit regrows it and glibc hands the pages back and faults them in again (5x a raw GET at
  // 256 KiB). Keeping up to kReaderBufferKeep spare makes large hits cost what a raw GET costs.
  next->context->reader->maxbuf = kReaderBufferKeep;
  conn_ = std::move(next);
  // AUTH and SELECT: an error reply here means a wrong password, a missing ACL permission or a
  // database the server does not have: the connection is no use.
  auto setup = [&](std::vector<std::string_view> args, const char* what) {
    reply_ptr r = command(args);
    if (!r) return false;  // already dropped and logged
    if (reply_of(r.get())->type == REDIS_REPLY_ERROR) {
      connection_failed(std::string(what) + " refused: " + std::string(as_view(reply_of(r.get()))));
      return false;
    }
    return true;
  };
  if (!url_.user.empty() || !url_.password.empty()) {
    std::vector<std::string_view> args = {"AUTH"};
    if (!url_.user.empty()) args.push_back(url_.user);
    args.push_back(url_.password);
    if (!setup(args, "AUTH")) return false;
  }
  if (url_.db != 0) {
    const std::string db = std::to_string(url_.db);
    if (!setup({"SELECT", db}, "SELECT")) return false;
  }
  health_->reachable();
  return true;
}

redis_program_cache::reply_ptr redis_program_cache::command(
    std::initializer_list<std::string_view> args) {
  return command(std::vector<std::string_view>(args));
}

redis_program_cache::reply_ptr redis_program_cache::command(
    const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  argv.reserve(args.size());
  lengths.reserve(args.size());
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  sigpipe_guard guard;
  reply_ptr reply(redisCommandArgv(conn_->context.get(), static_cast<int>(argv.size()), argv.data(),
                                   lengths.data()));
  if (!reply) {
    // An I/O error, a timeout or a protocol error: the connection's state is unknown (a late
    // reply could be read as the next command's), so it goes.
    const int err = conn_->context->err;
    std::string why = conn_->context->errstr;
    if (err == REDIS_ERR_IO && (why.find("temporarily unavailable") != std::string::npos ||
                                why.find("timed out") != std::string::npos)) {
      why = "no reply within " + std::to_string(options_.command_timeout.count()) + " ms";
    }
    connection_failed(std::string(args.begin()->data(), args.begin()->size()) + ": " + why);
    return nullptr;
  }
  health_->answered();
  return reply;
}

void redis_program_cache::connect_for_maintenance() {
  if (!ensure_connected(/*respect_backoff=*/false)) {
    throw error("redis cache " + redacted_url_ +
                ": cannot reach the server (see the warning above); is it running, and is the "
                "URL right?");
  }
}

void redis_program_cache::delete_guarded(const std::string& rkey, const std::string* value) {
  if (options_.read_only) return;
  std::lock_guard lock(mutex_);
  if (!ensure_connected(true)) return;
  reply_ptr r = value ? command({"EVAL", kDeleteIfValue, "1", rkey, *value})
                      : command({"EVAL", kDeleteIfNotString, "1", rkey});
  if (r && reply_of(r.get())->type == REDIS_REPLY_ERROR) {
    health_->note_error("could not delete a damaged value: " +
                        std::string(as_view(reply_of(r.get()))));
  }
}

// ---------------------------------------------------------------------------------------------
// The cache

std::optional<object_code> redis_program_cache::get(cache_key_ref key) {
  health_->check_open();
  const std::string rkey = redis_key(key);
  auto miss = [this] {
    health_->counters().misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  };
  reply_ptr r;
  {
    std::lock_guard lock(mutex_);
    if (!ensure_connected(true)) return miss();
    r = command({"GET", rkey});
  }
  if (!r) return miss();
  const redisReply* reply = reply_of(r.get());
  if (reply->type == REDIS_REPLY_NIL) return miss();
  if (reply->type == REDIS_REPLY_ERROR) {
    if (as_view(reply).starts_with("WRONGTYPE")) {
      // Not a string: not ours. Nothing is returned, and the key goes (if it still is not one).
      health_->counters().corrupt_dropped.fetch_add(1, std::memory_order_relaxed);
      log(log_level::debug, health_->who() + ": " + rkey + " is not a string");
      r.reset();
      delete_guarded(rkey, nullptr);
    } else {
      health_->note_error("GET " + rkey + ": " + std::string(as_view(reply)));
    }
    return miss();
  }
  if (reply->type != REDIS_REPLY_STRING) {
    health_->note_error("GET " + rkey + ": unexpected reply type " + std::to_string(reply->type));
    return miss();
  }
  const auto bytes = as_bytes(reply);
  detail::decoded_entry decoded =
      detail::decode_entry(std::vector<std::byte>(bytes.begin(), bytes.end()), key.bytes());
  if (decoded.status == detail::entry_status::ok) {
    health_->counters().hits.fetch_add(1, std::memory_order_relaxed);
    return std::move(decoded.code);
  }
  health_->counters().corrupt_dropped.fetch_add(1, std::memory_order_relaxed);
  log(log_level::debug, health_->who() + ": dropping " + rkey + " (" +
                            std::string(detail::to_string(decoded.status)) + ")");
  const std::string value(as_view(reply));
  r.reset();
  delete_guarded(rkey, &value);
  return miss();
}

void redis_program_cache::put(cache_key_ref key, const object_code& code) {
  health_->check_open();
  if (options_.read_only) return;
  const std::vector<std::byte> entry = detail::encode_entry(key.bytes(), code);
  const std::string_view value(reinterpret_cast<const char*>(entry.data()), entry.size());
  const std::string rkey = redis_key(key);
  std::vector<std::string_view> args = {"SET", rkey, value};
  std::string ttl;
  if (options_.ttl) {
    ttl = std::to_string(options_.ttl->count());
    args.push_back("EX");
    args.push_back(ttl);
  }
  std::lock_guard lock(mutex_);
  if (!ensure_connected(true)) return;
  reply_ptr r = command(args);
  if (!r) return;
  const redisReply* reply = reply_of(r.get());
  if (reply->type == REDIS_REPLY_STATUS) {
    health_->counters().puts.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // OOM (maxmemory with noeviction), READONLY (a replica), NOPERM (ACL): the server is up but
  // will not take it. Said once at warning level: it will not fix itself.
  const std::string why =
      reply->type == REDIS_REPLY_ERROR ? std::string(as_view(reply)) : "unexpected reply to SET";
  // A waiter that takes the claim over finds no entry: it should compile beside the others, not
  // after them (claim_abandonments). Best effort: a server refusing puts may refuse this too.
  r.reset();
  (void)command(
      {"EVAL", kCountAbandonment, "1", claim_key(key) + ":abandoned", kAbandonmentLifeMs});
  health_->put_refused(why, "the entry is not cached; repeats are logged at debug level");
}

bool redis_program_cache::erase(cache_key_ref key) {
  health_->check_open();
  if (options_.read_only) return false;
  const std::string rkey = redis_key(key);
  std::lock_guard lock(mutex_);
  if (!ensure_connected(true)) return false;
  reply_ptr r = command({"DEL", rkey});
  return r && reply_of(r.get())->type == REDIS_REPLY_INTEGER && reply_of(r.get())->integer > 0;
}

std::vector<std::string> redis_program_cache::scan_keys() {
  connect_for_maintenance();
  const std::string pattern = glob_escape(options_.key_prefix) + "*";
  const std::string count = std::to_string(kScanCount);
  std::vector<std::string> keys;
  std::string cursor = "0";
  do {
    reply_ptr r = command({"SCAN", cursor, "MATCH", pattern, "COUNT", count});
    if (!r) throw error(health_->who() + ": the connection failed during SCAN");
    const redisReply* reply = reply_of(r.get());
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
        reply->element[0]->type != REDIS_REPLY_STRING ||
        reply->element[1]->type != REDIS_REPLY_ARRAY) {
      throw error(health_->who() + ": unexpected reply to SCAN" +
                  (reply->type == REDIS_REPLY_ERROR ? ": " + std::string(as_view(reply)) : ""));
    }
    cursor = std::string(as_view(reply->element[0]));
    for (std::size_t i = 0; i < reply->element[1]->elements; ++i) {
      keys.emplace_back(as_view(reply->element[1]->element[i]));
    }
  } while (cursor != "0");
  // Entries only: single-flight claims (<prefix>claim:<hex>) share the prefix.
  const std::size_t entry_key_size = options_.key_prefix.size() + 64;
  std::erase_if(keys, [&](const std::string& k) { return k.size() != entry_key_size; });
  // SCAN may return a key more than once.
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

std::size_t redis_program_cache::size() {
  health_->check_open();
  std::lock_guard lock(mutex_);
  return scan_keys().size();
}

std::uint64_t redis_program_cache::size_bytes() {
  health_->check_open();
  std::lock_guard lock(mutex_);
  std::uint64_t total = 0;
  for (const std::string& k : scan_keys()) {
    reply_ptr r = command({"STRLEN", k});
    if (!r) throw error(health_->who() + ": the connection failed during STRLEN");
    if (reply_of(r.get())->type == REDIS_REPLY_INTEGER) {
      total += static_cast<std::uint64_t>(reply_of(r.get())->integer);
    }
  }
  return total;
}

void redis_program_cache::clear() {
  health_->check_open();
  if (options_.read_only) {
    throw invalid_argument(health_->who() + " is read-only: clear() refused");
  }
  std::lock_guard lock(mutex_);
  for (const std::string& k : scan_keys()) {
    reply_ptr r = command({"UNLINK", k});
    if (!r) throw error(health_->who() + ": the connection failed during clear");
  }
}

void redis_program_cache::record_statistics_in(std::shared_ptr<cache_statistics> store,
                                               cache_tier tier) {
  health_->record_statistics_in(std::move(store), tier);
}

cache_stats redis_program_cache::stats() const {
  return health_->stats();
}

namespace {
// A value verify() found damaged: its key, and its bytes if it is a string (for the guarded
// deletion).
struct damaged_value {
  std::string key;
  std::optional<std::string> value;
};
}  // namespace

std::vector<cache_entry_info> redis_program_cache::list() {
  health_->check_open();
  std::vector<cache_entry_info> out;
  std::lock_guard lock(mutex_);
  const auto now = std::chrono::system_clock::now();
  for (const std::string& k : scan_keys()) {
    reply_ptr r = command({"GET", k});
    if (!r) throw error(health_->who() + ": the connection failed during list");
    if (reply_of(r.get())->type != REDIS_REPLY_STRING) continue;
    const auto bytes = as_bytes(reply_of(r.get()));
    auto header = detail::read_entry_header(bytes);
    if (!header || redis_key(std::span<const std::byte>(header->key)) != k) continue;
    cache_entry_info info = detail::entry_info(std::move(*header), bytes.size());
    reply_ptr idle = command({"OBJECT", "IDLETIME", k});
    if (idle && reply_of(idle.get())->type == REDIS_REPLY_INTEGER) {
      info.last_used = now - std::chrono::seconds(reply_of(idle.get())->integer);
    }
    out.push_back(std::move(info));
  }
  return out;
}

cache_verify_report redis_program_cache::verify(bool remove_bad) {
  health_->check_open();
  cache_verify_report report;
  std::vector<damaged_value> bad;
  {
    std::lock_guard lock(mutex_);
    for (const std::string& k : scan_keys()) {
      ++report.entries;
      reply_ptr r = command({"GET", k});
      if (!r) throw error(health_->who() + ": the connection failed during verify");
      const redisReply* reply = reply_of(r.get());
      if (reply->type == REDIS_REPLY_NIL) {  // gone since the scan
        --report.entries;
        continue;
      }
      if (reply->type == REDIS_REPLY_STRING) {
        const auto bytes = as_bytes(reply);
        auto header = detail::read_entry_header(bytes);
        if (header && redis_key(std::span<const std::byte>(header->key)) == k &&
            detail::decode_entry(std::vector<std::byte>(bytes.begin(), bytes.end()), header->key)
                    .status == detail::entry_status::ok) {
          ++report.ok;
          continue;
        }
        bad.push_back({k, std::string(as_view(reply))});
      } else {
        bad.push_back({k, std::nullopt});
      }
      ++report.corrupt;
    }
  }
  if (remove_bad && !options_.read_only) {
    for (const auto& b : bad) {
      delete_guarded(b.key, b.value ? &*b.value : nullptr);
      ++report.removed;
    }
  }
  return report;
}

std::size_t redis_program_cache::trim(std::uint64_t max_size_bytes) {
  health_->check_open();
  if (options_.read_only) {
    throw invalid_argument(health_->who() + " is read-only: trim() refused");
  }
  struct sized {
    std::string key;
    std::uint64_t bytes;
    long long idle;
  };
  std::vector<sized> entries;
  std::uint64_t total = 0;
  std::lock_guard lock(mutex_);
  for (const std::string& k : scan_keys()) {
    reply_ptr len = command({"STRLEN", k});
    reply_ptr idle = len ? command({"OBJECT", "IDLETIME", k}) : nullptr;
    if (!len || !idle) throw error(health_->who() + ": the connection failed during trim");
    const auto bytes = reply_of(len.get())->type == REDIS_REPLY_INTEGER
                           ? static_cast<std::uint64_t>(reply_of(len.get())->integer)
                           : 0;
    const long long idle_s =
        reply_of(idle.get())->type == REDIS_REPLY_INTEGER ? reply_of(idle.get())->integer : 0;
    entries.push_back({k, bytes, idle_s});
    total += bytes;
  }
  std::sort(entries.begin(), entries.end(),
            [](const sized& a, const sized& b) { return a.idle > b.idle; });
  std::size_t removed = 0;
  for (const sized& e : entries) {
    if (total <= max_size_bytes) break;
    reply_ptr r = command({"DEL", e.key});
    if (!r) throw error(health_->who() + ": the connection failed during trim");
    if (reply_of(r.get())->type == REDIS_REPLY_INTEGER && reply_of(r.get())->integer > 0) {
      ++removed;
      health_->counters().evictions.fetch_add(1, std::memory_order_relaxed);
    }
    total -= e.bytes;
  }
  return removed;
}

std::string redis_program_cache::description() const {
  std::string out = "redis " + redacted_url_ + " prefix " + options_.key_prefix;
  if (options_.read_only) out += " (read-only)";
  return out;
}

void redis_program_cache::close() noexcept {
  std::lock_guard lock(mutex_);
  health_->close();
  conn_.reset();
}

}  // namespace cucore
