// Compiler versions remembered on disk, so that a cache hit in a fresh process never loads a
// compiler library (opening libnvrtc costs ~8 ms warm and over 200 ms cold; a hit costs µs).
//
// Each remembered version is keyed by the full identity of the library file it was read from:
// its resolved path, device, inode, size, mtime and ctime. Replacing, upgrading or rewriting the
// library in place changes the identity, so a stale version can never be used. The memo is a
// small checksummed, versioned file beside a cache (key_files.hpp says how it is read and whose
// it may be); it is rewritten atomically (temp file + rename), and losing it, or a damaged one,
// only costs one probe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loader/shared_library.hpp"

namespace cucore::detail {

class compiler_version_memo {
 public:
  explicit compiler_version_memo(std::filesystem::path file);

  // The version remembered for `library` ("nvrtc", "nvvm", "nvjitlink") read from `file`.
  std::optional<std::string> lookup(std::string_view library, const file_identity& file);
  // Remembers it (best effort: an unwritable location is silently skipped).
  void remember(std::string_view library, const file_identity& file,
                std::string_view version) noexcept;

  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  struct record {
    std::string library;
    file_identity file;
    std::string version;
  };
  void load_locked();
  // The records in the file, or none when it is missing, untrusted, damaged or foreign.
  std::vector<record> read_file() const;

  std::filesystem::path file_;
  std::mutex mutex_;
  bool loaded_ = false;
  std::vector<record> records_;
};

}  // namespace cucore::detail
