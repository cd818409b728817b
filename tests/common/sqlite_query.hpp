#pragma once

// Reading a database file behind the code under test's back: a connection
// of its own, opened and closed for the one query.

#include <string>

#include <sqlite3.h>

namespace oncegate::test {

/// The integer in the first column of the first row that `sql` answers in
/// the database at `path`, opened with `flags` through `vfs` (nullptr: the
/// default VFS); -1 when there is none (no such table, say).
inline int query_int(const std::string& path, const char* sql,
                     int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                     const char* vfs = nullptr) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, flags, vfs);
  sqlite3_stmt* st = nullptr;
  int n = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK
      && sqlite3_step(st) == SQLITE_ROW)
    n = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

/// Runs `sql` (one or more statements) on the database at `path` through a
/// connection of its own; returns SQLite's result code. Without
/// `checkpoint_on_close`, a WAL database keeps its last commits in the
/// -wal file when the connection closes.
inline int exec_sql(const std::string& path, const char* sql,
                    bool checkpoint_on_close = true) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open(path.c_str(), &db);
  if (rc == SQLITE_OK)
    rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (!checkpoint_on_close)
    sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  sqlite3_close(db);
  return rc;
}

} // namespace oncegate::test
