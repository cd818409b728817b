#pragma once

#include <cstdint>
#include <memory>

#include <caf/fwd.hpp>

#include "common/clock.hpp"
#include "persistence/batch_clock.hpp"
#include "persistence/commit_sink.hpp"
#include "persistence/sqlite_store.hpp"
#include "persistence/store_actor.hpp"
#include "replication/raft_node.hpp"

namespace oncegate::cluster {

/// Limits of the replicated store: the store actor's, plus the Raft sink's.
struct replicated_store_options : persistence::store_actor_options {
  /// Log entries proposed and not yet applied at most; commands arriving
  /// meanwhile wait and form the next entries (group commit over Raft).
  uint32_t max_outstanding = 4;
  /// Bytes of commands per log entry at most (one command larger than this
  /// is an entry of its own).
  uint64_t max_entry_bytes = 1024 * 1024;
  /// The store actor on a thread of its own (`store.on-scheduler` off).
  bool detached = true;
  /// The Raft group (partition) whose log this store's writes go to.
  uint16_t group = 0;
};

/// A cluster node's sink: each batch becomes one Raft log entry, proposed
/// through `raft`; its outcome comes back from the Raft thread once the
/// entry committed on a majority and was applied to the local SQLite (or
/// failed). Claims and purges carry the leader's batch clock.
///
/// Batches fail with `errc::not_leader` when this node is not the leader
/// (nothing happened; a follower proposes nothing), with `errc::overloaded`
/// when the Raft log is at its byte bound and the entry could not wait for
/// a snapshot to trim it (never proposed: see `raft_node::propose`), and with
/// `errc::leadership_lost` when leadership moved while the entry was in
/// flight (it may still commit: outcome unknown; a claim retried with the
/// same request id finds its own record). Commands still queued when the
/// store stops were never proposed: they fail.
class raft_sink final : public persistence::commit_sink {
public:
  /// Reads come from `reader`, a read-only connection to the file the Raft
  /// thread applies entries to.
  raft_sink(std::shared_ptr<raft_node> raft,
            std::shared_ptr<persistence::sqlite_store> reader,
            const replicated_store_options& opts,
            wall_clock_fn now = wall_clock_ms);

  persistence::sink_traits traits() const override;

  persistence::sqlite_store& reader() override;

  /// The leader's clock: one clock (the log's, see `apply_batch`) decides,
  /// whichever node received the request; carried forward from the log's
  /// time when this node's clock is behind it (see `batch_clock`).
  int64_t stamp(int64_t requested_ms) override;

  /// `errc::not_leader` unless this node leads (libraft would refuse the
  /// proposal anyway).
  caf::error refusal() override;

  /// Stamps the batch, proposes it and answers none: `done` runs on the
  /// Raft thread.
  std::optional<persistence::batch_outcome>
  commit(std::vector<persistence::command>& batch,
         persistence::commit_callback done) override;

private:
  std::shared_ptr<raft_node> raft_;
  std::shared_ptr<persistence::sqlite_store> reader_;
  uint16_t group_ = 0;
  persistence::sink_traits traits_;
  persistence::batch_clock clock_;
};

/// Spawns a store actor (the `persistence::store_actor` interface, detached)
/// over a `raft_sink`: writes are answered only after their entry committed
/// on a majority and was applied locally; reads (get, list, next, count)
/// come from `reader`.
persistence::store_actor
spawn_replicated_store(caf::actor_system& sys, std::shared_ptr<raft_node> raft,
                       std::shared_ptr<persistence::sqlite_store> reader,
                       replicated_store_options opts,
                       wall_clock_fn now = wall_clock_ms);

} // namespace oncegate::cluster
