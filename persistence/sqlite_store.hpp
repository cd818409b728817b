#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "common/record.hpp"

namespace oncegate::persistence {

/// How to open the SQLite database.
struct store_options {
  /// Path of the database file; its directory must exist.
  std::string path;
  /// fsync every commit (`synchronous=FULL`): a single node's decisions are
  /// durable through this file. A cluster node's are durable through the
  /// Raft log, which it replays into the file after a crash, so its commits
  /// skip the fsync (`synchronous=NORMAL`: the file stays consistent and
  /// may only lag behind the log).
  bool sync_commits = true;
  /// WAL size in pages that wakes the background checkpointer. Commits never
  /// checkpoint themselves (that stalled them for 67-165 ms).
  uint32_t checkpoint_pages = 4000;
  /// Without `sync_commits`, the WAL's pages reach the disk only at the
  /// next checkpoint's fsync: 16 MB at once with 4000 pages, a burst that
  /// queued every Raft append on the same disk behind it (a 3-node cluster
  /// on one disk: 20-40 ms stalls, its whole p99). Instead the
  /// checkpointer writes the WAL out (sync_file_range) each time it grew
  /// by this many pages; 0: never (only at checkpoints).
  uint32_t wal_writeout_pages = 256;
  /// How long a statement waits for a lock held by another connection.
  uint32_t busy_timeout_ms = 5000;
  /// Largest database size in pages (4 KiB each); 0 = unlimited. Beyond it
  /// writes fail with SQLITE_FULL exactly as on a full disk: claims are
  /// answered 503 and nothing stored is harmed.
  uint64_t max_pages = 0;
  /// Open even when the WAL holds committed transactions that SQLite would
  /// drop (`check_wal`): the operator accepted losing them. The damaged WAL
  /// is copied aside first and the loss logged.
  bool accept_wal_loss = false;
};

/// The durable record table in one SQLite file (WAL, `synchronous=FULL`).
///
/// Not thread-safe: one owner (the store actor) calls every member. All SQL
/// of oncegate lives in the implementation file, prepared once. A background
/// thread with its own connection runs WAL checkpoints off the commit path.
/// Further connections to the same file (`open_reader`) may live on other
/// threads, one owner each.
///
/// Writes happen between `begin` and `commit`; a decision is durable only
/// once `commit` returned without error.
class sqlite_store {
public:
  /// The schema version this build writes.
  static constexpr int schema_version = 6;

  /// Opens (creating or migrating) the database: the writer. Fails with
  /// `errc::storage_failure` (SQLite's message as context),
  /// `errc::schema_too_new`, or `errc::wal_damaged` when the WAL holds
  /// committed transactions SQLite would drop (checked before SQLite opens
  /// the file; see `check_wal`) unless `accept_wal_loss` or, for a cluster
  /// node (`sync_commits` off), the Raft log holds them.
  static caf::expected<std::unique_ptr<sqlite_store>>
  open(const store_options& opts);

  /// Opens a connection that only reads an existing database which a writer
  /// (`open`) created and migrated, e.g. to serve lookups while the Raft
  /// thread writes through the writer: no migrations, no checkpointer,
  /// `query_only` (every write fails). It sees each commit of the writer
  /// from the next statement on. Fails with `errc::storage_failure` (no such
  /// file, or a schema older than this build's) or `errc::schema_too_new`.
  static caf::expected<std::unique_ptr<sqlite_store>>
  open_reader(const store_options& opts);

  ~sqlite_store();

  sqlite_store(const sqlite_store&) = delete;
  sqlite_store& operator=(const sqlite_store&) = delete;

  caf::error begin();

  /// Commits the open transaction; on failure the transaction is rolled back
  /// and nothing of it is durable.
  caf::error commit();

  /// Abandons the open transaction, if any.
  void rollback();

  /// Decides a claim inside the open transaction at time `now_ms` (the
  /// store's clock, see `apply_batch`): inserts a record built from `req`
  /// unless a record that is live at `now_ms` exists.
  caf::expected<claim_result> claim(const claim_request& req, int64_t now_ms);

  /// `claim(req, req.now_ms)`.
  caf::expected<claim_result> claim(const claim_request& req) {
    return claim(req, req.now_ms);
  }

  /// Applies a state change inside the open transaction at time `now_ms`
  /// (a completion protects the key for at least a TTL from then). Not
  /// applied (and nothing changed) when no record exists, the instance
  /// differs, or the current state does not allow it.
  caf::expected<update_result> update(const record_update& upd,
                                      int64_t now_ms);

  /// `update(upd, 0)`: for tests.
  caf::expected<update_result> update(const record_update& upd) {
    return update(upd, 0);
  }

  /// The store's clock: the latest time an applied claim or purge carried
  /// (0: none yet). It never moves backwards, whatever the clocks of the
  /// proposers do (see `apply_batch`).
  caf::expected<int64_t> clock_ms();

  /// Sets the store's clock, inside the open transaction.
  caf::error set_clock_ms(int64_t now_ms);

