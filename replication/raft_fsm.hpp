#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "persistence/command.hpp"
#include "persistence/sqlite_store.hpp"

struct raft;
struct raft_buffer;
struct raft_fsm;

namespace oncegate::cluster {

/// The replicated state machine: libraft's FSM callbacks over one node's
/// SQLite store. Each committed log entry is a batch of commands
/// (`persistence::encode_batch`), applied with `persistence::apply_batch` in
/// one transaction together with its index, so a restart replays only what
/// the file has not seen. The results reach the proposer through libraft's
/// apply callback, which libraft calls right after `apply` (on the leader
/// that proposed the entry only): its `result` points to the entry's
/// `std::vector<command_result>`, owned by the adapter and valid until the
/// callback returns, so move them out (empty when the entry was skipped as
/// applied before a restart; null when it failed to apply). Entries without
/// a waiting proposer (every follower's) therefore leak nothing.
///
/// A snapshot is the whole database (`sqlite_store::snapshot_image`). The
/// synchronous `snapshot` step pins the state at the snapshot's index with a
/// read transaction on a connection of its own (opened at the first
/// snapshot); the image is then copied from it, and the writer keeps
/// applying entries meanwhile. Restoring a snapshot replaces the whole
/// database through the writer (`sqlite_store::restore_image`).
///
/// What the node must do:
/// - `attach` the raft instance right after `raft_init`, before `raft_start`
///   (which may restore a snapshot and replay entries);
/// - with `async_snapshots` (FSM version 3), libraft wants an io of version
///   2 with `async_work`. raft_uv 0.15 implements it but reports version 1,
///   so set `io.version = 2` after `raft_uv_init` and before `raft_init`,
///   which otherwise refuses the FSM;
/// - keep the adapter and the store alive until `raft_close` completed.
///
/// A follower's entries can wait (`defer_follower_applies`): libraft
/// applies what a new AppendEntries says is committed before it sends that
/// request's answer, so an apply in `apply` puts a SQLite write between a
/// follower's fsync and the leader's commit, on every decision. Deferred,
/// `apply` only decodes and queues the entry (libraft counts it applied),
/// and `flush` writes what is queued, in order and in one transaction, once
/// the answers are on their way (the node's check handle, a loop turn
/// later: libraft writes an answer to its end of a socketpair, which the
/// node link reads and frames in the next turn). A
/// follower's state in SQLite is then behind libraft's applied index for
/// the rest of the loop turn; everything that reads or replaces that state
/// on the loop thread flushes first: an apply as leader (whose proposer
/// needs the result), `snapshot` (which pins the state at the applied
/// index) and a new leader's readiness (raft_node). What other threads read may lag by as much, as a
/// follower always may. A flush that fails keeps the entries queued and
/// counts a failure; the check tries again after a back-off, the next
/// `apply` of a follower tries it again and answers RAFT_IOERR if it
/// fails (what libraft does then is what it did when a write inside
/// `apply` failed: it skips that AppendEntries' answer or stops the
/// replica), and snapshots are refused: nothing queues up behind it,
/// nothing is skipped. An installed snapshot replaces the queue (the image
/// is past every queued entry). Entries queued when the process dies are
/// in the log and applied again at start.
///
/// Threads: `apply`, `snapshot`, `snapshot_finalize`, `restore`, `flush`
/// and the hooks run on the raft loop thread; the copy of `snapshot_async` runs in
/// libuv's thread pool and touches only the snapshot connection.
class raft_fsm_adapter {
public:
  /// Called after each entry this node applied, with its index, commands
  /// and their results (not for entries skipped as applied before a
  /// restart); for a deferred entry, when it is flushed.
  using applied_hook
    = std::function<void(uint64_t, const std::vector<persistence::command>&,
                         const std::vector<persistence::command_result>&)>;

  /// `async_snapshots` selects FSM version 3 (the image is copied in
  /// libuv's thread pool) over version 2 (copied on the loop thread, which
  /// stalls applies for the duration).
  raft_fsm_adapter(persistence::sqlite_store& db, bool async_snapshots);
  ~raft_fsm_adapter();

  raft_fsm_adapter(const raft_fsm_adapter&) = delete;
  raft_fsm_adapter& operator=(const raft_fsm_adapter&) = delete;

  /// The libraft FSM (version 3 or 2, see the constructor).
  raft_fsm* fsm();

  /// Points the adapter at the raft instance whose `raft_last_applied`
  /// numbers the entries (set once, after `raft_init`).
  void attach(::raft* r);

  /// Sets the hook run on every node after each applied entry (e.g. to drop
  /// cached decisions of the records it changed).
  void on_applied(applied_hook fn);

  /// Whether entries applied while not the leader wait for `flush` (see
  /// above); off: every entry is written inside `apply`.
  void defer_follower_applies(bool on) {
    defer_ = on;
  }

