// Raw SQLite for the SQLite cache tests: a plain connection, as another program would have, to
// inspect, lock and damage cache files; and the files the cache moved aside.
#pragma once

#include <sqlite3.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace cucore::testing {

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

}  // namespace cucore::testing
