// Shared helpers for the CPU test suites. Standard library and POSIX only (no cucore), so that
// every test can include it; data_file() only where CUCORE_TEST_DATA_DIR is defined.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

namespace cucore::testing {

inline constexpr const char* kArch = "sm_90";

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

#ifdef CUCORE_TEST_DATA_DIR
inline std::string data_file(const std::string& name) {
  return read_text(std::filesystem::path(CUCORE_TEST_DATA_DIR) / name);
}
#endif

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// A fresh directory, removed with everything in it at scope exit (directories a test made
// read-only included).
class temp_dir {
 public:
  temp_dir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cucore-test-XXXXXX").string();
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
