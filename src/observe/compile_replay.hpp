#pragma once
// A compile replayed to check a cache hit (docs/verify.md): on the calling thread, the compilers
// see the clock moved and, where asked, the process id of the process that made the entry. Works
// through the same patched imports as the observation (compiler_observer.hpp): time,
// gettimeofday, clock_gettime and getpid of NVRTC, nvJitLink and libNVVM.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "observe/got_patch.hpp"

namespace cucore::detail {

// While alive, compiles on this thread see the clock `shift_seconds` later and getpid() answer
// `pid` (0: the real one). Nestable (the innermost wins); destroy on the thread that made it.
class compile_replay {
 public:
  compile_replay(std::int64_t shift_seconds, pid_t pid) noexcept;
  ~compile_replay();
  compile_replay(const compile_replay&) = delete;
  compile_replay& operator=(const compile_replay&) = delete;

 private:
  std::int64_t saved_shift_;
  pid_t saved_pid_;
};

// The patched imports that serve compile_replay (added to the observation's table).
const std::vector<got_replacement>& replay_replacements();

}  // namespace cucore::detail
