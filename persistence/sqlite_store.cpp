#include "persistence/sqlite_store.hpp"

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common/errc.hpp"
#include "common/mutant.hpp"
#include "common/logging.hpp"

namespace oncegate::persistence {

namespace {

// -- all SQL of oncegate ------------------------------------------------------

// Forward migrations: entry N brings a database from version N to N + 1.
// Never edit a released entry; append a new one.
const char* const migrations[] = {
  // 0 -> 1: the record table and its expiry index (the durable alarms).
  "CREATE TABLE records("
  "  route TEXT NOT NULL,"
  "  key TEXT NOT NULL,"
  "  state INTEGER NOT NULL,"
  "  fingerprint BLOB NOT NULL,"
  "  first_seen_ms INTEGER NOT NULL,"
  "  expires_at_ms INTEGER NOT NULL,"
  "  status INTEGER NOT NULL,"
  "  response BLOB NOT NULL,"
  "  signal BLOB NOT NULL,"
  "  PRIMARY KEY (route, key));"
  "CREATE INDEX records_by_expiry ON records(expires_at_ms);",
  // 1 -> 2: stored response headers; a small index of unsettled records
  // (in flight or in doubt) for recovery and operator listings.
  "ALTER TABLE records ADD COLUMN headers BLOB NOT NULL DEFAULT x'';"
  "CREATE INDEX records_unsettled ON records(route, state, key)"
  "  WHERE state != 1;",
  // 2 -> 3: who made each claim (node and request attempt), so that an
  // attempt asking again after a lost answer is recognised, and a node's
  // in-flight records can be doubted when it restarts.
  "ALTER TABLE records ADD COLUMN owner INTEGER NOT NULL DEFAULT 0;"
  "ALTER TABLE records ADD COLUMN request_id INTEGER NOT NULL DEFAULT 0;",
  // 3 -> 4: only completed records expire (in-flight and in-doubt ones wait
  // for a transition), so the expiry index holds completed records only and
  // purges never meet an unsettled one.
  "DROP INDEX records_by_expiry;"
  "CREATE INDEX records_expiry ON records(expires_at_ms) WHERE state = 1;",
};

static_assert(std::size(migrations) == sqlite_store::schema_version);

constexpr const char* create_meta_sql
  = "CREATE TABLE IF NOT EXISTS meta("
    "  name TEXT PRIMARY KEY,"
    "  value INTEGER NOT NULL) WITHOUT ROWID";

// Prepared statements, by name.
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
  stmt_count_ids, // number of statements
};

const char* const statements[stmt_count_ids] = {
  // stmt_begin: IMMEDIATE takes the write lock up front, so a commit cannot
  // fail on lock upgrade half way through a batch.
  "BEGIN IMMEDIATE",
  // stmt_begin_read: the read lock (and so the state it sees) is taken by
  // the first read inside the transaction.
  "BEGIN DEFERRED",
  // stmt_commit
  "COMMIT",
  // stmt_rollback
  "ROLLBACK",
  // stmt_select_record
  "SELECT state, fingerprint, first_seen_ms, expires_at_ms, status,"
  "       response, signal, headers, owner, request_id"
  "  FROM records WHERE route = ?1 AND key = ?2",
  // stmt_insert_new: most claims are for new keys; one statement decides
  // them (a conflict changes nothing and falls back to reading the row).
  "INSERT INTO records(route, key, state, fingerprint, first_seen_ms,"
  "  expires_at_ms, status, response, signal, headers, owner, request_id)"
  "  VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
  "  ON CONFLICT(route, key) DO NOTHING",
  // stmt_upsert_record
  "INSERT OR REPLACE INTO records(route, key, state, fingerprint,"
  "  first_seen_ms, expires_at_ms, status, response, signal, headers,"
  "  owner, request_id)"
  "  VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
  // stmt_complete: from in_flight (0) or in_doubt (2) to completed (1).
  // A completion that comes late (an in-doubt record settled after its TTL)
  // still protects the key for a whole TTL from now (?8): otherwise the
  // sender's next retry would find it expired and execute again.
  "UPDATE records SET state = 1, status = ?3, response = ?4, headers = ?6,"
  "  expires_at_ms = MAX(expires_at_ms, ?8 + (expires_at_ms - first_seen_ms))"
  "  WHERE route = ?1 AND key = ?2 AND state IN (0, 2)"
  "    AND (?5 = 0 OR first_seen_ms = ?5) AND (?7 = 0 OR request_id = ?7)",
  // stmt_mark_in_doubt: from in_flight (0) to in_doubt (2).
  "UPDATE records SET state = 2"
  "  WHERE route = ?1 AND key = ?2 AND state = 0"
  "    AND (?3 = 0 OR first_seen_ms = ?3) AND (?4 = 0 OR request_id = ?4)",
  // stmt_release
  "DELETE FROM records"
  "  WHERE route = ?1 AND key = ?2 AND (?3 = 0 OR first_seen_ms = ?3)"
  "    AND (?4 = 0 OR request_id = ?4)",
  // stmt_release_settled: like stmt_release, but never an in-flight (0)
  // record: its forward still runs.
  "DELETE FROM records"
  "  WHERE route = ?1 AND key = ?2 AND (?3 = 0 OR first_seen_ms = ?3)"
  "    AND (?4 = 0 OR request_id = ?4) AND state != 0",
  // stmt_list_state: through the unsettled index (state != 1; only for
  // the unsettled states it lists).
  "SELECT state, fingerprint, first_seen_ms, expires_at_ms, status,"
  "       response, signal, headers, owner, request_id, key"
  "  FROM records WHERE route = ?1 AND state = ?2 AND key > ?3"
  "    AND state != 1"
  "  ORDER BY key LIMIT ?4",
  // stmt_doubt: in_flight (0) -> in_doubt (2) for the claims of owner ?1
  // (0: any) first seen before ?2. `state != 1` repeats the partial index's
  // WHERE so that SQLite uses the index instead of scanning every record.
  "UPDATE records SET state = 2 WHERE state = 0 AND state != 1"
  "  AND (?1 = 0 OR owner = ?1) AND first_seen_ms < ?2",
  // stmt_purge: completed records only (the one expiry rule, see
  // `live`), oldest first through the expiry index, bounded.
  "DELETE FROM records WHERE rowid IN ("
  "  SELECT rowid FROM records WHERE state = 1 AND expires_at_ms <= ?1"
  "  ORDER BY expires_at_ms LIMIT ?2)",
  // stmt_next_expiry: of completed records (the others never expire).
  "SELECT MIN(expires_at_ms) FROM records WHERE state = 1",
  // stmt_count
  "SELECT COUNT(*) FROM records",
  // stmt_get_version
  "SELECT value FROM meta WHERE name = 'schema_version'",
  // stmt_set_version
  "INSERT OR REPLACE INTO meta(name, value) VALUES('schema_version', ?1)",
  // stmt_get_applied
  "SELECT value FROM meta WHERE name = 'applied_index'",
  // stmt_set_applied
  "INSERT OR REPLACE INTO meta(name, value) VALUES('applied_index', ?1)",
  // stmt_get_clock
  "SELECT value FROM meta WHERE name = 'clock_ms'",
  // stmt_set_clock
  "INSERT OR REPLACE INTO meta(name, value) VALUES('clock_ms', ?1)",
  // stmt_unsettled: through the unsettled index.
  "SELECT route, state, COUNT(*) FROM records WHERE state != 1"
  "  GROUP BY route, state",
};

caf::error sqlite_error(sqlite3* db, const char* what) {
  std::string ctx = what;
  ctx += ": ";
  ctx += db ? sqlite3_errmsg(db) : "out of memory";
  return make_error(errc::storage_failure, std::move(ctx));
}

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

void bind_text(sqlite3_stmt* st, int idx, const std::string& str) {
  sqlite3_bind_text(st, idx, str.data(), static_cast<int>(str.size()),
                    SQLITE_STATIC);
}

void bind_blob(sqlite3_stmt* st, int idx, const std::string& str) {
  // A zero-length blob must not bind as NULL (the column is NOT NULL).
  sqlite3_bind_blob(st, idx, str.empty() ? "" : str.data(),
                    static_cast<int>(str.size()), SQLITE_STATIC);
}

std::string column_blob(sqlite3_stmt* st, int col) {
  auto ptr = static_cast<const char*>(sqlite3_column_blob(st, col));
  auto len = sqlite3_column_bytes(st, col);
  return ptr ? std::string(ptr, static_cast<size_t>(len)) : std::string{};
}

// Runs `PASSIVE` checkpoints on its own connection whenever the writer
// reports that the WAL has grown past the threshold. PASSIVE never blocks
// the writer; the writer restarts the WAL once a checkpoint caught up.
class checkpointer {
public:
  explicit checkpointer(sqlite3* db) : db_(db), thread_([this] { run(); }) {
    // nop
  }

