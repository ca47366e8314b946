// The Redis cache's single-flight claims (see include/cucore/cache/redis.hpp): the claim (SET NX
// PX, renewed while it lives, released by a token-guarded script that publishes the release), the
// abandonment counter, and the watch a waiter subscribes with.
#include <hiredis/hiredis.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "cache/claim_watch.hpp"
#include "cache/posix_file.hpp"
#include "cache/redis_internal.hpp"
#include "cache/remote_health.hpp"
#include "common/sha256.hpp"
#include "cucore/cache/redis.hpp"

namespace cucore {

// The helpers both Redis files share (cache/redis_internal.hpp).
using namespace detail::redis;

namespace {

// A claim's release: deletes the claim KEYS[1] only while it holds this claim's token ARGV[1],
// and then publishes on the channel of the same name, where waiters subscribe. With ARGV[2] ==
// "1" the claim was abandoned (its holder stored nothing): the abandonment counter KEYS[2] goes up
// first, living ARGV[3] ms. What an ACL user may not do (INCR, PUBLISH) is skipped (pcall), never
// the release itself.
constexpr std::string_view kReleaseClaim =
    "if ARGV[2] == '1' then redis.pcall('INCR', KEYS[2]) redis.pcall('PEXPIRE', KEYS[2], ARGV[3]) "
    "end if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) "
    "redis.pcall('PUBLISH', KEYS[1], 'released') return 1 end return 0";
// Renews a claim's lease (KEYS[1] to ARGV[2] ms) while it holds this claim's token ARGV[1].
constexpr std::string_view kRenewClaim =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) "
    "end return 0";

}  // namespace

// A claim renews its lease while it lives: a thread of its own sets the claim's expiry to a full
// lease again every third of one (only while the claim still holds its token), so that a compile
// longer than the lease keeps its claim, while a holder that dies stops renewing and its claim
// expires within a lease. The thread is stopped and joined before the release.
class redis_claim final : public cache_claim {
 public:
  redis_claim(redis_program_cache& cache, std::string key, std::string token,
              std::chrono::milliseconds lease)
      : cache_(cache), key_(std::move(key)), token_(std::move(token)), lease_(lease) {
    try {
      renewer_ = std::thread([this] { renew_until_released(); });
    } catch (const std::system_error&) {
      // No thread to be had: the claim lasts its lease, as before renewal existed.
    }
  }
  ~redis_claim() override {
    {
      std::lock_guard lock(mutex_);
      released_ = true;
    }
    released_cv_.notify_all();
    if (renewer_.joinable()) renewer_.join();
    cache_.release_claim(key_, token_, abandoned_);
  }
  void abandon() noexcept override { abandoned_ = true; }

 private:
  void renew_until_released() noexcept {
    const auto period = std::max(lease_ / 3, std::chrono::milliseconds(1));
    std::unique_lock lock(mutex_);
    while (!released_cv_.wait_for(lock, period, [&] { return released_; })) {
      lock.unlock();
      cache_.renew_claim(key_, token_, lease_);
      lock.lock();
    }
  }

  redis_program_cache& cache_;
  std::string key_;
  std::string token_;
  std::chrono::milliseconds lease_;
  bool abandoned_ = false;
  std::mutex mutex_;
  std::condition_variable released_cv_;
  bool released_ = false;  // guarded by mutex_
  std::thread renewer_;
};

void redis_program_cache::renew_claim(const std::string& claim, const std::string& token,
                                      std::chrono::milliseconds lease) noexcept {
  if (health_->closed()) return;
  try {
    const std::string px = std::to_string(std::max<std::int64_t>(lease.count(), 1));
    std::lock_guard lock(mutex_);
    if (!ensure_connected(true)) return;
    reply_ptr r = command({"EVAL", kRenewClaim, "1", claim, token, px});
    if (r && reply_of(r.get())->type == REDIS_REPLY_ERROR) {
      health_->note_error("renewing " + claim + ": " + std::string(as_view(reply_of(r.get()))));
    }
  } catch (...) {
    // Out of memory: the claim runs out at the end of its lease.
  }
}

std::string redis_program_cache::claim_key(cache_key_ref key) const {
  const auto hex = detail::sha256_hex(key.bytes());
  return options_.key_prefix + "claim:" + std::string(hex.data(), hex.size());
}

claim_result redis_program_cache::try_claim(cache_key_ref key, std::chrono::milliseconds lease) {
  if (health_->closed() || options_.read_only) return {};
  try {
    std::string claim = claim_key(key);
    // The token tells this claim from a later one on the same key (after an expiry).
    const std::string token = std::to_string(detail::posix::random_u64()) + "-" +
                              std::to_string(detail::posix::random_u64());
    const std::string px = std::to_string(std::max<std::int64_t>(lease.count(), 1));
    std::lock_guard lock(mutex_);
    if (!ensure_connected(true)) return {};
    reply_ptr r = command({"SET", claim, token, "NX", "PX", px});
    if (!r) return {};
    const redisReply* reply = reply_of(r.get());
    if (reply->type == REDIS_REPLY_NIL) return {claim_status::held_elsewhere, nullptr};
    if (reply->type != REDIS_REPLY_STATUS) {
      health_->note_error("SET NX " + claim + ": " +
                          (reply->type == REDIS_REPLY_ERROR ? std::string(as_view(reply))
                                                            : std::string("unexpected reply")));
      return {};  // e.g. an ACL user that may not write: compile without a claim
    }
    return {claim_status::owned,
            std::make_unique<redis_claim>(*this, std::move(claim), token, lease)};
  } catch (const std::exception& e) {
    health_->note_error(std::string("claim: ") + e.what());
    return {};
  }
}

