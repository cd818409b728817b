// All SQL of oncegate: the schema, its forward migrations and every
// prepared statement, by name; and the steps that run them.
#include "persistence/sqlite_store_impl.hpp"

#include <iterator>
#include <string>
#include <utility>

#include "common/errc.hpp"
#include "common/logging.hpp"

namespace oncegate::persistence {

namespace detail {

namespace {

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
  // 4 -> 5: durable delivery: attempts, the next attempt's time (queued) or
  // the running one's start (in flight), the delivery deadline, the
  // request's Content-Type, the count of reconciliations without a verdict;
  // the queue of due records (queued = 3).
  "ALTER TABLE records ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;"
  "ALTER TABLE records ADD COLUMN next_attempt_ms INTEGER NOT NULL DEFAULT 0;"
  "ALTER TABLE records ADD COLUMN deliver_by_ms INTEGER NOT NULL DEFAULT 0;"
  "ALTER TABLE records ADD COLUMN signal_type BLOB NOT NULL DEFAULT x'';"
  "ALTER TABLE records ADD COLUMN reconciles INTEGER NOT NULL DEFAULT 0;"
  "CREATE INDEX records_due ON records(next_attempt_ms) WHERE state = 3;",
  // 5 -> 6: the guardrails. The grants a route's cap counts
  // (`max-new-per-minute`): one row per record created under a cap, at the
  // store's clock, kept for a minute. The paused routes.
  "CREATE TABLE grants("
  "  route TEXT NOT NULL,"
  "  scope TEXT NOT NULL,"
  "  at_ms INTEGER NOT NULL);"
  "CREATE INDEX grants_by_scope ON grants(route, scope, at_ms);"
  "CREATE INDEX grants_by_time ON grants(at_ms);"
  "CREATE TABLE pauses("
  "  route TEXT PRIMARY KEY,"
  "  since_ms INTEGER NOT NULL) WITHOUT ROWID;",
};

static_assert(std::size(migrations) == sqlite_store::schema_version);

} // namespace

const char* const create_meta_sql
  = "CREATE TABLE IF NOT EXISTS meta("
    "  name TEXT PRIMARY KEY,"
    "  value INTEGER NOT NULL) WITHOUT ROWID";

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
  "       response, signal, headers, owner, request_id, attempts,"
  "       next_attempt_ms, deliver_by_ms, signal_type, reconciles"
  "  FROM records WHERE route = ?1 AND key = ?2",
  // stmt_insert_new: most claims are for new keys; one statement decides
  // them (a conflict changes nothing and falls back to reading the row).
  "INSERT INTO records(route, key, state, fingerprint, first_seen_ms,"
  "  expires_at_ms, status, response, signal, headers, owner, request_id,"
  "  attempts, next_attempt_ms, deliver_by_ms, signal_type, reconciles)"
  "  VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
  "         ?15, ?16, ?17)"
  "  ON CONFLICT(route, key) DO NOTHING",
  // stmt_upsert_record
  "INSERT OR REPLACE INTO records(route, key, state, fingerprint,"
  "  first_seen_ms, expires_at_ms, status, response, signal, headers,"
  "  owner, request_id, attempts, next_attempt_ms, deliver_by_ms,"
  "  signal_type, reconciles)"
  "  VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
  "         ?15, ?16, ?17)",
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
  "       response, signal, headers, owner, request_id, attempts,"
  "       next_attempt_ms, deliver_by_ms, signal_type, reconciles, key"
  "  FROM records WHERE route = ?1 AND state = ?2 AND key > ?3"
  "    AND state != 1"
  "  ORDER BY key LIMIT ?4",
  // stmt_doubt: in_flight (0) -> in_doubt (2) for the attempts of owner ?1
  // (0: any) started before ?2 (a queued record's later attempt starts at
  // next_attempt_ms; a claim's first attempt at first_seen_ms). `state != 1`
  // repeats the partial index's WHERE so that SQLite uses the index instead
  // of scanning every record.
  "UPDATE records SET state = 2 WHERE state = 0 AND state != 1"
  "  AND (?1 = 0 OR owner = ?1)"
  "  AND MAX(first_seen_ms, next_attempt_ms) < ?2",
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
  // stmt_defer: in_flight (0) -> queued (3) due at ?6, or failed (4) once
  // the proposer's time ?7 reached the deadline; only the attempt meant
  // (?5) of a record that delivers durably.
  "UPDATE records SET next_attempt_ms = ?6,"
  "  state = CASE WHEN ?7 >= deliver_by_ms THEN 4 ELSE 3 END"
  "  WHERE route = ?1 AND key = ?2 AND state = 0 AND deliver_by_ms != 0"
  "    AND (?3 = 0 OR first_seen_ms = ?3) AND (?4 = 0 OR request_id = ?4)"
  "    AND attempts = ?5",
  // stmt_start_attempt: queued (3) -> in_flight (0) as attempt ?5 (the
  // next one: one starter wins), by node ?6 as request ?4, started at ?7,
  // before the deadline, while the route is not paused (an attempt started
  // before a pause and applied after it is not sent).
  "UPDATE records SET state = 0, attempts = ?5, owner = ?6, request_id = ?4,"
  "  next_attempt_ms = ?7"
  "  WHERE route = ?1 AND key = ?2 AND state = 3 AND first_seen_ms = ?3"
  "    AND attempts = ?5 - 1 AND ?7 < deliver_by_ms"
  "    AND route NOT IN (SELECT route FROM pauses)",
  // stmt_fail: queued (3) -> failed (4) once ?4 reached the deadline.
  "UPDATE records SET state = 4"
  "  WHERE route = ?1 AND key = ?2 AND state = 3"
  "    AND (?3 = 0 OR first_seen_ms = ?3) AND ?4 >= deliver_by_ms",
  // stmt_redeliver: failed (4) -> queued (3), due at ?5, deadline ?4.
  "UPDATE records SET state = 3, next_attempt_ms = ?5, deliver_by_ms = ?4"
  "  WHERE route = ?1 AND key = ?2 AND state = 4"
  "    AND (?3 = 0 OR first_seen_ms = ?3) AND ?4 > ?5",
  // stmt_due: the queue through its index, earliest first; a paused
  // route's records are held (not due, and not the next one either).
  "SELECT state, fingerprint, first_seen_ms, expires_at_ms, status,"
  "       response, signal, headers, owner, request_id, attempts,"
  "       next_attempt_ms, deliver_by_ms, signal_type, reconciles, route, key"
  "  FROM records WHERE state = 3 AND next_attempt_ms <= ?1"
  "    AND route NOT IN (SELECT route FROM pauses)"
  "  ORDER BY next_attempt_ms LIMIT ?2",
  // stmt_next_delivery
  "SELECT MIN(next_attempt_ms) FROM records WHERE state = 3"
  "  AND route NOT IN (SELECT route FROM pauses)",
  // stmt_requeue: in_doubt (2) -> queued (3), due at ?4: the upstream said
  // it does not have the order. A new deadline from then (?5) if it had
  // none (a record of a route that delivered once).
  "UPDATE records SET state = 3, next_attempt_ms = ?4,"
  "  deliver_by_ms = CASE WHEN deliver_by_ms > ?4 THEN deliver_by_ms"
  "                  ELSE ?5 END"
  "  WHERE route = ?1 AND key = ?2 AND state = 2"
  "    AND (?3 = 0 OR first_seen_ms = ?3) AND ?5 > ?4",
  // stmt_reconcile_wait: in_doubt (2) stays; asked again at ?4; one more
  // reconciliation without a verdict.
  "UPDATE records SET next_attempt_ms = ?4, reconciles = reconciles + 1"
  "  WHERE route = ?1 AND key = ?2 AND state = 2"
  "    AND (?3 = 0 OR first_seen_ms = ?3)",
  // stmt_count_grants: a cap's grants after ?3 (the last minute).
  "SELECT COUNT(*) FROM grants WHERE route = ?1 AND scope = ?2 AND at_ms > ?3",
  // stmt_insert_grant
  "INSERT INTO grants(route, scope, at_ms) VALUES(?1, ?2, ?3)",
  // stmt_trim_grants: grants no cap counts any more (at or before ?1),
  // oldest first, bounded per claim.
  "DELETE FROM grants WHERE rowid IN ("
  "  SELECT rowid FROM grants WHERE at_ms <= ?1 ORDER BY at_ms LIMIT ?2)",
  // stmt_paused: since when route ?1 is paused (no row: it is not).
  "SELECT since_ms FROM pauses WHERE route = ?1",
  // stmt_pause: a route paused again stays paused since the first time.
  "INSERT INTO pauses(route, since_ms) VALUES(?1, ?2)"
  "  ON CONFLICT(route) DO NOTHING",
  // stmt_resume
  "DELETE FROM pauses WHERE route = ?1",
  // stmt_list_pauses
  "SELECT route, since_ms FROM pauses ORDER BY route LIMIT ?1",
};