  /// Writes the deferred entries up to index `through` (all by default),
  /// in order, up to 1024 per transaction, and runs their hooks. On an
  /// error the rest stays queued, a failure is counted and `flush_due`
  /// holds off the next try (50 ms, doubling up to 5 s).
  caf::error flush(uint64_t through = UINT64_MAX);

  /// Whether the node's check should try to write the queue now: always,
  /// unless the last write failed and its back-off has not passed.
  bool flush_due() const;

  /// Entries waiting for `flush`, and the index of the last of them (0:
  /// none).
  std::size_t deferred() const {
    return deferred_.size();
  }
  uint64_t last_deferred() const;

  /// Sets the hook run after a snapshot replaced the whole database.
  void on_restored(std::function<void()> fn);

  /// Tests only: runs in libuv's thread pool before each snapshot image is
  /// copied (`snapshot_async`), so a test can hold a snapshot in progress
  /// for as long as it needs, whatever the machine's speed; false fails
  /// the snapshot as a failed copy would.
  void before_snapshot_copy(std::function<bool()> fn);

  /// Bounds libraft's log in memory by bytes as well as by entries: the log
  /// kept between snapshots is `threshold` entries plus `trailing` behind a
  /// snapshot, each up to the largest entry, so with large signals a count
  /// alone bounds nothing. Once the entries applied since the last snapshot
  /// reach three quarters of `max_bytes`, the threshold drops to what was
  /// applied (libraft snapshots after the next entry); the trailing part is
  /// held to what a quarter of `max_bytes` fits at the average entry size.
  /// Set once, after `attach`; 0 bytes: counts only.
  void bound_log(uint64_t max_bytes, unsigned threshold, unsigned trailing);

  /// Makes libraft take a snapshot right after the next entry it applies
  /// (a barrier will do): lowers the threshold as `bound_log` does.
  void snapshot_soon();

  /// Bytes of the applied entries in libraft's in-memory log: those applied
  /// since the last snapshot and the trailing ones it kept (counted anew
  /// from libraft's log after each snapshot).
  uint64_t log_bytes() const {
    return log_bytes_;
  }

  /// Entries that failed to apply (decode or SQLite errors) and snapshots
  /// that failed to restore.
  uint64_t failures() const {
    return failures_;
  }

  /// Snapshot images taken (handed to libraft).
  uint64_t snapshots() const {
    return snapshots_;
  }

  /// Snapshots restored (installed from the leader or loaded at start).
  uint64_t restores() const {
    return restores_;
  }

private:
  static int apply(::raft_fsm* fsm, const ::raft_buffer* buf, void** result);
  static int snapshot(::raft_fsm* fsm, ::raft_buffer* bufs[], unsigned* n);
  static int snapshot_async(::raft_fsm* fsm, ::raft_buffer* bufs[],
                            unsigned* n);
  static int snapshot_finalize(::raft_fsm* fsm, ::raft_buffer* bufs[],
                               unsigned* n);
  static int restore(::raft_fsm* fsm, ::raft_buffer* buf);

  // Copies the pinned state into one buffer from `raft_malloc` and ends the
  // read transaction; returns whether it succeeded.
  bool copy_pinned(::raft_buffer* bufs[], unsigned* n);

  persistence::sqlite_store& db_;
  ::raft* raft_ = nullptr;
  std::unique_ptr<raft_fsm> fsm_;
  /// The connection snapshots read from, and whether it holds a read
  /// transaction for a snapshot in progress.
  std::unique_ptr<persistence::sqlite_store> snapshot_db_;
  bool pinned_ = false;
  /// Entries applied while a follower, not written yet (see `flush`), and
  /// whether the last flush failed.
  std::vector<persistence::log_entry> deferred_;
  bool defer_ = false;
  bool flush_failed_ = false;
  std::chrono::milliseconds retry_delay_{0};
  std::chrono::steady_clock::time_point retry_at_;
  /// The results of the entry applied last, which `apply` hands to libraft.
  std::vector<persistence::command_result> results_;
  applied_hook on_applied_;
  std::function<void()> on_restored_;
  std::function<bool()> before_copy_;
  uint64_t failures_ = 0;
  uint64_t snapshots_ = 0;
  uint64_t restores_ = 0;
  /// See `bound_log`.
  uint64_t max_log_bytes_ = 0;
  unsigned threshold_ = 0;
  unsigned trailing_ = 0;
  uint64_t log_bytes_ = 0;
  uint64_t entries_ = 0;
  double avg_entry_ = 0;
  bool lowered_ = false;
  // Re-derives libraft's snapshot threshold and trailing from the bytes.
  void adjust_log_bounds();
  // Counts the applied entries libraft's log still holds.
  void recount_log();
};

} // namespace oncegate::cluster
