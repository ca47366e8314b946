// The SQLite cache's schema: creating it in an empty file, and recognising it (or something
// else) in an existing one.
#include <algorithm>
#include <string>
#include <vector>

#include "cache/sqlite/internal.hpp"

namespace cucore {
namespace detail::sqlite {
namespace {

struct schema_object {
  std::string_view type;
  std::string_view name;
  std::string_view sql;
};
// Sorted by name. The text is what sqlite_master keeps, compared verbatim on open.
constexpr schema_object kSchema[] = {
    {"table", "blobs", "CREATE TABLE blobs(id INTEGER PRIMARY KEY, value BLOB NOT NULL)"},
    {"table", "entries",
     "CREATE TABLE entries(key BLOB PRIMARY KEY, id INTEGER NOT NULL, size INTEGER NOT NULL, "
     "atime INTEGER NOT NULL, written INTEGER NOT NULL) WITHOUT ROWID"},
    {"index", "entries_by_atime", "CREATE INDEX entries_by_atime ON entries(atime)"},
    {"trigger", "entries_delete",
     "CREATE TRIGGER entries_delete AFTER DELETE ON entries BEGIN "
     "DELETE FROM blobs WHERE id = old.id; "
     "UPDATE meta SET total_bytes = total_bytes - old.size, entry_count = entry_count - 1; END"},
    {"trigger", "entries_insert",
     "CREATE TRIGGER entries_insert AFTER INSERT ON entries BEGIN "
     "UPDATE meta SET total_bytes = total_bytes + new.size, entry_count = entry_count + 1; END"},
    {"trigger", "entries_resize",
     "CREATE TRIGGER entries_resize AFTER UPDATE OF size ON entries BEGIN "
     "UPDATE meta SET total_bytes = total_bytes - old.size + new.size; END"},
    {"table", "meta",
     "CREATE TABLE meta(total_bytes INTEGER NOT NULL, entry_count INTEGER NOT NULL)"},
};

}  // namespace

std::int64_t pragma_int(sqlite3* db, const char* sql) {
  statement s(db, sql, false);
  return s.step() ? s.column_int64(0) : 0;
}

std::string pragma_text(sqlite3* db, const char* sql) {
  statement s(db, sql, false);
  return s.step() ? std::string(s.column_text(0)) : std::string();
}

inspection inspect(sqlite3* db) {
  // One read transaction: a peer creating the schema must not be seen half-way (tables without
  // the application id, read in separate autocommit statements, would look foreign).
  const bool own_transaction = sqlite3_get_autocommit(db) != 0;
  struct end_read {
    sqlite3* db;
    bool active;
    ~end_read() {
      if (active && sqlite3_get_autocommit(db) == 0) {
        sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
      }
    }
  } end{db, false};
  try {
    if (own_transaction) {
      detail::sqlite::exec(db, "BEGIN");
      end.active = true;
    }
    const std::int64_t app = pragma_int(db, "PRAGMA application_id");
    const std::int64_t version = pragma_int(db, "PRAGMA user_version");
    std::vector<schema_object> found;
    std::vector<std::string> text;  // owns found's views
    {
      statement s(db,
                  "SELECT type, name, sql FROM sqlite_master "
                  "WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
                  false);
      while (s.step()) {
        text.emplace_back(s.column_text(0));
        text.emplace_back(s.column_text(1));
        text.emplace_back(s.column_text(2));
      }
    }
    for (std::size_t i = 0; i < text.size(); i += 3)
      found.push_back({text[i], text[i + 1], text[i + 2]});
    if (app == 0 && version == 0 && found.empty()) return {verdict::empty, {}};
    if (app != kApplicationId) {
      return {verdict::foreign, "not a cucore cache (application_id " + std::to_string(app) + ", " +
                                    std::to_string(found.size()) + " schema objects)"};
    }
    if (version > kSchemaVersion) {
      return {verdict::newer, "written by a newer cucore (schema version " +
                                  std::to_string(version) + "; this one reads version " +
                                  std::to_string(kSchemaVersion) + ")"};
    }
    if (version < kSchemaVersion) {
      return {verdict::foreign,
              "an old cucore cache (schema version " + std::to_string(version) + ")"};
    }
    const bool same = std::equal(std::begin(kSchema), std::end(kSchema), found.begin(), found.end(),
                                 [](const schema_object& a, const schema_object& b) {
                                   return a.type == b.type && a.name == b.name && a.sql == b.sql;
                                 });
    if (!same) return {verdict::foreign, "unexpected schema"};
    return {verdict::ok, {}};
  } catch (const failure& f) {
    if (f.busy()) return {verdict::busy, f.what()};
    if (f.corrupt()) return {verdict::corrupt, f.what()};
    return {verdict::failed, f.what()};
  }
}

std::string integrity_check(sqlite3* db) {
  statement s(db, "PRAGMA integrity_check(1)", false);
  if (!s.step()) return "integrity_check returned nothing";
  std::string result(s.column_text(0));
  return result == "ok" ? std::string() : "integrity_check: " + result;
}

}  // namespace detail::sqlite

using namespace detail::sqlite;

// Creates the schema in an empty database; a no-op when a peer got there first.
void sqlite_program_cache::impl::create_schema(sqlite3* handle) {
  using detail::sqlite::exec;
  const bool wal = options.journal == sqlite_journal::wal ||
                   (options.journal == sqlite_journal::automatic && !fs.network);
  // These only take effect on an empty database; page_size and auto_vacuum must precede the first
  // table, page_size also the switch to WAL. A file that exists keeps its page size.
  exec(handle, ("PRAGMA page_size = " + std::to_string(kPageSize)).c_str());
  exec(handle, "PRAGMA auto_vacuum = INCREMENTAL");
  retry_when_busy(options.busy_timeout, [&] {
    pragma_text(handle, wal ? "PRAGMA journal_mode = WAL" : "PRAGMA journal_mode = DELETE");
  });
  exec(handle, "BEGIN IMMEDIATE");
  try {
    if (inspect(handle).kind != verdict::empty) {
      exec(handle, "ROLLBACK");
      return;
    }
    for (const auto& object : kSchema) exec(handle, std::string(object.sql).c_str());
    exec(handle, "INSERT INTO meta(total_bytes, entry_count) VALUES (0, 0)");
    exec(handle, ("PRAGMA application_id = " + std::to_string(kApplicationId)).c_str());
    exec(handle, ("PRAGMA user_version = " + std::to_string(kSchemaVersion)).c_str());
    exec(handle, "COMMIT");
  } catch (...) {
    if (sqlite3_get_autocommit(handle) == 0)
      sqlite3_exec(handle, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

}  // namespace cucore
