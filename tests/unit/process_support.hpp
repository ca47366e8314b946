// Real child processes for the tests: forked children that report back through a pipe,
// children that run until they are killed, and programs spawned with an environment and files of
// their own. Standard library and POSIX only.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace cucore::testing {

inline bool write_all(int fd, const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

inline std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// A forked child that runs `body` and sends back what it returns (its report; by convention
// empty for success). The child never returns into the test framework.
class child_process {
 public:
  explicit child_process(const std::function<std::string()>& body) {
    int fds[2];
    if (::pipe(fds) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) {
      ::close(fds[0]);
      std::string report;
      int code = 0;
      try {
        report = body();
      } catch (const std::exception& e) {
        report = std::string("child threw: ") + e.what();
        code = 3;
      } catch (...) {
        report = "child threw";
        code = 3;
      }
      write_all(fds[1], report.data(), report.size());
      ::close(fds[1]);
      ::_exit(code);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  child_process(child_process&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)), fd_(std::exchange(other.fd_, -1)) {}
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  child_process& operator=(child_process&&) = delete;
  ~child_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
    if (fd_ >= 0) ::close(fd_);
  }
  pid_t pid() const { return pid_; }

  // Waits for the child; its report (or a description of how it died).
  std::string wait() {
    std::string report = fd_ >= 0 ? read_all(fd_) : std::string();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    if (WIFSIGNALED(status))
      report += " [killed by signal " + std::to_string(WTERMSIG(status)) + "]";
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && report.empty()) {
      report = "child exited with " + std::to_string(WEXITSTATUS(status));
    }
    return report;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

// Runs `body` in a forked child and waits for it; its report ("" for success).
inline std::string run_in_child(const std::function<std::string()>& body) {
  return child_process(body).wait();
}

// Forks `n` children at once, child i running `body(i)`, and waits for them all; their reports,
// in order ("" for success).
inline std::vector<std::string> run_children(int n, const std::function<std::string(int)>& body) {
  std::vector<child_process> children;
  children.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) children.emplace_back([&body, i] { return body(i); });
  std::vector<std::string> reports;
  for (auto& c : children) reports.push_back(c.wait());
  return reports;
}

// Forks a child that runs `body`, meant to run until it is killed (should it return or throw,
// the child exits with 1). The child's pid, or -1 when fork failed.
inline pid_t fork_until_killed(const std::function<void()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      body();
    } catch (...) {
    }
    ::_exit(1);
  }
  return pid;
}

// Sleeps `delay`, kills `pid` with SIGKILL and reaps it. True when the SIGKILL is what ended it
// (false: the child had exited on its own).
inline bool kill_after(pid_t pid, std::chrono::microseconds delay) {
  std::this_thread::sleep_for(delay);
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

// This process's environment without the variables that start with one of `unset` ("NAME=" for
// one variable, "CUCORE_CUDA_" for a family) or that `set` gives, then `set` ("NAME=VALUE" each).
inline std::vector<std::string> environment_with(const std::vector<std::string>& unset,
                                                 const std::vector<std::string>& set = {}) {
  auto starts_with_any = [](std::string_view entry, const std::vector<std::string>& prefixes,
                            bool names_only) {
    for (const std::string& prefix : prefixes) {
      if (entry.starts_with(names_only ? prefix.substr(0, prefix.find('=') + 1) : prefix))
        return true;
    }
    return false;
  };
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!starts_with_any(entry, unset, false) && !starts_with_any(entry, set, true))
      out.emplace_back(entry);
  }
  out.insert(out.end(), set.begin(), set.end());
  return out;
}

// Where spawn_program's child runs and what it gets. Output files are created or truncated.
struct spawn_options {
  std::string cwd;          // "": this process's
  bool null_stdin = false;  // stdin from /dev/null
  std::string out;          // stdout's file; "": this process's
  std::string err;          // stderr's file; "": this process's; out's: one file for both
  const std::vector<std::string>* env = nullptr;  // "NAME=VALUE"s; nullptr: this process's
};

// Spawns the program argv[0] with `argv`. Its pid, or -1 (posix_spawn's error in *error).
inline pid_t spawn_program(const std::vector<std::string>& argv, const spawn_options& o = {},
                           int* error = nullptr) {
  std::vector<std::string> args = argv;
  std::vector<std::string> env = o.env != nullptr ? *o.env : std::vector<std::string>();
  auto pointers = [](std::vector<std::string>& strings) {
    std::vector<char*> p;
    for (auto& s : strings) p.push_back(s.data());
    p.push_back(nullptr);
    return p;
  };
  auto arg_pointers = pointers(args);
  auto env_pointers = pointers(env);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!o.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, o.cwd.c_str());
  if (o.null_stdin) posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  constexpr int kOutput = O_WRONLY | O_CREAT | O_TRUNC | O_NOCTTY;
  if (!o.out.empty()) posix_spawn_file_actions_addopen(&actions, 1, o.out.c_str(), kOutput, 0644);
  if (!o.err.empty() && o.err == o.out) {
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  } else if (!o.err.empty()) {
    posix_spawn_file_actions_addopen(&actions, 2, o.err.c_str(), kOutput, 0644);
  }
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0].c_str(), &actions, nullptr, arg_pointers.data(),
                               o.env != nullptr ? env_pointers.data() : environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != nullptr) *error = rc;
  return rc == 0 ? pid : -1;
}

// Waits for the child `pid`: its exit status, or 128 + the signal that killed it; -1 when it
// cannot be waited for.
inline int wait_exit_code(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace cucore::testing
