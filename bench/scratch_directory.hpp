// A benchmark run's scratch directory under the system's temporary directory, removed when the
// program exits (by a static's destructor: an atexit handler registered while that static was
// being made would run after its destruction and remove nothing).
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace cucore::bench {

class scratch_directory {
 public:
  // `prefix`: the directory's name before mkdtemp's six random characters.
  explicit scratch_directory(const std::string& prefix) {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  scratch_directory(const scratch_directory&) = delete;
  scratch_directory& operator=(const scratch_directory&) = delete;
  ~scratch_directory() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace cucore::bench
