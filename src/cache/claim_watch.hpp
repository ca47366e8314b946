// The claim watches cucore's caches make (program_cache::watch_claim): each waits on one
// descriptor (an inotify instance, a Redis subscription's socket), so that several can be waited
// on at once (a tiered cache's two tiers).
#pragma once

#include <chrono>
#include <memory>

#include "cucore/cache/program_cache.hpp"

namespace cucore::detail {

class pollable_claim_watch : public claim_watch {
 public:
  // arm(), then check() whenever the descriptor is readable, until a sign or the timeout.
  bool wait(std::chrono::milliseconds timeout) final;
  int native_handle() const noexcept override = 0;
  // The caller just found the claim held: what counts as a sign is a change from now on.
  virtual void arm() noexcept {}
  // Consumes what the descriptor has queued, never blocking; true when it holds a sign.
  virtual bool check() noexcept = 0;
};

// One watch over both: a sign from either. Either may be nullptr (then the other is returned).
// Watches that are not pollable_claim_watch are waited on in turns of a few milliseconds.
std::unique_ptr<claim_watch> combine_watches(std::unique_ptr<claim_watch> a,
                                             std::unique_ptr<claim_watch> b);

}  // namespace cucore::detail
