#pragma once

#include <cstdint>
#include <memory>

#include <caf/fwd.hpp>

#include "replication/raft_node.hpp"
#include "persistence/sqlite_store.hpp"
#include "common/clock.hpp"
#include "persistence/store_actor.hpp"

namespace oncegate::cluster {

/// Limits of the replicated store.
struct replicated_store_options {
  /// Commands per log entry at most.
  uint32_t max_batch = 1024;
  /// Log entries proposed and not yet applied at most; commands arriving
  /// meanwhile wait and form the next entries (group commit over Raft).
  uint32_t max_outstanding = 4;
  /// Commands waiting for an entry at most; beyond, new ones fail at once
  /// with `errc::overloaded`.
  uint32_t max_pending = 65536;
  /// Bytes of commands waiting for an entry at most (a first one always
  /// fits); beyond, new ones fail at once with `errc::overloaded`.
  uint64_t max_pending_bytes = 64 * 1024 * 1024;
  /// Bytes of commands per log entry at most (one command larger than this
  /// is an entry of its own).
  uint64_t max_entry_bytes = 1024 * 1024;
  /// An in-flight record first seen this long ago has outlived every
  /// forward (connect + response timeouts): each purge turns such records
  /// in-doubt. 0: never.
  int64_t in_flight_deadline_ms = 0;
};

/// Spawns a store actor (the `persistence::store_actor` interface) whose
/// writes are Raft log entries: each batch of claims, updates and purges is
/// proposed through `raft` and answered only after the entry committed on a
/// majority and was applied to the local SQLite. Reads (get, list, next,
/// count) come from `reader`, a read-only connection to the same file.
///
/// Writes fail with `errc::not_leader` when this node is not the leader
/// (nothing happened) and with `errc::leadership_lost` when leadership moved
/// while the entry was in flight (it may still commit: outcome unknown; a
/// claim retried with the same request id finds its own record).
persistence::store_actor
spawn_replicated_store(caf::actor_system& sys, std::shared_ptr<raft_node> raft,
                       std::shared_ptr<persistence::sqlite_store> reader,
                       replicated_store_options opts,
                       wall_clock_fn now = wall_clock_ms);

} // namespace oncegate::cluster
