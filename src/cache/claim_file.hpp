// Claims on cache keys through one lock file shared by every process on the machine: each key
// locks one byte of the file (at an offset taken from the key's SHA-256) with an open file
// description lock (F_OFD_SETLK). The lock belongs to the claim's own descriptor, so two claims
// in one process conflict like claims in two processes (threads coalesce too), and the kernel
// drops it when the descriptor is closed: by the claim's destructor, or by the death of its
// process (a killed compiler leaves no stale claim). The file stays empty. Two keys whose offsets
// collide (40 bits) only wait for each other's compile.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "cucore/cache/program_cache.hpp"

namespace cucore::detail {

class claim_file {
 public:
  // `mode`: the cache's file mode (trust model); with `exact`, a file this process creates gets
  // exactly that mode whatever the umask (as the cache's other files do).
  claim_file(std::string path, mode_t mode, bool exact)
      : path_(std::move(path)), mode_(mode), exact_(exact) {}
  // Owned, held_elsewhere, or unsupported where the file cannot be opened for writing or the
  // file system has no such locks (then the caller compiles without a claim). An owned claim's
  // abandon() marks the file (below) before the claim is released.
  claim_result try_claim(cache_key_ref key) const noexcept;
  const std::string& path() const noexcept { return path_; }

  // Abandonments (program_cache::claim_abandonments) are kept in the file's own times: an
  // abandoned claim, or a failed store (mark_abandoned), sets its modification time, and
  // abandonments() is a digest of its modification and change times (0 while there is no file).
  // One mark for every key of the cache: an abandonment of another key only makes a waiter whose
  // holder died compile beside the others (as every waiter did before abandonments were told).
  std::uint64_t abandonments() const noexcept;
  void mark_abandoned() const noexcept;

  // Wakes a waiter on `key`'s claim when the claim comes free (its holder released it or died:
  // the kernel closes a dead process's descriptors, which inotify reports) or, with
  // `entry_dir` given, when a file named `entry_name` lands there (the directory cache's entry,
  // renamed into its shard). nullptr where inotify is not available (no instance left: the
  // waiter polls). See claim_file.cpp.
  std::unique_ptr<claim_watch> watch(cache_key_ref key, const std::string& entry_dir,
                                     const std::string& entry_name) const noexcept;

 private:
  std::string path_;
  mode_t mode_;
  bool exact_;
};

}  // namespace cucore::detail
