// Running the cucore tool (or any program) from a test as a child process, its output captured
// in files, and the sources the command-line tests compile.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "process_support.hpp"
#include "test_support.hpp"

namespace cucore::testing {

struct run_result {
  int status = -1;  // the exit status, or 128 + the signal that killed it
  std::string out;
  std::string err;
};

// For a failed check's message: the status and both outputs.
inline std::string describe(const run_result& r) {
  return "exit status " + std::to_string(r.status) + "\n--- stdout:\n" + r.out + "\n--- stderr:\n" +
         r.err;
}

// A child started by start_program, to be finished (waited for, its output read).
struct started_run {
  pid_t pid = -1;
  int error = 0;  // posix_spawn's, when pid is -1
  std::string program;
  std::string out;
  std::string err;  // "" where stderr is not a file of its own
};

// Starts `program args...` as spawn_program does.
inline started_run start_program(const std::string& program, const std::vector<std::string>& args,
                                 const spawn_options& o) {
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), args.begin(), args.end());
  started_run run{-1, 0, program, o.out, o.err == o.out ? std::string() : o.err};
  run.pid = spawn_program(argv, o, &run.error);
  return run;
}

// Waits for `run`: its status and what it printed into its files; a program that could not start
// fails the test (status -1).
inline run_result finish(const started_run& run) {
  run_result r;
  if (run.pid < 0) {
    ADD_FAILURE() << "cannot run " << run.program << ": " << std::strerror(run.error);
    return r;
  }
  r.status = wait_exit_code(run.pid);
  r.out = read_text(run.out);
  if (!run.err.empty()) r.err = read_text(run.err);
  return r;
}

inline run_result run_captured(const std::string& program, const std::vector<std::string>& args,
                               const spawn_options& o) {
  return finish(start_program(program, args, o));
}

// Runs of one program, each with its stdout and stderr captured in files of `captures`
// ("stdout.N", "stderr.N", N counting the runs) and stdin from /dev/null.
class captured_runs {
 public:
  captured_runs(std::string program, std::filesystem::path captures)
      : program_(std::move(program)), captures_(std::move(captures)) {}

  // Starts `program args...` in `cwd` with `env` as its environment (nullptr: this process's);
  // stderr goes to `terminal` instead where it is given (err is not captured then).
  started_run start(const std::vector<std::string>& args, const std::filesystem::path& cwd,
                    const std::vector<std::string>* env, const std::string& terminal = "") {
    const std::string tag = std::to_string(runs_++);
    spawn_options o;
    o.cwd = cwd.string();
    o.null_stdin = true;
    o.out = (captures_ / ("stdout." + tag)).string();
    o.err = terminal.empty() ? (captures_ / ("stderr." + tag)).string() : terminal;
    o.env = env;
    started_run run = start_program(program_, args, o);
    if (!terminal.empty()) run.err.clear();
    return run;
  }

  run_result run(const std::vector<std::string>& args, const std::filesystem::path& cwd,
                 const std::vector<std::string>* env) {
    return finish(start(args, cwd, env));
  }

 private:
  std::string program_;
  std::filesystem::path captures_;
  int runs_ = 0;
};

inline constexpr const char* kSaxpy =
    "extern \"C\" __global__ void saxpy(float a, const float* x, float* y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n";
inline constexpr const char* kTemplate =
    "template <class T> __global__ void k(T* x) { *x = T(1); }\n";

}  // namespace cucore::testing
