#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "common/atoms.hpp"
#include "common/histogram.hpp"
#include "common/record.hpp"
#include "persistence/commit_sink.hpp"

namespace oncegate::persistence {

/// Counters of one store actor.
struct store_stats {
  uint64_t commits = 0;
  uint64_t failed_commits = 0;
  /// Operations (claims, updates and purges) made durable.
  uint64_t committed_ops = 0;
  uint64_t purged = 0;
  /// Largest batch committed at once.
  uint64_t max_batch = 0;
  /// Seconds from handing a batch to the sink to its outcome (a single
  /// node: BEGIN to the end of COMMIT; a cluster: proposal to local
  /// application), per batch.
  histogram commit_seconds{histogram::latency_bounds()};
  /// Operations per batch.
  histogram batch_size{histogram::size_bounds()};
  /// Unsettled records per route and state, counted when the stats are
  /// asked for (through the unsettled index: cheap while few are).
  std::vector<unsettled_count> unsettled;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_stats& x) {
  return f(caf::meta::type_name("store_stats"), x.commits, x.failed_commits,
           x.committed_ops, x.purged, x.max_batch, x.commit_seconds,
           x.batch_size, x.unsettled);
}

/// The outcome of batch `seq`, from an asynchronous sink (the store actor
/// sends it to itself from the sink's thread).
struct commit_outcome {
  uint64_t seq = 0;
  batch_outcome results{std::vector<command_result>{}};
};

} // namespace oncegate::persistence

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(oncegate::persistence::commit_outcome)

namespace oncegate::persistence {

/// The store: the one place where decisions become durable.
///
/// Writes are group-committed: operations arriving while a batch commits
/// form the next batch, and every operation is answered only after the
/// batch holding it committed (on a single node: its transaction, with
/// `synchronous=FULL`; in a cluster: its log entry, on a majority). A failed
/// commit fails every operation of its batch (`errc::commit_failed`, or the
/// sink's error); nothing of it is durable. How a batch commits is the
/// `commit_sink`'s: the same actor serves a single node and a cluster.
using store_actor = caf::typed_actor<
  /// Decides and persists a claim; see `sqlite_store::claim`.
  caf::replies_to<claim_atom, claim_request>::with<claim_result>,
  /// Changes a record's state; answered after the change committed.
  caf::replies_to<update_atom, record_update>::with<update_result>,
  /// Lists committed records of a route in one state, after a key.
  caf::replies_to<list_atom, std::string, record_state, std::string,
                  uint32_t>::with<record_page>,
  /// Reads the committed record of `(route, key)`.
  caf::replies_to<get_atom, std::string, std::string>::with<lookup_result>,
  /// Deletes up to `limit` records expired at `now_ms`; answers what is left.
  caf::replies_to<purge_atom, int64_t, uint32_t>::with<purge_result>,
  /// Turns the in-flight records of `owner` (0: any) first seen before
  /// `before_ms` into in-doubt (see `sqlite_store::doubt`); answers how many.
  caf::replies_to<doubt_atom, uint64_t, int64_t>::with<uint64_t>,
  /// Answers the earliest expiry (-1: none).
  caf::replies_to<next_atom>::with<int64_t>,
  /// Readiness, within a bound (the prober's timeout): `store_unavailable`
  /// while a batch handed to the sink has not returned for that long (a
  /// commit stuck off this actor's thread); true while the last batch
  /// committed; the error of the last batch when it failed to (a full
  /// disk), and then a probe batch (a doubt that matches nothing) is sent,
  /// at most one per 500 ms, so that a store that can write again is ready
  /// again without traffic.
  caf::replies_to<ready_atom, caf::timespan>::with<bool>,
  /// The delivery queue: up to `limit` queued records due at `now_ms`, and
  /// the earliest next attempt.
  caf::replies_to<due_atom, int64_t, uint32_t>::with<delivery_queue>,
  /// Reads the paused routes, or pauses or resumes one at `now_ms` (the
  /// sink stamps it) and answers the paused routes once that committed.
  caf::replies_to<pause_atom, std::string, pause_op, int64_t>::with<
    route_pauses>,
  /// Answers the counters.
  caf::replies_to<stats_atom>::with<store_stats>,
  /// Answers the number of stored records (a full count: not for hot
  /// paths or frequent scrapes).
  caf::replies_to<count_atom>::with<uint64_t>,
  /// Commits the open batch (sent by the actor to itself).
  caf::reacts_to<flush_atom>,
  /// Settles a batch an asynchronous sink committed (sent to itself).
  caf::reacts_to<commit_outcome>>;

/// Limits of the store actor.
struct store_actor_options {
  /// Operations per batch at most.
  uint32_t max_batch = 1024;
  /// Operations waiting for a transaction at most; beyond, new claims,
  /// purges and doubts fail at once with `errc::overloaded`. Updates (a
  /// claimed record's outcome or release) are always queued: they are
  /// bounded by the requests in flight.
  uint32_t max_pending = 65536;
  /// Bytes of operations waiting for a transaction at most (a first one
  /// always fits); beyond, as above.
  uint64_t max_pending_bytes = 64 * 1024 * 1024;
  /// An in-flight record first seen this long ago has outlived every
  /// forward (connect + response timeouts): each purge turns such records
  /// in-doubt. 0: never.
  int64_t in_flight_deadline_ms = 0;
  /// A batch of one command (a node with little load) is answered from the
  /// store's thread: the key actor the answer wakes runs there, before the
  /// store's next message, instead of waking a worker for it
  /// (common/inline_execution.hpp). `spawn_store` sets it for a detached
  /// store (on the scheduler the answer wakes nobody: the worker that ran
  /// the store runs it next).
  bool answer_here = false;
};

/// Spawns the store actor over `sink` (`local_sink` on a single node).
/// Production spawns it detached (its own thread: SQLite blocks; then
/// `answer_here` is on); deterministic tests spawn it scheduled.
store_actor spawn_store(caf::actor_system& sys,
                        std::shared_ptr<commit_sink> sink,
                        store_actor_options opts, bool detached);

} // namespace oncegate::persistence
