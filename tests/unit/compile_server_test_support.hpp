// What the compile server's tests (compile_server*_test.cpp) share: real server processes of the
// cucore tool (CUCORE_CLI_PATH), the tool run as a child, and a private server directory per test.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "cucore/program.hpp"
#include "cucore/server.hpp"
#include "nvrtc_versions.hpp"  // CUCORE_TEST_NVRTC: the version matrix
#include "test_support.hpp"

#ifndef CUCORE_CLI_PATH
#error "CUCORE_CLI_PATH must point at the cucore tool"
#endif

namespace cucore::testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// A CUB kernel (a precompiled-header prefix) with a name expression.
inline constexpr const char* kCubKernel = R"(#include <cub/block/block_reduce.cuh>
#include <cuda/std/complex>
template <int N>
__global__ void reduce(int* p) {
  using R = cub::BlockReduce<int, N>;
  __shared__ typename R::TempStorage t;
  int v = R(t).Sum(p[threadIdx.x]);
  if (threadIdx.x == 0) *p = v;
}
)";

inline std::string small_kernel(int i) {
  return "extern \"C\" __global__ void k" + std::to_string(i) +
         "(int* p) { p[threadIdx.x] += " + std::to_string(i) + "; }\n";
}

// NVRTC names internal-linkage variables with the compiling process's PID (nvrtc-observed.md).
inline std::string masked(std::string_view ptx) {
  static const std::regex internal("_INTERNAL_[A-Za-z0-9_]+");
  return std::regex_replace(std::string(ptx), internal, "_INTERNAL_");
}

inline program_options options_with(compile_server_mode mode, std::string name = "server_test.cu") {
  program_options o;
  o.arch = testing::kArch;
  o.std = "c++17";
  o.name = std::move(name);
  o.compile_server = mode;
  return o;
}

// Runs the tool, waiting for it; its exit status and output.
inline std::pair<int, std::string> run_tool(std::vector<std::string> args,
                                            const std::vector<std::string>& prefix = {}) {
  args.insert(args.begin(), CUCORE_CLI_PATH);
  args.insert(args.begin(), prefix.begin(), prefix.end());
  int out[2];
  if (::pipe(out) != 0) std::abort();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::close(out[0]);
    ::close(out[1]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, n);
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), text};
}

// A server in the foreground, a child of the test; killed and reaped at the end whatever happens.
class server_process {
 public:
  server_process(const fs::path& dir, int workers, std::vector<std::string> extra = {})
      : dir_(dir) {
    std::vector<std::string> args = {
        CUCORE_CLI_PATH, "server",     "start",     "--foreground",
        "--dir",         dir.string(), "--workers", std::to_string(workers)};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(CUCORE_CLI_PATH, argv.data());
      ::_exit(127);
    }
    // Ready when it answers (bounded: it only has to bind and spawn its workers).
    const auto deadline = clock_type::now() + 30s;
    while (!query_compile_server(dir_)) {
      if (clock_type::now() > deadline || exited()) {
        ADD_FAILURE() << "the compile server did not start";
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
  }
  ~server_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGCONT);
      ::kill(pid_, SIGTERM);
      if (!wait_exit(20s)) {
        ::kill(pid_, SIGKILL);
        wait_exit(10s);
      }
    }
  }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  pid_t pid() const { return pid_; }
  bool exited() {
    if (pid_ <= 0) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return true;
    }
    return false;
  }
  bool wait_exit(std::chrono::milliseconds bound) {
    const auto deadline = clock_type::now() + bound;
    while (!exited()) {
      if (clock_type::now() > deadline) return false;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }
  std::uint64_t requests() const {
    const auto s = query_compile_server(dir_);
    return s ? s->requests : 0;
  }
  // The images its workers hold, once none is being made (within 60 s).
  std::size_t images_once_made() const {
    const auto deadline = clock_type::now() + 60s;
    for (;;) {
      const auto s = query_compile_server(dir_);
      if (s && (s->images_being_made == 0 || clock_type::now() > deadline)) {
        std::size_t images = 0;
        for (const auto& w : s->workers) images += w.prefixes;
        return images;
      }
      std::this_thread::sleep_for(20ms);
    }
  }

 private:
  fs::path dir_;
  pid_t pid_ = -1;
};

// Each test: its own private directory, named to clients by CUCORE_SERVER_DIR.
class CompileServer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path() / "server";
    ::setenv("CUCORE_SERVER_DIR", dir_.c_str(), 1);
    ::setenv("CUCORE_SERVER_PROGRAM", CUCORE_CLI_PATH, 1);
    ::unsetenv("CUCORE_COMPILE_SERVER");
    ::unsetenv("CUCORE_SERVER_TIMEOUT_MS");
  }
  void TearDown() override {
    ::unsetenv("CUCORE_SERVER_DIR");
    ::unsetenv("CUCORE_SERVER_PROGRAM");
    ::unsetenv("CUCORE_SERVER_TIMEOUT_MS");
  }
  testing::temp_dir tmp_;
  fs::path dir_;
};

}  // namespace cucore::testing