  ~checkpointer() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
    sqlite3_close(db_);
  }

  void poke() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      requested_ = true;
    }
    cv_.notify_one();
  }

private:
  void run() {
    std::unique_lock<std::mutex> guard{mtx_};
    for (;;) {
      cv_.wait(guard, [this] { return stop_ || requested_; });
      if (stop_)
        return;
      requested_ = false;
      guard.unlock();
      int log_pages = 0;
      int done_pages = 0;
      auto rc = sqlite3_wal_checkpoint_v2(db_, nullptr,
                                          SQLITE_CHECKPOINT_PASSIVE,
                                          &log_pages, &done_pages);
      if (rc != SQLITE_OK && rc != SQLITE_BUSY)
        log::store()->warn("store.checkpoint_failed rc={} msg={}", rc,
                           sqlite3_errmsg(db_));
      else
        log::store()->debug("store.checkpoint wal_pages={} done={}",
                            log_pages, done_pages);
      guard.lock();
    }
  }

  sqlite3* db_;
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool requested_ = false;
  std::thread thread_;
};

} // namespace

struct sqlite_store::impl {
  sqlite3* db = nullptr;
  sqlite3_stmt* stmts[stmt_count_ids] = {};
  store_options opts;
  int version = 0;
  bool in_txn = false;
  /// Opened by `open_reader`: never writes, never checkpoints.
  bool read_only = false;
  std::unique_ptr<checkpointer> ckpt;

