#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <caf/fwd.hpp>

#include "persistence/commit_sink.hpp"

namespace oncegate::persistence {

/// A single node's sink: applies each batch with `apply_batch` on the
/// SQLite writer, in one transaction, and answers once COMMIT returned.
/// Batches are numbered like log entries, continuing where the file left
/// off, so a single node applies them exactly as a replica would.
///
/// Two ways to commit, fixed at construction:
/// - without a reader: on the store actor's own turn (a detached store, or
///   a test's deterministic scheduler), one batch at a time;
/// - with a reader (a second connection to the same file, `open_reader`):
///   on the thread that runs the store when that thread runs the actors it
///   wakes itself (`inline_exec::here()`: an HTTP thread with a request
///   alone in flight), so an unloaded new key is read, decided, committed
///   and answered by one thread; on a thread of the sink's own otherwise,
///   so that a scheduler worker never waits for the disk and the store
///   gathers the next batch meanwhile. That thread runs the store for the
///   outcome it learnt, so the store hands it the next batch at once, as a
///   detached store commits its next batch (one batch in flight: a second
///   one handed over early was smaller and lost rate at 50 connections,
///   docs/benchmarks.md session 24). A batch is applied on the asking
///   thread only when the sink's thread holds none, and never on the
///   sink's thread inside the store's turn (the answers of the batch
///   before would wait for that commit). Reads go to the reader: it sees
///   every batch whose outcome was delivered, and never one half-written.
class local_sink final : public commit_sink {
public:
  /// `db` is the writer; the store actor (and the sink's thread for it)
  /// is its only user. `reader`, if given, turns the sink's thread on; it
  /// runs the store for each outcome it learns (`settle_where_learnt`) in
  /// `sys`, so that the next batch follows without waiting for a worker.
  local_sink(std::shared_ptr<sqlite_store> db,
             std::shared_ptr<sqlite_store> reader = nullptr,
             caf::actor_system* sys = nullptr);

  /// Joins the sink's thread after the batch it holds (if any) committed;
  /// its outcome goes to the callback as usual.
  ~local_sink() override;

  local_sink(const local_sink&) = delete;
  local_sink& operator=(const local_sink&) = delete;

  sink_traits traits() const override;

  sqlite_store& reader() override;

  /// The request's own time: its node clock decides.
  int64_t stamp(int64_t requested_ms) override;

  /// Never refuses.
  caf::error refusal() override;

  /// Applies `batch` as the next index, here or behind what the sink's
  /// thread holds (see the class). Here: returns the outcome after COMMIT
  /// returned. There: takes the batch's commands and calls `done` once
  /// from that thread.
  std::optional<batch_outcome> commit(std::vector<command>& batch,
                                      commit_callback done) override;

  /// Batches committed on the sink's thread so far (for tests and traces).
  uint64_t committed_on_own_thread() const;

private:
  // What the sink and its thread share: the writer, the numbering and the
  // batches handed over. The thread holds it too, so that a sink destroyed
  // on that thread (the store's exit runs there) can let it finish alone.
  struct committer;

  std::shared_ptr<sqlite_store> reader_;
  caf::actor_system* sys_;
  std::shared_ptr<committer> c_;
  std::thread thread_;
};

} // namespace oncegate::persistence
