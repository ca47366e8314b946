// RAII owners for SQLite connections, statements and blob readers, and the failure type the
// SQLite cache uses internally.
#pragma once

#include <sqlite3.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace cucore::detail::sqlite {

// An SQLite call failed. `code` is the extended result code; `primary()` its low byte.
class failure : public std::runtime_error {
 public:
  failure(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const noexcept { return code_; }
  int primary() const noexcept { return code_ & 0xff; }
  // Another connection holds the lock beyond the busy timeout.
  bool busy() const noexcept { return primary() == SQLITE_BUSY || primary() == SQLITE_LOCKED; }
  // The file is not a database, or a page is damaged.
  bool corrupt() const noexcept {
    return primary() == SQLITE_CORRUPT || primary() == SQLITE_NOTADB;
  }

 private:
  int code_;
};

// SQLite's words for `code`, the failure of the last call on `db` (null: none open). A full
// file system is named as such, with the database file: SQLite says "database or disk is full"
// (SQLITE_FULL) or, for a write to the WAL index, a sync or a truncate that hit it, only "disk I/O
// error" (SQLITE_IOERR_*, with errno ENOSPC or EDQUOT).
inline std::string describe(sqlite3* db, int code) {
  const int primary = code & 0xff;
  const int system = db != nullptr ? sqlite3_system_errno(db) : 0;
  const bool no_space = primary == SQLITE_FULL || (primary == SQLITE_IOERR && system == ENOSPC);
  const bool quota = primary == SQLITE_IOERR && system == EDQUOT;
  if (no_space || quota) {
    const char* file = db != nullptr ? sqlite3_db_filename(db, "main") : nullptr;
    const std::string where =
        file != nullptr && *file != '\0' ? std::string(file) : std::string("the cache file");
    return (no_space ? "no space left on device: the file system holding " + where + " is full"
                     : "disk quota exceeded on the file system holding " + where) +
           " (free space there, or move the cache)";
  }
  return db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(code);
}

[[noreturn]] inline void fail(sqlite3* db, int code, std::string_view what) {
  std::string message(what);
  message += ": ";
  message += describe(db, code);
  throw failure(code, message);
}

struct connection_closer {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
using connection = std::unique_ptr<sqlite3, connection_closer>;

// Runs SQL that returns no rows we need (several statements allowed).
inline void exec(sqlite3* db, const char* sql) {
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) fail(db, rc, sql);
}

// A prepared statement; finalized by the destructor.
class statement {
 public:
  statement() = default;
  statement(sqlite3* db, std::string_view sql, bool persistent = true) : db_(db) {
    const int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                                      persistent ? SQLITE_PREPARE_PERSISTENT : 0, &stmt_, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(stmt_);
      stmt_ = nullptr;
      fail(db, rc, "prepare");
    }
  }
  statement(const statement&) = delete;
  statement& operator=(const statement&) = delete;
  statement(statement&& other) noexcept
      : db_(std::exchange(other.db_, nullptr)), stmt_(std::exchange(other.stmt_, nullptr)) {}
  statement& operator=(statement&& other) noexcept {
    if (this != &other) {
      sqlite3_finalize(stmt_);
      db_ = std::exchange(other.db_, nullptr);
      stmt_ = std::exchange(other.stmt_, nullptr);
    }
    return *this;
  }
  ~statement() { sqlite3_finalize(stmt_); }

  explicit operator bool() const noexcept { return stmt_ != nullptr; }
  sqlite3_stmt* get() const noexcept { return stmt_; }

  // The blob must stay alive until the statement is reset (bound without a copy).
  void bind(int index, std::span<const std::byte> blob) {
    // A null pointer would bind NULL: an empty blob is a zero-length zeroblob.
    const int rc =
        blob.empty() ? sqlite3_bind_zeroblob(stmt_, index, 0)
                     : sqlite3_bind_blob64(stmt_, index, blob.data(),
                                           static_cast<sqlite3_uint64>(blob.size()), SQLITE_STATIC);
    if (rc != SQLITE_OK) fail(db_, rc, "bind");
  }
  void bind(int index, std::int64_t value) {
    const int rc = sqlite3_bind_int64(stmt_, index, value);
    if (rc != SQLITE_OK) fail(db_, rc, "bind");
  }

  // True for a row, false when done; throws failure otherwise.
  bool step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(db_, rc, sqlite3_sql(stmt_));
  }
  // Steps to the end, ignoring rows.
  void run() {
    while (step()) {
    }
  }

  std::int64_t column_int64(int column) const noexcept {
    return sqlite3_column_int64(stmt_, column);
  }
  bool column_is_null(int column) const noexcept {
    return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
  }
  // Valid until the next step or reset.
  std::span<const std::byte> column_blob(int column) const noexcept {
    const void* data = sqlite3_column_blob(stmt_, column);
    const auto size = static_cast<std::size_t>(sqlite3_column_bytes(stmt_, column));
    if (data == nullptr) return {};
    return {static_cast<const std::byte*>(data), size};
  }
  std::string_view column_text(int column) const noexcept {
    const auto* data = sqlite3_column_text(stmt_, column);
    const auto size = static_cast<std::size_t>(sqlite3_column_bytes(stmt_, column));
    if (data == nullptr) return {};
    return {reinterpret_cast<const char*>(data), size};
  }

  void reset() noexcept {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

// Resets a statement at scope exit, so that no read transaction outlives its use.
class statement_scope {
 public:
  explicit statement_scope(statement& s) noexcept : s_(s) {}
  statement_scope(const statement_scope&) = delete;
  statement_scope& operator=(const statement_scope&) = delete;
  ~statement_scope() { s_.reset(); }
  statement* operator->() const noexcept { return &s_; }
  statement& operator*() const noexcept { return s_; }

 private:
  statement& s_;
};

// Incremental blob I/O on one value (read-only); closed by the destructor. It joins the
// connection's current read transaction, so open it while the statement that found the row is
// still active to read the same snapshot.
class blob_reader {
 public:
  blob_reader(sqlite3* db, const char* table, const char* column, sqlite3_int64 rowid) : db_(db) {
    const int rc = sqlite3_blob_open(db, "main", table, column, rowid, 0, &blob_);
    if (rc != SQLITE_OK) {
      sqlite3_blob_close(blob_);
      blob_ = nullptr;
      fail(db, rc, "blob open");
    }
  }
  blob_reader(const blob_reader&) = delete;
  blob_reader& operator=(const blob_reader&) = delete;
  ~blob_reader() { sqlite3_blob_close(blob_); }

  std::size_t size() const noexcept { return static_cast<std::size_t>(sqlite3_blob_bytes(blob_)); }
  // Reads the first out.size() bytes.
  void read(std::span<std::byte> out) {
    const int rc = sqlite3_blob_read(blob_, out.data(), static_cast<int>(out.size()), 0);
    if (rc != SQLITE_OK) fail(db_, rc, "blob read");
  }

 private:
  sqlite3* db_;
  sqlite3_blob* blob_ = nullptr;
};

}  // namespace cucore::detail::sqlite