  ~impl() {
    if (db)
      sqlite3_wal_hook(db, nullptr, nullptr);
    ckpt.reset();
    for (auto st : stmts)
      sqlite3_finalize(st);
    if (db) {
      // Fold the WAL into the database so that the next start reads one
      // file; harmless when it cannot (the WAL is replayed on open).
      if (!read_only)
        sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_TRUNCATE,
                                  nullptr, nullptr);
      sqlite3_close(db);
    }
  }

  // Called by SQLite after each commit with the WAL size in pages.
  static int on_wal_commit(void* ctx, sqlite3*, const char*, int pages) {
    auto self = static_cast<impl*>(ctx);
    if (static_cast<uint32_t>(pages) >= self->opts.checkpoint_pages)
      self->ckpt->poke();
    return SQLITE_OK;
  }

  // Reads the current row of `stmt_select_record`.
  static record read_record(sqlite3_stmt* st, const std::string& route,
                            const std::string& key) {
    record rec;
    rec.route = route;
    rec.key = key;
    rec.state = static_cast<record_state>(sqlite3_column_int(st, 0));
    rec.fingerprint = column_blob(st, 1);
    rec.first_seen_ms = sqlite3_column_int64(st, 2);
    rec.expires_at_ms = sqlite3_column_int64(st, 3);
    rec.status = static_cast<uint16_t>(sqlite3_column_int(st, 4));
    rec.response = column_blob(st, 5);
    rec.signal = column_blob(st, 6);
    rec.headers = column_blob(st, 7);
    rec.owner = static_cast<uint64_t>(sqlite3_column_int64(st, 8));
    rec.request_id = static_cast<uint64_t>(sqlite3_column_int64(st, 9));
    return rec;
  }

  caf::error exec(const char* sql) {
    char* msg = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
      std::string ctx = sql;
      ctx += ": ";
      ctx += msg ? msg : "unknown error";
      sqlite3_free(msg);
      return make_error(errc::storage_failure, std::move(ctx));
    }
    return caf::none;
  }

  // Steps a statement that returns no rows.
  caf::error step_done(stmt_id id) {
    auto st = stmts[id];
    stmt_guard guard{st};
    if (sqlite3_step(st) != SQLITE_DONE)
      return sqlite_error(db, statements[id]);
    return caf::none;
  }

  // Prepares every statement not prepared yet.
  caf::error prepare_all() {
    for (size_t i = 0; i < stmt_count_ids; ++i)
      if (!stmts[i]
          && sqlite3_prepare_v3(db, statements[i], -1,
                                SQLITE_PREPARE_PERSISTENT, &stmts[i], nullptr)
               != SQLITE_OK)
        return sqlite_error(db, statements[i]);
    return caf::none;
  }

  caf::expected<int> read_version() {
    auto st = stmts[stmt_get_version];
    stmt_guard guard{st};
    switch (sqlite3_step(st)) {
      case SQLITE_ROW:
        return sqlite3_column_int(st, 0);
      case SQLITE_DONE:
        return 0;
      default:
        return sqlite_error(db, "read schema version");
    }
  }

  // Brings the schema to `schema_version`, one transaction per step, so a
  // crash during a migration leaves the previous version intact.
  caf::error migrate() {
    auto v = read_version();
    if (!v)
      return std::move(v.error());
    if (*v > schema_version)
      return make_error(errc::schema_too_new,
                        "database schema " + std::to_string(*v)
                          + ", this build knows up to "
                          + std::to_string(schema_version));
    for (int i = *v; i < schema_version; ++i) {
      if (auto err = exec("BEGIN IMMEDIATE"))
        return err;
      auto err = exec(migrations[i]);
      if (!err) {
        auto st = stmts[stmt_set_version];
        sqlite3_bind_int(st, 1, i + 1);
        err = step_done(stmt_set_version);
      }
      if (!err)
        err = exec("COMMIT");
      if (err) {
        exec("ROLLBACK");
        return err;
      }
      log::store()->info("store.migrated from={} to={}", i, i + 1);
    }
    version = schema_version;
    return caf::none;
  }
};

