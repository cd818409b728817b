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

} // namespace oncegate::test