  /// Number of unsettled (in-flight, in-doubt, queued, failed) records per
  /// route and state.
  caf::expected<std::vector<unsettled_count>> unsettled();

  /// Lists up to `limit` records of `route` in `state` with keys after
  /// `after` (key order), for operators (in-doubt keys).
  caf::expected<record_page> list(const std::string& route, record_state state,
                                  const std::string& after, uint32_t limit);

  /// Turns the in-flight records claimed by `owner` (0: by any node) and
  /// first seen before `before_ms` (INT64_MAX: all) into in-doubt, inside
  /// the open transaction, and returns how many changed. Their claimant died
  /// while forwarding them, so the upstream may have acted.
  caf::expected<uint64_t> doubt(uint64_t owner, int64_t before_ms);

  /// Turns every in-flight record into in-doubt (`doubt(0, INT64_MAX)`).
  /// Run at a single node's start: a record still in flight then belonged
  /// to a process that died while forwarding it.
  caf::expected<uint64_t> doubt_in_flight();

  /// Reads the record of `(route, key)`, live or not.
  caf::expected<lookup_result> load(const std::string& route,
                                    const std::string& key);

  /// Deletes up to `limit` completed records with `expires_at_ms <= now_ms`,
  /// oldest first, inside the open transaction. Unsettled records are never
  /// purged.
  caf::expected<uint64_t> purge(int64_t now_ms, uint32_t limit);

  /// Earliest `expires_at_ms` of all completed records, or -1 when there
  /// are none.
  caf::expected<int64_t> next_expiry();

  /// Up to `limit` queued records whose next attempt may start at `now_ms`
  /// (`next_attempt_ms <= now_ms`), earliest first, with their signals: the
  /// delivery queue (its rows are the durable schedule).
  caf::expected<std::vector<record>> due(int64_t now_ms, uint32_t limit);

  /// Earliest `next_attempt_ms` of all queued records, or -1 when there are
  /// none.
  caf::expected<int64_t> next_delivery();

  /// Number of stored records.
  caf::expected<uint64_t> count();

  /// Pauses or resumes `route` at `now_ms` (the store's clock), inside the
  /// open transaction; `pause_op::read` changes nothing. Fails with
  /// `errc::invalid_argument` on a pause beyond `max_pauses` routes.
  caf::error pause(const std::string& route, pause_op op, int64_t now_ms);

  /// The paused routes, by name.
  caf::expected<route_pauses> pauses();

  /// The index of the last replicated log entry applied (0: none), kept in
  /// the same file so that a restart replays only what came after it.
  caf::expected<uint64_t> applied_index();

  /// Records `index` as applied, inside the open transaction (so it commits
  /// atomically with the entry's changes).
  caf::error set_applied_index(uint64_t index);

  /// Starts a read transaction that pins the committed state: until
  /// `rollback`, every read of this connection (`snapshot_image` included)
  /// sees exactly that state while other connections keep committing.
  /// Returns the applied index of the pinned state.
  caf::expected<uint64_t> begin_read();

  /// The whole database in SQLite's file format, as of the open read
  /// transaction or else of the last commit: a snapshot of the replicated
  /// state machine, for `restore_image` on any replica.
  caf::expected<std::string> snapshot_image();

  /// The same image, written into the buffer `alloc(size)` returns (two
  /// copies of the database in memory at the peak, not three); answers
  /// its size. Fails when `alloc` returns null.
  caf::expected<std::size_t>
  snapshot_image(const std::function<void*(std::size_t)>& alloc);

  /// Copies the database as it is at this moment into a new file `path`
  /// (SQLite's online backup API: one consistent read, concurrent writers
  /// are not blocked in WAL mode). Writes `path.tmp`, syncs it and renames
  /// it into place, so `path` is either absent or complete. Fails when
  /// `path` exists.
  caf::error backup_to(const std::string& path);

  /// Replaces the whole content of the database with `image` (made by
  /// `snapshot_image`, possibly on another replica) in one transaction, then
  /// migrates it if it is older than this build. Afterwards
  /// `applied_index()` is the image's. No transaction may be open; the
  /// writer only. Fails with `errc::invalid_argument` (not an oncegate
  /// database) or `errc::schema_too_new`, leaving the database as it was,
  /// or with `errc::storage_failure`.
  caf::error restore_image(std::string_view image);

  /// Caps the database at `pages` pages, so that writes beyond fail with
  /// SQLITE_FULL exactly as on a full disk. For failure tests and drills.
  caf::error limit_pages(uint64_t pages);

  /// Schema version found in (or written to) the file.
  int version() const;

  /// The options the store was opened with.
  const store_options& options() const;

  /// Times the checkpointer wrote the WAL out between checkpoints
  /// (`store_options::wal_writeout_pages`).
  uint64_t wal_writeouts() const;

private:
  struct impl;
  explicit sqlite_store(std::unique_ptr<impl> ptr);
  std::unique_ptr<impl> impl_;
};

} // namespace oncegate::persistence
