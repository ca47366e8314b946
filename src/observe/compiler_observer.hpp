#pragma once
// What a compile actually read (docs/cache-keys.md, "Observed inputs"): the C library calls that
// NVRTC (with its ptxas), nvJitLink and libNVVM make for files, directories, links, the
// environment and the working directory, seen by patching each compiler library's own imports
// (its GOT) once it is loaded, so that nothing else in the process is touched. A compile runs
// inside a compiler_observation; after it, the store gate (key/observation_gate.hpp) stores its
// output only if the key covers every input observed.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cucore::detail {

// The kind of call a compiler made.
enum class observed_call : std::uint8_t {
  open,         // a file opened for reading (fopen, open, ...)
  stat,         // a path's status, following links (stat, access, statfs, realpath, ...)
  lstat,        // a path's own status (lstat, readlink)
  opendir,      // a directory listed
  getenv,       // an environment variable read (name)
  getcwd,       // the working directory read
  side_effect,  // a file written, created or removed, a directory changed, a program run, a
                // connection made: the compile is not a function of its inputs alone
  clock,        // the time NVRTC took for __DATE__ and __TIME__ (ctime's text): not an input
                // the key can cover, but what a clock-dependent output holds (clock_in_output)
};
std::string_view to_string(observed_call call) noexcept;

struct observed_input {
  observed_call call{};
  bool found = false;  // the call succeeded (for getenv: the variable is set)
  // An absolute path (relative ones are made absolute against the working directory the
  // observation began in), a variable's name, or for a side effect "FUNCTION PATH".
  std::string name;
  friend bool operator==(const observed_input&, const observed_input&) = default;
  friend auto operator<=>(const observed_input&, const observed_input&) = default;
};

struct observed_inputs {
  // Empty when every compiler library the compile could call was observed; else why not (then
  // nothing the compile read can be vouched for).
  std::string unobserved;
  std::vector<observed_input> inputs;  // sorted, without duplicates
};

// Patches the imports of a loaded compiler library (a dlopen handle) so that its calls are
// observed; idempotent. A library whose imports cannot be patched makes every later observation
// incomplete (observed_inputs::unobserved names it).
void observe_compiler_library(void* handle, std::string_view what);

// A directory that is cucore's own scratch space for the compilers (the automatic PCH's
// --pch-dir): what they read and write below it is not observed (its contents derive from inputs
// a key covers, and belong to this process).
void add_compiler_scratch_root(const std::string& directory);

// The inputs of the compiles made on this thread (and of any the compilers make on threads of
// their own) from construction to finish(). Nestable: an inner observation's inputs are its
// outer ones' too. Not movable; destroy on the thread that made it.
class compiler_observation {
 public:
  compiler_observation();
  ~compiler_observation();
  compiler_observation(const compiler_observation&) = delete;
  compiler_observation& operator=(const compiler_observation&) = delete;

  // Stops observing and returns what was seen (once).
  observed_inputs finish();

  // Adds inputs observed elsewhere (a compile server's worker) to the observations open on this
  // thread.
  static void add_to_current(const observed_inputs& seen);

  struct state;

 private:
  state* state_;
};

// What a store gate is given for a compile that ran without an observation: nothing vouched for.
const observed_inputs& unobserved_compile();

// `path` as an observation spells it: made absolute against `cwd` when relative, without "//" and
// "/./" (".." is kept: the kernel resolves it physically, through links, and so must a
// comparison).
std::string absolute_path(std::string_view path, std::string_view cwd);

// Runs `compile` inside an observation and puts what it read into `seen` (left as it was when
// `compile` throws). Initialise `seen` with unobserved_compile(): a store gate given it refuses.
template <class Compile>
auto run_observed(observed_inputs& seen, Compile&& compile) {
  compiler_observation watch;
  auto out = compile();
  seen = watch.finish();
  return out;
}

// The first text of a clock the compile took (__DATE__ "Dec  7 2026", __TIME__ "10:25:56", as
// NVRTC expands them from the ctime() it calls in every compile) that `output` holds, or "". An
// output holding one depends on the clock whatever spelled the name (issue 39: a name pasted
// from one-character pieces, which the key's scan does not see): it must not be stored.
std::string clock_in_output(const observed_inputs& seen, std::string_view output);

// Whether `path` (absolute) names something whose contents are per process or can change
// without its identity changing: /proc, /sys, /dev (and what lies on procfs, sysfs or devtmpfs
// elsewhere), or a file that is not a regular file. A compile that read one must not be stored,
// and a compile server must not answer it from its own process view.
bool is_process_view_path(const std::string& path);

// The first input of `seen` that no cache may store under any key (is_process_view_path or a
// side effect); nullptr if none.
const observed_input* first_process_view_input(const observed_inputs& seen);

}  // namespace cucore::detail