caf::expected<std::unique_ptr<sqlite_store>>
sqlite_store::open(const store_options& opts) {
  auto ptr = std::make_unique<impl>();
  ptr->opts = opts;
  auto flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
               | SQLITE_OPEN_NOMUTEX;
  if (sqlite3_open_v2(opts.path.c_str(), &ptr->db, flags, nullptr)
      != SQLITE_OK)
    return sqlite_error(ptr->db, ("open " + opts.path).c_str());
  sqlite3_extended_result_codes(ptr->db, 1);
  sqlite3_busy_timeout(ptr->db, static_cast<int>(opts.busy_timeout_ms));
  // WAL + FULL: a commit returns only after the WAL frame is fsynced.
  // Automatic checkpoints are off; the checkpointer thread does them.
  for (auto sql : {"PRAGMA journal_mode=WAL",
                   opts.sync_commits ? "PRAGMA synchronous=FULL"
                                     : "PRAGMA synchronous=NORMAL",
                   "PRAGMA wal_autocheckpoint=0", "PRAGMA foreign_keys=OFF"})
    if (auto err = ptr->exec(sql))
      return err;
  {
    // journal_mode answers with the mode it got; anything but WAL (e.g. on a
    // file system without shared memory) would silently change durability.
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(ptr->db, "PRAGMA journal_mode", -1, &st, nullptr);
    std::string mode;
    if (st && sqlite3_step(st) == SQLITE_ROW)
      mode = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (mode != "wal")
      return make_error(errc::storage_failure,
                        "cannot enable WAL journal on " + opts.path);
  }
  if (auto err = ptr->exec(create_meta_sql))
    return err;
  // Statements on `records` compile only once the table exists: prepare the
  // meta ones first, migrate, then prepare everything.
  {
    for (auto id : {stmt_get_version, stmt_set_version})
      if (sqlite3_prepare_v3(ptr->db, statements[id], -1,
                             SQLITE_PREPARE_PERSISTENT, &ptr->stmts[id],
                             nullptr)
          != SQLITE_OK)
        return sqlite_error(ptr->db, statements[id]);
    if (auto err = ptr->migrate())
      return err;
    for (auto id : {stmt_get_version, stmt_set_version}) {
      sqlite3_finalize(ptr->stmts[id]);
      ptr->stmts[id] = nullptr;
    }
  }
  if (auto err = ptr->prepare_all())
    return err;
  if (opts.max_pages > 0) {
    auto sql = "PRAGMA max_page_count=" + std::to_string(opts.max_pages);
    if (auto err = ptr->exec(sql.c_str()))
      return err;
  }
  // The checkpointer's own connection.
  sqlite3* ckpt_db = nullptr;
  if (sqlite3_open_v2(opts.path.c_str(), &ckpt_db, SQLITE_OPEN_READWRITE
                                                     | SQLITE_OPEN_NOMUTEX,
                      nullptr)
      != SQLITE_OK) {
    auto err = sqlite_error(ckpt_db, "open checkpoint connection");
    sqlite3_close(ckpt_db);
    return err;
  }
  sqlite3_busy_timeout(ckpt_db, static_cast<int>(opts.busy_timeout_ms));
  // A connection learns that the file is in WAL mode only when it first
  // reads it; until then every checkpoint is a no-op answering -1 (the WAL
  // then grew without bound: 5 MB after 300 claims with a 64-page trigger).
  if (sqlite3_exec(ckpt_db, "PRAGMA journal_mode", nullptr, nullptr, nullptr)
      != SQLITE_OK) {
    auto err = sqlite_error(ckpt_db, "open checkpoint connection");
    sqlite3_close(ckpt_db);
    return err;
  }
  ptr->ckpt = std::make_unique<checkpointer>(ckpt_db);
  sqlite3_wal_hook(ptr->db, &impl::on_wal_commit, ptr.get());
  return std::unique_ptr<sqlite_store>{new sqlite_store(std::move(ptr))};
}

