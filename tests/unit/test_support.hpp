// Shared helpers for the CPU test suites. Standard library and POSIX only (no cucore), so that
// every test can include it; data_file() only where CUCORE_TEST_DATA_DIR is defined.
#pragma once

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace cucore::testing {

inline constexpr const char* kArch = "sm_90";

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

#ifdef CUCORE_SOURCE_DIR
// The NVRTC version matrix's toolkit roots (scripts/fetch-cuda-versions.sh; docs/development.md,
// "NVRTC versions"): VERSION's root is <source dir>/.cache/cuda-versions/VERSION/root, unless
// CUCORE_CUDA_VERSIONS_DIR names another directory holding VERSION/root.
// Where the versions' roots are: $CUCORE_CUDA_VERSIONS_DIR, else <source dir>/.cache/cuda-versions.
inline std::filesystem::path cuda_versions_dir() {
  if (const char* d = std::getenv("CUCORE_CUDA_VERSIONS_DIR"); d != nullptr && *d != '\0') {
    return d;
  }
  return std::filesystem::path(CUCORE_SOURCE_DIR) / ".cache" / "cuda-versions";
}

// The toolkit root of `version` ("13.5", "12.9"); throws, naming the fetch script, when it is not
// there.
inline std::filesystem::path cuda_version_root(const std::string& version) {
  const std::filesystem::path root = cuda_versions_dir() / version / "root";
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) {
    throw std::runtime_error("the CUDA " + version + " root is not at " + root.string() +
                             ": run scripts/fetch-cuda-versions.sh (scripts/setup.sh all does), "
                             "or point CUCORE_CUDA_VERSIONS_DIR at a directory holding " +
                             version + "/root");
  }
  return root;
}
#endif

#ifdef CUCORE_TEST_DATA_DIR
inline std::string data_file(const std::string& name) {
  return read_text(std::filesystem::path(CUCORE_TEST_DATA_DIR) / name);
}
#endif

// Waits until `path` has settled as cucore's store rule sees it (program_cache_key::check_store,
// docs/cache-keys.md): its last change (mtime or ctime; with `mtime_too` false, ctime alone, for a
// file whose mtime a test set in the future) older than its timestamp granularity (the coarse
// clock's tick, plus 2 s for whole-second stamps, else the coarsest power of ten up to 100 ms that
// both stamps' nanoseconds are multiples of). A compile whose key is made after this may store its
// result; one made before it, right after the write, may not. A wait until a deadline the file's
// own stamps give, not a sleep that hopes for an order of events.
inline void settle(const std::filesystem::path& path, bool mtime_too = true) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  constexpr std::int64_t kSecond = 1'000'000'000;
  const auto ns = [](const struct timespec& t) {
    return static_cast<std::int64_t>(t.tv_sec) * kSecond + t.tv_nsec;
  };
  const std::int64_t m = st.st_mtim.tv_nsec;
  const std::int64_t c = st.st_ctim.tv_nsec;
  std::int64_t granularity = 2 * kSecond;
  if (m != 0 || c != 0) {
    granularity = 1;
    while (granularity < kSecond / 10 && m % (granularity * 10) == 0 &&
           c % (granularity * 10) == 0) {
      granularity *= 10;
    }
  }
  struct timespec tick {};
  if (::clock_getres(CLOCK_REALTIME_COARSE, &tick) != 0) tick.tv_nsec = 10'000'000;
  const std::int64_t changed =
      mtime_too ? std::max(ns(st.st_mtim), ns(st.st_ctim)) : ns(st.st_ctim);
  const std::int64_t deadline = changed + granularity + ns(tick) + 1;
  const struct timespec until = {static_cast<time_t>(deadline / kSecond),
                                 static_cast<long>(deadline % kSecond)};
  while (::clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &until, nullptr) == EINTR) {
  }
}

// Writes `text` to `path`, as an editor saves a file, then waits until it has settled (settle()):
// the tests' edits come before their compiles as a person's do. A test of a write just before or
// during a compile writes otherwise.
inline void write_text(const std::filesystem::path& path, const std::string& text) {
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
  }
  settle(path);
}

inline bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// A fresh directory, removed with everything in it at scope exit (directories a test made
// read-only included).
class temp_dir {
 public:
  temp_dir() : temp_dir(std::filesystem::temp_directory_path()) {}
  // In `parent` rather than the temp directory.
  explicit temp_dir(const std::filesystem::path& parent) {
    std::string pattern = (parent / "cucore-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    namespace fs = std::filesystem;
    std::error_code ec;
    // Make every directory removable again first.
    ::chmod(path_.c_str(), 0700);
    for (auto it = fs::recursive_directory_iterator(path_, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_directory(ec) && !it->is_symlink(ec)) ::chmod(it->path().c_str(), 0700);
    }
    fs::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Sets (or, with nullptr, unsets) an environment variable for a scope, restoring what was there.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;
  ~scoped_env() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The stress tests' scale: the environment variable CUCORE_STRESS_SCALE (a float > 0), else 1.0.
inline double stress_scale() {
  const char* text = std::getenv("CUCORE_STRESS_SCALE");
  if (text == nullptr || *text == '\0') return 1.0;
  const double v = std::strtod(text, nullptr);
  return v > 0 && std::isfinite(v) ? v : 1.0;
}

// `count` scaled by CUCORE_STRESS_SCALE, but never below `floor`.
inline std::uint64_t scaled(std::uint64_t count, std::uint64_t floor) {
  return std::max<std::uint64_t>(
      floor, static_cast<std::uint64_t>(std::llround(static_cast<double>(count) * stress_scale())));
}

}  // namespace cucore::testing