void redis_program_cache::release_claim(const std::string& claim, const std::string& token,
                                        bool abandoned) noexcept {
  if (health_->closed()) return;  // the lease ends it
  try {
    std::lock_guard lock(mutex_);
    if (!ensure_connected(true)) return;
    reply_ptr r = command({"EVAL", kReleaseClaim, "2", claim, claim + ":abandoned", token,
                           abandoned ? "1" : "0", kAbandonmentLifeMs});
    if (r && reply_of(r.get())->type == REDIS_REPLY_ERROR) {
      health_->note_error("releasing " + claim + ": " + std::string(as_view(reply_of(r.get()))));
    }
  } catch (...) {
    // Out of memory: the claim expires after its lease.
  }
}

std::uint64_t redis_program_cache::claim_abandonments(cache_key_ref key) {
  if (health_->closed()) return 0;
  try {
    const std::string counter = claim_key(key) + ":abandoned";
    std::lock_guard lock(mutex_);
    if (!ensure_connected(true)) return 0;
    reply_ptr r = command({"GET", counter});
    if (!r) return 0;
    const redisReply* reply = reply_of(r.get());
    if (reply->type != REDIS_REPLY_STRING) return 0;  // nil: never abandoned (or expired)
    const auto n = parse_integer(as_view(reply), 0, std::numeric_limits<long long>::max());
    return n ? static_cast<std::uint64_t>(*n) : 0;
  } catch (...) {
    return 0;
  }
}

// ---------------------------------------------------------------------------------------------
// Watching a claim: a connection of its own, subscribed to the channel the release publishes on.
// Checked without blocking: replies hiredis has buffered first, then the socket if poll(2) says
// it is readable. A connection that fails wakes the waiter once (it polls), then never again.

namespace {

class redis_claim_watch final : public detail::pollable_claim_watch {
 public:
  explicit redis_claim_watch(redisContext* context) noexcept : context_(context) {}
  ~redis_claim_watch() override { redisFree(context_); }

  int native_handle() const noexcept override { return broken_ ? -1 : context_->fd; }

  bool check() noexcept override {
    if (broken_) return false;
    bool sign = false;
    for (;;) {
      void* reply = nullptr;
      if (redisGetReplyFromReader(context_, &reply) != REDIS_OK) return fail();
      if (reply != nullptr) {
        freeReplyObject(reply);  // a message on our channel (the only one subscribed)
        sign = true;
        continue;
      }
      pollfd p{context_->fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) return sign;
      sigpipe_guard guard;
      if (redisBufferRead(context_) != REDIS_OK) return fail();
    }
  }

 private:
  bool fail() noexcept {
    broken_ = true;
    return true;
  }
  redisContext* context_;
  bool broken_ = false;
};

}  // namespace

std::unique_ptr<claim_watch> redis_program_cache::watch_claim(cache_key_ref key) {
  if (health_->closed()) return nullptr;
  try {
    const std::string channel = claim_key(key);
    redisContext* c =
        redisConnectWithTimeout(url_.host.c_str(), url_.port, to_timeval(options_.connect_timeout));
    if (c == nullptr) return nullptr;
    auto watch = std::make_unique<redis_claim_watch>(c);  // owns c from here
    if (c->err || redisSetTimeout(c, to_timeval(options_.command_timeout)) != REDIS_OK) {
      return nullptr;
    }
    sigpipe_guard guard;
    auto call = [&](const std::vector<std::string_view>& args) {
      std::vector<const char*> argv;
      std::vector<std::size_t> lengths;
      for (std::string_view a : args) {
        argv.push_back(a.data());
        lengths.push_back(a.size());
      }
      auto* reply = static_cast<redisReply*>(
          redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data()));
      const bool ok = reply != nullptr && reply->type != REDIS_REPLY_ERROR;
      if (reply != nullptr) freeReplyObject(reply);
      return ok;
    };
    if (!url_.user.empty() || !url_.password.empty()) {
      std::vector<std::string_view> args = {"AUTH"};
      if (!url_.user.empty()) args.push_back(url_.user);
      args.push_back(url_.password);
      if (!call(args)) return nullptr;
    }
    // An ACL user without rights on the channel gets an error: no watch, the waiter polls.
    if (!call({"SUBSCRIBE", channel})) return nullptr;
    return watch;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace cucore
