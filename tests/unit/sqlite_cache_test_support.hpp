// The SQLite cache tests' shared pieces (sqlite_cache*_test.cpp): values of a given size, cache
// files populated, patched and measured, and the fixture of a fresh cache file.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/entry_format.hpp"
#include "cache/sqlite/filesystem.hpp"
#include "cache/sqlite/tuning.hpp"
#include "cache_test_support.hpp"
#include "cache_workload.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "process_support.hpp"
#include "small_filesystem.hpp"
#include "sqlite_test_support.hpp"
#include "test_support.hpp"

namespace cucore::sqlite_testing {

namespace fs = std::filesystem;

inline object_code code_of_size(std::size_t n, const std::string& name = "c", unsigned seed = 7) {
  std::vector<std::byte> bytes(n);
  std::mt19937 rng(seed);
  for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xff);
  return object_code(code_type::cubin, std::move(bytes), name);
}

// Bytes an entry takes in the cache (the entry format: header + code).
inline std::uint64_t stored_size(std::string_view key, const object_code& code) {
  return detail::encode_entry(std::as_bytes(std::span<const char>(key.data(), key.size())), code)
      .size();
}

inline std::uintmax_t size_on_disk(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

// Overwrites `bytes.size()` bytes at `offset` in place.
inline void patch_file(const fs::path& p, std::uintmax_t offset, const std::string& bytes) {
  std::fstream f(p, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A cache file with `n` entries "k0".."k<n-1>" of `size` bytes, closed (checkpointed, no -wal).
inline void populate(const fs::path& file, int n, std::size_t size = 1000) {
  sqlite_program_cache cache(file);
  for (int i = 0; i < n; ++i) cache.put("k" + std::to_string(i), code_of_size(size, "n", i));
}

struct cache_fixture : ::testing::Test {
  testing::temp_dir dir;
  fs::path file = dir.path() / "sub" / "dir" / "cache.db";
};

using SqliteCache = cache_fixture;

// Whether this process has `file` itself (not its -shm) memory-mapped: what PRAGMA mmap_size
// does once a read goes through the map.
inline bool mapped(const fs::path& file) {
  const std::string path = fs::canonical(file).string();
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.size() >= path.size() &&
        line.compare(line.size() - path.size(), path.size(), path) == 0)
      return true;
  }
  return false;
}

}  // namespace cucore::sqlite_testing
