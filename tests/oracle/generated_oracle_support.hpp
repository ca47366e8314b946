// The generated oracle's shared pieces (generated_oracle*_test.cpp): a case's directory, and a
// case's key derived in a child process within a time limit.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>

#include "cucore/error.hpp"
#include "oracle_cases.hpp"
#include "random_source.hpp"
#include "test_support.hpp"

namespace cucore::oracle {

namespace fs = std::filesystem;

// A key derivation takes milliseconds here; one that has not finished after this long is a walk
// that does not end (or grows without bound) and fails its case, rather than hanging the run.
inline constexpr int kKeyLimitSeconds = 60;

// A fresh directory for one case, removed with everything in it at scope exit. On a tmpfs
// (/dev/shm) where there is one, else in the temp directory (test_support.hpp's temp_dir): a case
// is a few dozen small files, and removing them from a disk file system costs more than the
// traced compile here (4 ms a file). CUCORE_ORACLE_TMPDIR names another place.
class case_dir : public cucore::testing::temp_dir {
 public:
  case_dir() : temp_dir(parent()) {}

 private:
  static fs::path parent() {
    if (const char* d = std::getenv("CUCORE_ORACLE_TMPDIR"); d != nullptr && *d != '\0') return d;
    if (fs::is_directory("/dev/shm") && ::access("/dev/shm", W_OK | X_OK) == 0) return "/dev/shm";
    return fs::temp_directory_path();
  }
};

// What the key of one case tracks, derived in a child process (fork): a walk that does not end or
// grows without bound then fails its case instead of hanging the run or exhausting the machine.
// The child inherits this process's memos (warm them first: warm_up_keys).
struct key_outcome {
  enum class kind { tracked, refused, failed, timed_out } what = kind::failed;
  tracked_paths tracked;
  std::string error;
};

inline key_outcome key_in_child(const oracle_case& c, int limit_seconds) {
  key_outcome out;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    nlohmann::json result;
    try {
      const tracked_paths t = tracked_by_key(c);
      result = {
          {"what", "tracked"}, {"files", t.files}, {"absent", t.absent}, {"skipped", t.skipped}};
    } catch (const extra_digest_required& e) {
      result = {{"what", "refused"}, {"error", e.what()}};
    } catch (const std::exception& e) {
      result = {{"what", "failed"}, {"error", e.what()}};
    }
    const std::string text = result.dump();
    for (std::size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(fds[1], text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ::_exit(3);
      done += static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(limit_seconds);
  std::string text;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // the deadline is checked above
    char buffer[65536];
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    out.what = key_outcome::kind::timed_out;
    out.error = "the key was not derived within " + std::to_string(limit_seconds) +
                " s (it takes milliseconds): a walk that does not end, or grows without bound";
    return out;
  }
  const auto result = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !result.is_object()) {
    out.error = "the process deriving the key ended with status " + std::to_string(status);
    return out;
  }
  const std::string what = result.at("what").get<std::string>();
  if (what == "tracked") {
    out.what = key_outcome::kind::tracked;
    out.tracked.files = result.at("files").get<std::set<std::string>>();
    out.tracked.absent = result.at("absent").get<std::set<std::string>>();
    out.tracked.skipped = result.at("skipped").get<std::size_t>();
  } else {
    out.what = what == "refused" ? key_outcome::kind::refused : key_outcome::kind::failed;
    out.error = result.at("error").get<std::string>();
  }
  return out;
}

// Derives one key in this process with a group to decide, so that what every walk reads once
// (the predefined macros of NVRTC's builtins libraries) is memoised before the children fork.
inline void warm_up_keys() {
  const case_dir dir;
  oracle_case c;
  c.code = "#ifdef NOT_DEFINED_ANYWHERE\n#include \"x.h\"\n#endif\n";
  c.cwd = dir.path();
  c.name = (dir.path() / "k.cu").string();
  c.target = "ptx";
  c.toolkit_include_path = false;
  (void)tracked_by_key(c);
}

}  // namespace cucore::oracle