caf::expected<std::unique_ptr<sqlite_store>>
sqlite_store::open_reader(const store_options& opts) {
  auto ptr = std::make_unique<impl>();
  ptr->opts = opts;
  ptr->read_only = true;
  // Read-write without create: a WAL reader maps the shared-memory file,
  // and a missing database must fail rather than appear empty.
  if (sqlite3_open_v2(opts.path.c_str(), &ptr->db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr)
      != SQLITE_OK)
    return sqlite_error(ptr->db, ("open reader " + opts.path).c_str());
  sqlite3_extended_result_codes(ptr->db, 1);
  sqlite3_busy_timeout(ptr->db, static_cast<int>(opts.busy_timeout_ms));
  // Checkpoints are the writer's: closing the last connection would
  // otherwise checkpoint from whichever thread closes a reader.
  sqlite3_db_config(ptr->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  if (auto err = ptr->exec("PRAGMA query_only=1"))
    return err;
  if (sqlite3_prepare_v3(ptr->db, statements[stmt_get_version], -1,
                         SQLITE_PREPARE_PERSISTENT,
                         &ptr->stmts[stmt_get_version], nullptr)
      != SQLITE_OK)
    return sqlite_error(ptr->db, "read schema version");
  auto v = ptr->read_version();
  if (!v)
    return std::move(v.error());
  if (*v > schema_version)
    return make_error(errc::schema_too_new,
                      "database schema " + std::to_string(*v)
                        + ", this build knows up to "
                        + std::to_string(schema_version));
  if (*v < schema_version)
    return make_error(errc::storage_failure,
                      "database schema " + std::to_string(*v) + " of "
                        + opts.path + " not migrated: open the writer first");
  ptr->version = *v;
  if (auto err = ptr->prepare_all())
    return err;
  return std::unique_ptr<sqlite_store>{new sqlite_store(std::move(ptr))};
}

sqlite_store::sqlite_store(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

sqlite_store::~sqlite_store() {
  // nop
}

caf::error sqlite_store::begin() {
  if (auto err = impl_->step_done(stmt_begin))
    return err;
  impl_->in_txn = true;
  return caf::none;
}

caf::error sqlite_store::commit() {
  auto st = impl_->stmts[stmt_commit];
  stmt_guard guard{st};
  auto rc = sqlite3_step(st);
  if (ONCEGATE_MUTANT("ignore-commit-result"))
    rc = SQLITE_DONE; // mutant: the transaction is gone, the caller is told
                      // it committed
  if (rc != SQLITE_DONE) {
    std::string ctx = "commit: ";
    ctx += sqlite3_errmsg(impl_->db);
    rollback();
    return make_error(errc::commit_failed, std::move(ctx));
  }
  impl_->in_txn = false;
  return caf::none;
}

void sqlite_store::rollback() {
  // After an I/O error SQLite may have rolled back already; then ROLLBACK
  // fails harmlessly with "no transaction is active".
  if (!sqlite3_get_autocommit(impl_->db))
    impl_->step_done(stmt_rollback);
  impl_->in_txn = false;
}

caf::expected<claim_result> sqlite_store::claim(const claim_request& req,
                                                int64_t now_ms) {
  auto db = impl_->db;
  claim_result result;
  auto bind_new = [&](sqlite3_stmt* st, const record& rec) {
    bind_text(st, 1, rec.route);
    bind_text(st, 2, rec.key);
    sqlite3_bind_int(st, 3, static_cast<int>(rec.state));
    bind_blob(st, 4, rec.fingerprint);
    sqlite3_bind_int64(st, 5, rec.first_seen_ms);
    sqlite3_bind_int64(st, 6, rec.expires_at_ms);
    sqlite3_bind_int(st, 7, rec.status);
    bind_blob(st, 8, rec.response);
    bind_blob(st, 9, rec.signal);
    bind_blob(st, 10, rec.headers);
    sqlite3_bind_int64(st, 11, static_cast<int64_t>(rec.owner));
    sqlite3_bind_int64(st, 12, static_cast<int64_t>(rec.request_id));
  };
  {
    result.rec = make_record(req, now_ms);
    auto st = impl_->stmts[stmt_insert_new];
    stmt_guard guard{st};
    bind_new(st, result.rec);
    if (sqlite3_step(st) != SQLITE_DONE)
      return sqlite_error(db, "insert record");
    if (sqlite3_changes(db) == 1) {
      result.outcome = decision::accepted;
      return result;
    }
  }
  bool existed = false;
  {
    auto st = impl_->stmts[stmt_select_record];
    stmt_guard guard{st};
    bind_text(st, 1, req.route);
    bind_text(st, 2, req.key);
    switch (sqlite3_step(st)) {
      case SQLITE_ROW:
        existed = true;
        result.rec = impl::read_record(st, req.route, req.key);
        break;
      case SQLITE_DONE:
        break;
      default:
        return sqlite_error(db, "select record");
    }
  }
  std::optional<holder> h;
  if (existed)
    h = holder_of(result.rec);
  // The one rule decides (common/record.hpp); the store writes when the
  // key is free: no record, or a dead one replaced.
  auto d = *decide(h ? &*h : nullptr, req.fingerprint, req.request_id,
                   req.owner, now_ms);
  result.outcome = d;
  if (d != decision::renewed && (d != decision::accepted || existed))
    return result; // duplicate, mismatch, or the same attempt asking again
  result.rec = make_record(req, now_ms);
  auto st = impl_->stmts[stmt_upsert_record];
  stmt_guard guard{st};
  bind_new(st, result.rec);
  if (sqlite3_step(st) != SQLITE_DONE)
    return sqlite_error(db, "replace record");
  return result;
}

caf::expected<update_result> sqlite_store::update(const record_update& upd,
                                                  int64_t now_ms) {
  // Only a final HTTP answer is an outcome, and 204/304 carry no body: an
  // outcome that breaks this (an older or buggy peer) is not applied.
  if (upd.op == transition::complete
      && (upd.status < 200 || upd.status > 599
          || ((upd.status == 204 || upd.status == 304)
              && !upd.response.empty()))) {
    update_result refused;
    auto current = load(upd.route, upd.key);
    if (!current)
      return std::move(current.error());
    refused.current = std::move(*current);
    return refused;
  }
  stmt_id id = stmt_complete;
  switch (upd.op) {
    case transition::complete:
      id = stmt_complete;
      break;
    case transition::in_doubt:
      id = stmt_mark_in_doubt;
      break;
    case transition::release:
      id = stmt_release;
      break;
    case transition::release_settled:
      id = stmt_release_settled;
      break;
  }
  {
    auto st = impl_->stmts[id];
    stmt_guard guard{st};
    bind_text(st, 1, upd.route);
    bind_text(st, 2, upd.key);
    if (upd.op == transition::complete) {
      sqlite3_bind_int(st, 3, upd.status);
      bind_blob(st, 4, upd.response);
      sqlite3_bind_int64(st, 5, upd.first_seen_ms);
      bind_blob(st, 6, upd.headers);
      sqlite3_bind_int64(st, 7, static_cast<int64_t>(upd.request_id));
      sqlite3_bind_int64(st, 8, now_ms);
    } else {
      sqlite3_bind_int64(st, 3, upd.first_seen_ms);
      sqlite3_bind_int64(st, 4, static_cast<int64_t>(upd.request_id));
    }
    if (sqlite3_step(st) != SQLITE_DONE)
      return sqlite_error(impl_->db, statements[id]);
  }
  update_result result;
  result.applied = sqlite3_changes(impl_->db) > 0;
  auto current = load(upd.route, upd.key);
  if (!current)
    return std::move(current.error());
  result.current = std::move(*current);
  return result;
}

caf::expected<record_page> sqlite_store::list(const std::string& route,
                                              record_state state,
                                              const std::string& after,
                                              uint32_t limit) {
  auto st = impl_->stmts[stmt_list_state];
  stmt_guard guard{st};
  bind_text(st, 1, route);
  sqlite3_bind_int(st, 2, static_cast<int>(state));
  bind_text(st, 3, after);
  sqlite3_bind_int64(st, 4, static_cast<int64_t>(limit) + 1);
  record_page page;
  for (;;) {
    auto rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
      break;
    if (rc != SQLITE_ROW)
      return sqlite_error(impl_->db, "list records");
    auto key = column_blob(st, 10);
    if (page.records.size() == limit) {
      page.next_after = page.records.back().key;
      break;
    }
    page.records.push_back(impl::read_record(st, route, key));
  }
  return page;
}

caf::expected<uint64_t> sqlite_store::doubt(uint64_t owner,
                                            int64_t before_ms) {
  auto st = impl_->stmts[stmt_doubt];
  sqlite3_bind_int64(st, 1, static_cast<int64_t>(owner));
  sqlite3_bind_int64(st, 2, before_ms);
  if (auto err = impl_->step_done(stmt_doubt))
    return err;
  return static_cast<uint64_t>(sqlite3_changes(impl_->db));
}

caf::expected<uint64_t> sqlite_store::doubt_in_flight() {
  return doubt(0, std::numeric_limits<int64_t>::max());
}

caf::expected<lookup_result> sqlite_store::load(const std::string& route,
                                                const std::string& key) {
  auto st = impl_->stmts[stmt_select_record];
  stmt_guard guard{st};
  bind_text(st, 1, route);
  bind_text(st, 2, key);
  lookup_result result;
  switch (sqlite3_step(st)) {
    case SQLITE_ROW:
      result.found = true;
      result.rec = impl::read_record(st, route, key);
      return result;
    case SQLITE_DONE:
      return result;
    default:
      return sqlite_error(impl_->db, "load record");
  }
}

caf::expected<uint64_t> sqlite_store::purge(int64_t now_ms, uint32_t limit) {
  auto st = impl_->stmts[stmt_purge];
  stmt_guard guard{st};
  sqlite3_bind_int64(st, 1, now_ms);
  sqlite3_bind_int64(st, 2, limit);
  if (sqlite3_step(st) != SQLITE_DONE)
    return sqlite_error(impl_->db, "purge");
  return static_cast<uint64_t>(sqlite3_changes(impl_->db));
}

caf::expected<int64_t> sqlite_store::next_expiry() {
  auto st = impl_->stmts[stmt_next_expiry];
  stmt_guard guard{st};
  if (sqlite3_step(st) != SQLITE_ROW)
    return sqlite_error(impl_->db, "next expiry");
  if (sqlite3_column_type(st, 0) == SQLITE_NULL)
    return int64_t{-1};
  return sqlite3_column_int64(st, 0);
}

caf::expected<uint64_t> sqlite_store::count() {
  auto st = impl_->stmts[stmt_count];
  stmt_guard guard{st};
  if (sqlite3_step(st) != SQLITE_ROW)
    return sqlite_error(impl_->db, "count");
  return static_cast<uint64_t>(sqlite3_column_int64(st, 0));
}

caf::expected<uint64_t> sqlite_store::applied_index() {
  auto st = impl_->stmts[stmt_get_applied];
  stmt_guard guard{st};
  switch (sqlite3_step(st)) {
    case SQLITE_ROW:
      return static_cast<uint64_t>(sqlite3_column_int64(st, 0));
    case SQLITE_DONE:
      return uint64_t{0};
    default:
      return sqlite_error(impl_->db, "read applied index");
  }
}

caf::expected<int64_t> sqlite_store::clock_ms() {
  auto st = impl_->stmts[stmt_get_clock];
  stmt_guard guard{st};
  switch (sqlite3_step(st)) {
    case SQLITE_ROW:
      return sqlite3_column_int64(st, 0);
    case SQLITE_DONE:
      return int64_t{0};
    default:
      return sqlite_error(impl_->db, "read clock");
  }
}

caf::error sqlite_store::set_clock_ms(int64_t now_ms) {
  sqlite3_bind_int64(impl_->stmts[stmt_set_clock], 1, now_ms);
  return impl_->step_done(stmt_set_clock);
}

caf::expected<std::vector<unsettled_count>> sqlite_store::unsettled() {
  auto st = impl_->stmts[stmt_unsettled];
  stmt_guard guard{st};
  std::vector<unsettled_count> result;
  for (;;) {
    auto rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
      return result;
    if (rc != SQLITE_ROW)
      return sqlite_error(impl_->db, "count unsettled records");
    unsettled_count x;
    x.route = column_blob(st, 0);
    x.state = static_cast<record_state>(sqlite3_column_int(st, 1));
    x.count = static_cast<uint64_t>(sqlite3_column_int64(st, 2));
    result.push_back(std::move(x));
  }
}

caf::error sqlite_store::set_applied_index(uint64_t index) {
  sqlite3_bind_int64(impl_->stmts[stmt_set_applied], 1,
                     static_cast<int64_t>(index));
  return impl_->step_done(stmt_set_applied);
}

caf::expected<uint64_t> sqlite_store::begin_read() {
  if (auto err = impl_->step_done(stmt_begin_read))
    return err;
  impl_->in_txn = true;
  auto index = applied_index();
  if (!index)
    rollback();
  return index;
}

caf::expected<std::string> sqlite_store::snapshot_image() {
  std::string image;
  auto res = snapshot_image([&image](std::size_t n) -> void* {
    image.resize(n);
    return image.data();
  });
  if (!res)
    return std::move(res.error());
  return image;
}

caf::expected<std::size_t>
sqlite_store::snapshot_image(const std::function<void*(std::size_t)>& alloc) {
  sqlite3_int64 size = 0;
  auto bytes = sqlite3_serialize(impl_->db, "main", &size, 0);
  if (bytes == nullptr)
    return sqlite_error(impl_->db, "serialize database");
  auto n = static_cast<std::size_t>(size);
  auto out = static_cast<unsigned char*>(alloc(n));
  if (out == nullptr) {
    sqlite3_free(bytes);
    return make_error(errc::storage_failure,
                      "snapshot image: out of memory for "
                        + std::to_string(n) + " bytes");
  }
  std::memcpy(out, bytes, n);
  sqlite3_free(bytes);
  // Bytes 18 and 19 of the header say WAL (2); an image is a file of its
  // own, which SQLite opens in memory only as a rollback-journal one (1).
  if (n >= 20)
    out[18] = out[19] = 1;
  return n;
}

caf::error sqlite_store::backup_to(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec))
    return make_error(errc::invalid_argument,
                      "backup: " + path + " exists already");
  auto tmp = path + ".tmp";
  std::filesystem::remove(tmp, ec);
  sqlite3* dest = nullptr;
  if (sqlite3_open_v2(tmp.c_str(), &dest,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
                        | SQLITE_OPEN_NOMUTEX,
                      nullptr)
      != SQLITE_OK) {
    auto err = sqlite_error(dest, ("backup: open " + tmp).c_str());
    sqlite3_close(dest);
    return err;
  }
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> dest_guard{dest, sqlite3_close};
  // One step copies every page under one read transaction: a consistent
  // copy of one moment.
  auto bk = sqlite3_backup_init(dest, "main", impl_->db, "main");
  if (bk == nullptr)
    return sqlite_error(dest, "backup: init");
  auto rc = sqlite3_backup_step(bk, -1);
  sqlite3_backup_finish(bk);
  if (rc != SQLITE_DONE)
    return sqlite_error(dest, "backup: copy");
  // The copy is in WAL mode like its source: fold the WAL into the file so
  // that the backup is one self-contained file.
  if (sqlite3_exec(dest, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr,
                   nullptr)
        != SQLITE_OK
      || sqlite3_exec(dest, "PRAGMA journal_mode=DELETE", nullptr, nullptr,
                      nullptr)
           != SQLITE_OK)
    return sqlite_error(dest, "backup: finish file");
  dest_guard.reset();
  // A backup holds signal bodies (which may carry passphrases): the owner
  // alone may read it, whatever the umask of whoever made it.
  ::chmod(tmp.c_str(), 0600);
  // Durable before it is visible under its name.
  if (auto fd = ::open(tmp.c_str(), O_RDONLY); fd >= 0) {
    auto synced = ::fsync(fd) == 0;
    ::close(fd);
    if (!synced)
      return make_error(errc::storage_failure, "backup: fsync " + tmp);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return make_error(errc::storage_failure,
                      "backup: rename to " + path + ": " + ec.message());
  return {};
}

caf::error sqlite_store::restore_image(std::string_view image) {
  auto& x = *impl_;
  if (x.read_only)
    return make_error(errc::invalid_argument,
                      "restore image: read-only connection");
  static constexpr std::string_view magic{"SQLite format 3\0", 16};
  if (image.size() < 100 || image.substr(0, 16) != magic)
    return make_error(errc::invalid_argument,
                      "restore image: not an SQLite database");
  // The image as a read-only in-memory database, without copying it.
  sqlite3* mem = nullptr;
  if (sqlite3_open_v2(":memory:", &mem,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr)
      != SQLITE_OK) {
    auto err = sqlite_error(mem, "restore image: open memory database");
    sqlite3_close(mem);
    return err;
  }
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> mem_guard{mem, sqlite3_close};
  auto data = reinterpret_cast<unsigned char*>(const_cast<char*>(image.data()));
  auto size = static_cast<sqlite3_int64>(image.size());
  if (sqlite3_deserialize(mem, "main", data, size, size,
                          SQLITE_DESERIALIZE_READONLY)
      != SQLITE_OK)
    return sqlite_error(mem, "restore image: deserialize");
  // Check what it is before anything of the live database changes.
  int64_t image_version = 0;
  {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(mem, statements[stmt_get_version], -1, &st,
                           nullptr)
        != SQLITE_OK) {
      sqlite3_finalize(st);
      return make_error(errc::invalid_argument,
                        std::string{"restore image: no oncegate database: "}
                          + sqlite3_errmsg(mem));
    }
    auto rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
      image_version = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
      return sqlite_error(mem, "restore image: read schema version");
  }
  if (image_version < 1)
    return make_error(errc::invalid_argument,
                      "restore image: no schema version");
  if (image_version > schema_version)
    return make_error(errc::schema_too_new,
                      "restore image: schema "
                        + std::to_string(image_version)
                        + ", this build knows up to "
                        + std::to_string(schema_version));
  // One write transaction on the live database: readers see the old or the
  // new content, and a crash leaves one of them.
  auto backup = sqlite3_backup_init(x.db, "main", mem, "main");
  if (backup == nullptr)
    return sqlite_error(x.db, "restore image: start backup");
  auto rc = sqlite3_backup_step(backup, -1);
  auto finish_rc = sqlite3_backup_finish(backup);
  if (rc != SQLITE_DONE || finish_rc != SQLITE_OK) {
    std::string ctx = "restore image: copy: ";
    ctx += sqlite3_errstr(rc != SQLITE_DONE ? rc : finish_rc);
    return make_error(errc::storage_failure, std::move(ctx));
  }
  // The WAL may have grown by the whole image: let the checkpointer fold it
  // in without waiting for the next commit.
  if (x.ckpt)
    x.ckpt->poke();
  if (auto err = x.migrate())
    return err;
  auto applied = applied_index();
  if (!applied)
    return std::move(applied.error());
  log::store()->info("store.restored bytes={} schema={} applied_index={}",
                     image.size(), image_version, *applied);
  return caf::none;
}

caf::error sqlite_store::limit_pages(uint64_t pages) {
  auto sql = "PRAGMA max_page_count=" + std::to_string(pages);
  return impl_->exec(sql.c_str());
}

int sqlite_store::version() const {
  return impl_->version;
}

const store_options& sqlite_store::options() const {
  return impl_->opts;
}

} // namespace oncegate::persistence