caf::error sqlite_error(sqlite3* db, const char* what) {
  std::string ctx = what;
  ctx += ": ";
  ctx += db ? sqlite3_errmsg(db) : "out of memory";
  return make_error(errc::storage_failure, std::move(ctx));
}

caf::error schema_too_new(const std::string& what, int64_t found) {
  return make_error(errc::schema_too_new,
                    what + std::to_string(found) + ", this build knows up to "
                      + std::to_string(sqlite_store::schema_version));
}

} // namespace detail

using namespace detail;

caf::error sqlite_store::impl::exec(const char* sql) {
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

caf::error sqlite_store::impl::step_done(stmt_id id) {
  auto st = stmts[id];
  stmt_guard guard{st};
  if (sqlite3_step(st) != SQLITE_DONE)
    return sqlite_error(db, statements[id]);
  return caf::none;
}

caf::error sqlite_store::impl::prepare_all() {
  for (size_t i = 0; i < stmt_count_ids; ++i)
    if (!stmts[i]
        && sqlite3_prepare_v3(db, statements[i], -1,
                              SQLITE_PREPARE_PERSISTENT, &stmts[i], nullptr)
             != SQLITE_OK)
      return sqlite_error(db, statements[i]);
  return caf::none;
}

caf::expected<int> sqlite_store::impl::read_version() {
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

caf::error sqlite_store::impl::migrate() {
  auto v = read_version();
  if (!v)
    return std::move(v.error());
  if (*v > schema_version)
    return schema_too_new("database schema ", *v);
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

} // namespace oncegate::persistence
