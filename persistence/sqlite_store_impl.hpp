// The inside of `sqlite_store` (pimpl), shared by its implementation
// files; nothing outside persistence/sqlite_*.cpp includes it, so sqlite3.h
// stays inside them. The statements themselves are in sqlite_schema.cpp.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <thread>

#include <sqlite3.h>

#include <caf/error.hpp>

#include "persistence/sqlite_store.hpp"

namespace oncegate::persistence::detail {

// Prepared statements, by name (SQL text: `statements`).
enum stmt_id : size_t {
  stmt_begin,
  stmt_begin_read,
  stmt_commit,
  stmt_rollback,
  stmt_select_record,
  stmt_insert_new,
  stmt_upsert_record,
  stmt_complete,
  stmt_mark_in_doubt,
  stmt_release,
  stmt_release_settled,
  stmt_list_state,
  stmt_doubt,
  stmt_purge,
  stmt_next_expiry,
  stmt_count,
  stmt_get_version,
  stmt_set_version,
  stmt_get_applied,
  stmt_set_applied,
  stmt_get_clock,
  stmt_set_clock,
  stmt_unsettled,
  stmt_defer,
  stmt_start_attempt,
  stmt_fail,
  stmt_redeliver,
  stmt_due,
  stmt_next_delivery,
  stmt_requeue,
  stmt_reconcile_wait,
  stmt_count_grants,
  stmt_insert_grant,
  stmt_trim_grants,
  stmt_paused,
  stmt_pause,
  stmt_resume,
  stmt_list_pauses,
  stmt_count_ids, // number of statements
};

/// The SQL of each statement (sqlite_schema.cpp).
extern const char* const statements[stmt_count_ids];

/// Creates the meta table (schema version, applied index, store clock).
extern const char* const create_meta_sql;

/// `errc::storage_failure` with `what` and SQLite's message.
caf::error sqlite_error(sqlite3* db, const char* what);

/// `errc::schema_too_new` for a database or image of schema `found`, its
/// message starting with `what`.
caf::error schema_too_new(const std::string& what, int64_t found);

// Resets a statement and clears its bindings when leaving a scope, so that
// an early return never leaves a statement busy (which would keep a read
// transaction open and block checkpoints).
struct stmt_guard {
  sqlite3_stmt* stmt;
  ~stmt_guard() {
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
  }
};

inline void bind_text(sqlite3_stmt* st, int idx, const std::string& str) {
  sqlite3_bind_text(st, idx, str.data(), static_cast<int>(str.size()),
                    SQLITE_STATIC);
}

inline void bind_blob(sqlite3_stmt* st, int idx, const std::string& str) {
  // A zero-length blob must not bind as NULL (the column is NOT NULL).
  sqlite3_bind_blob(st, idx, str.empty() ? "" : str.data(),
                    static_cast<int>(str.size()), SQLITE_STATIC);
}

inline std::string column_blob(sqlite3_stmt* st, int col) {
  auto ptr = static_cast<const char*>(sqlite3_column_blob(st, col));
  auto len = sqlite3_column_bytes(st, col);
  return ptr ? std::string(ptr, static_cast<size_t>(len)) : std::string{};
}

// Runs `PASSIVE` checkpoints on its own connection whenever the writer
// reports that the WAL has grown past the threshold. PASSIVE never blocks
// the writer; the writer restarts the WAL once a checkpoint caught up.
// Between checkpoints it writes the WAL's dirty pages out when asked
// (`store_options::wal_writeout_pages`), off the writer's thread.
class checkpointer {
public:
  checkpointer(sqlite3* db, std::string wal_path);

  ~checkpointer();

  void poke();

  void write_out();

  uint64_t write_outs() const {
    return write_outs_.load(std::memory_order_relaxed);
  }

private:
  void run();

  void write_out_now();

  sqlite3* db_;
  std::string wal_path_;
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool requested_ = false;
  bool write_out_ = false;
  std::atomic<uint64_t> write_outs_{0};
  std::thread thread_;
};

} // namespace oncegate::persistence::detail

namespace oncegate::persistence {

struct sqlite_store::impl {
  sqlite3* db = nullptr;
  sqlite3_stmt* stmts[detail::stmt_count_ids] = {};
  store_options opts;
  int version = 0;
  bool in_txn = false;
  /// Opened by `open_reader`: never writes, never checkpoints.
  bool read_only = false;
  std::unique_ptr<detail::checkpointer> ckpt;
  /// WAL pages when the checkpointer was last asked to write it out (the
  /// writer's thread only).
  uint32_t written_out_pages = 0;

  ~impl();

  // Called by SQLite after each commit with the WAL size in pages.
  static int on_wal_commit(void* ctx, sqlite3*, const char*, int pages);

  // Reads the current row of `stmt_select_record`.
  static record read_record(sqlite3_stmt* st, const std::string& route,
                            const std::string& key);

  caf::error exec(const char* sql);

  // What refuses a new record of claim `req` at `now_ms`, if anything: a
  // pause of its route, then its guards (stale, its cap reached).
  caf::expected<std::optional<decision>> refusal_of(const claim_request& req,
                                                    int64_t now_ms);

  // Counts a record `req` created at `now_ms` under its route's cap (none:
  // nothing), and drops a bounded chunk of what no cap counts any more.
  caf::error count_grant(const claim_request& req, int64_t now_ms);

  // Steps a statement that returns no rows.
  caf::error step_done(detail::stmt_id id);

  // Prepares every statement not prepared yet.
  caf::error prepare_all();

  caf::expected<int> read_version();

  // Brings the schema to `schema_version`, one transaction per step, so a
  // crash during a migration leaves the previous version intact.
  caf::error migrate();
};

} // namespace oncegate::persistence
