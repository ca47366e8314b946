// Raw SQLite for the SQLite cache tests: a plain connection, as another program would have, to
// inspect, lock and damage cache files; and the files the cache moved aside. Then what the SQLite
// cache's tests (sqlite_cache*_test.cpp) share: values of a given size, cache files filled, patched
// and looked at, and the fixture of a cache file in a fresh directory.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "cache/entry_format.hpp"
#include "cucore/cache/sqlite.hpp"
#include "test_support.hpp"

namespace cucore::testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A plain SQLite connection, as another program would have.
class raw_db {
 public:
  explicit raw_db(const std::filesystem::path& file, int busy_timeout_ms = 5000) {
    if (sqlite3_open_v2(file.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
        SQLITE_OK) {
      throw std::runtime_error("raw_db: cannot open " + file.string());
    }
    sqlite3_busy_timeout(db_, busy_timeout_ms);
  }
  raw_db(const raw_db&) = delete;
  raw_db& operator=(const raw_db&) = delete;
  ~raw_db() { sqlite3_close_v2(db_); }
  sqlite3* get() const { return db_; }

  // SQLITE_OK or the error.
  int try_exec(const std::string& sql) {
    return sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
  }
  void exec(const std::string& sql) {
    if (try_exec(sql) != SQLITE_OK) {
      throw std::runtime_error("raw_db: " + sql + ": " + sqlite3_errmsg(db_));
    }
  }
  // The first column of the first row, as text ("" when there is none).
  std::string text(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) {
      throw std::runtime_error("raw_db: " + sql + ": " + sqlite3_errmsg(db_));
    }
    std::string out;
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW && sqlite3_column_text(s, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      throw std::runtime_error("raw_db: " + sql + ": " + sqlite3_errstr(rc));
    }
    return out;
  }
  long long integer(const std::string& sql) { return std::stoll(text(sql)); }

 private:
  sqlite3* db_ = nullptr;
};

// Files in `dir` named <file>.corrupt-* (the databases moved aside, not their journals).
inline std::vector<std::filesystem::path> moved_aside(const std::filesystem::path& file) {
  std::vector<std::filesystem::path> out;
  const std::string prefix = file.filename().string() + ".corrupt-";
  for (const auto& e : std::filesystem::directory_iterator(file.parent_path())) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    if (name.ends_with("-wal") || name.ends_with("-shm") || name.ends_with("-journal")) continue;
    out.push_back(e.path());
  }
  return out;
}

// An entry of `n` random bytes (from `seed`) named `name`.
inline object_code code_of_size(std::size_t n, const std::string& name = "c", unsigned seed = 7) {
  std::vector<std::byte> bytes(n);
  std::mt19937 rng(seed);
  for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xff);
  return object_code(code_type::cubin, std::move(bytes), name);
}

// Bytes an entry takes in the cache (the entry format: header + code).
inline std::uint64_t stored_size(std::string_view key, const object_code& code) {
  return cucore::detail::encode_entry(std::as_bytes(std::span<const char>(key.data(), key.size())),
                                      code)
      .size();
}

inline std::uintmax_t size_on_disk(const std::filesystem::path& p) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(p, ec);
  return ec ? 0 : n;
}

// Overwrites `bytes.size()` bytes at `offset` in place.
inline void patch_file(const std::filesystem::path& p, std::uintmax_t offset,
                       const std::string& bytes) {
  std::fstream f(p, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A cache file with `n` entries "k0".."k<n-1>" of `size` bytes, closed (checkpointed, no -wal).
inline void populate(const std::filesystem::path& file, int n, std::size_t size = 1000) {
  sqlite_program_cache cache(file);
  for (int i = 0; i < n; ++i) cache.put("k" + std::to_string(i), code_of_size(size, "n", i));
}

// Whether this process has `file` itself (not its -shm) memory-mapped: what PRAGMA mmap_size
// does once a read goes through the map.
inline bool mapped(const std::filesystem::path& file) {
  const std::string path = std::filesystem::canonical(file).string();
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.size() >= path.size() &&
        line.compare(line.size() - path.size(), path.size(), path) == 0)
      return true;
  }
  return false;
}

// The SQLite cache tests' fixture: a cache file, yet to be made, two directories down in a fresh
// temp directory.
struct SqliteCache : ::testing::Test {
  temp_dir dir;
  std::filesystem::path file = dir.path() / "sub" / "dir" / "cache.db";
};

}  // namespace cucore::testing
