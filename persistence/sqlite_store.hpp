#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "common/record.hpp"

namespace oncegate::persistence {

/// How to open the SQLite database.
struct store_options {
  /// Path of the database file; its directory must exist.
  std::string path;
  /// WAL size in pages that wakes the background checkpointer. Commits never
  /// checkpoint themselves (that stalled them for 67-165 ms).
  uint32_t checkpoint_pages = 4000;
  /// How long a statement waits for a lock held by another connection.
  uint32_t busy_timeout_ms = 5000;
  /// Largest database size in pages (4 KiB each); 0 = unlimited. Beyond it
  /// writes fail with SQLITE_FULL exactly as on a full disk: claims are
  /// answered 503 and nothing stored is harmed.
  uint64_t max_pages = 0;
};

/// The durable record table in one SQLite file (WAL, `synchronous=FULL`).
///
/// Not thread-safe: one owner (the store actor) calls every member. All SQL
/// of oncegate lives in the implementation file, prepared once. A background
/// thread with its own connection runs WAL checkpoints off the commit path.
///
/// Writes happen between `begin` and `commit`; a decision is durable only
/// once `commit` returned without error.
class sqlite_store {
public:
  /// The schema version this build writes.
  static constexpr int schema_version = 2;

  /// Opens (creating or migrating) the database. Fails with
  /// `errc::storage_failure` (SQLite's message as context) or
  /// `errc::schema_too_new`.
  static caf::expected<std::unique_ptr<sqlite_store>>
  open(const store_options& opts);

  ~sqlite_store();

  sqlite_store(const sqlite_store&) = delete;
  sqlite_store& operator=(const sqlite_store&) = delete;

  caf::error begin();

  /// Commits the open transaction; on failure the transaction is rolled back
  /// and nothing of it is durable.
  caf::error commit();

  /// Abandons the open transaction, if any.
  void rollback();

  /// Decides a claim inside the open transaction: inserts a record built from
  /// `req` unless a record that is live at `req.now_ms` exists.
  caf::expected<claim_result> claim(const claim_request& req);

  /// Applies a state change inside the open transaction. Not applied (and
  /// nothing changed) when no record exists, the instance differs, or the
  /// current state does not allow it.
  caf::expected<update_result> update(const record_update& upd);

  /// Lists up to `limit` records of `route` in `state` with keys after
  /// `after` (key order), for operators (in-doubt keys).
  caf::expected<record_page> list(const std::string& route, record_state state,
                                  const std::string& after, uint32_t limit);

  /// Turns every in-flight record into in-doubt, inside the open
  /// transaction. Run at start: a record still in flight then belonged to a
  /// process that died while forwarding it, so the upstream may have acted.
  caf::expected<uint64_t> doubt_in_flight();

  /// Reads the record of `(route, key)`, live or not.
  caf::expected<lookup_result> load(const std::string& route,
                                    const std::string& key);

  /// Deletes up to `limit` records with `expires_at_ms <= now_ms`, oldest
  /// first, inside the open transaction.
  caf::expected<uint64_t> purge(int64_t now_ms, uint32_t limit);

  /// Earliest `expires_at_ms` of all records, or -1 when there are none.
  caf::expected<int64_t> next_expiry();

  /// Number of stored records.
  caf::expected<uint64_t> count();

  /// The index of the last replicated log entry applied (0: none), kept in
  /// the same file so that a restart replays only what came after it.
  caf::expected<uint64_t> applied_index();

  /// Records `index` as applied, inside the open transaction (so it commits
  /// atomically with the entry's changes).
  caf::error set_applied_index(uint64_t index);

  /// Caps the database at `pages` pages, so that writes beyond fail with
  /// SQLITE_FULL exactly as on a full disk. For failure tests and drills.
  caf::error limit_pages(uint64_t pages);

  /// Schema version found in (or written to) the file.
  int version() const;

private:
  struct impl;
  explicit sqlite_store(std::unique_ptr<impl> ptr);
  std::unique_ptr<impl> impl_;
};

} // namespace oncegate::persistence
