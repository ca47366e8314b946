// What the single-flight tests (single_flight*_test.cpp) share: sample entries, a forked child that
// dies with the test, a process that holds a claim, and the claim contract every backend keeps.
#pragma once

#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/single_flight.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace cucore::testing {

using namespace std::chrono_literals;

inline object_code sample(char fill) {
  return object_code(code_type::cubin, std::vector<std::byte>(64, std::byte(fill)), "sample");
}

// Kills and reaps a forked child when it goes out of scope (an assertion that returns early must
// not leave it running), unless reap() did already.
class child_guard {
 public:
  explicit child_guard(pid_t pid) noexcept : pid_(pid) {}
  child_guard(const child_guard&) = delete;
  child_guard& operator=(const child_guard&) = delete;
  ~child_guard() {
    if (pid_ > 0) (void)testing::kill_after(pid_, 0us);
  }
  // SIGKILLs it now: true when the SIGKILL is what ended it.
  bool reap() {
    const bool killed = testing::kill_after(pid_, 0us);
    pid_ = -1;
    return killed;
  }

 private:
  pid_t pid_;
};

// Opens a cache object on the test's store (as each process of the test does).
using cache_opener = std::function<std::unique_ptr<program_cache>()>;

// Forks a process that opens a cache with `open`, claims "k" for `lease` and holds the claim until
// it is killed; returns once it holds it, with the process in `guard`.
inline void fork_claim_holder(const cache_opener& open, std::chrono::milliseconds lease,
                              std::optional<child_guard>& guard) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = testing::fork_until_killed([&] {
    std::unique_ptr<program_cache> cache = open();
    claim_result claim = cache->try_claim("k", lease);
    const char c = claim.status == claim_status::owned ? 'y' : 'n';
    testing::write_all(ready[1], &c, 1);
    for (;;) ::pause();
  });
  ASSERT_GT(holder, 0);
  guard.emplace(holder);
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, 'y');
}

// The claim contract every claiming backend keeps: one owner per key at a time, other keys free,
// the claim free again once released.
inline void expect_claims_exclusive(program_cache& a, program_cache& b) {
  claim_result first = a.try_claim("k", 10s);
  ASSERT_EQ(first.status, claim_status::owned);
  ASSERT_NE(first.claim, nullptr);
  EXPECT_EQ(b.try_claim("k", 10s).status, claim_status::held_elsewhere);
  EXPECT_EQ(a.try_claim("k", 10s).status, claim_status::held_elsewhere);  // same object too
  claim_result other = b.try_claim("other key", 10s);
  EXPECT_EQ(other.status, claim_status::owned);
  first.claim.reset();
  claim_result again = b.try_claim("k", 10s);
  EXPECT_EQ(again.status, claim_status::owned);
  EXPECT_EQ(a.try_claim("k", 10s).status, claim_status::held_elsewhere);
}

}  // namespace cucore::testing
