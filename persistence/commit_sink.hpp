#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "persistence/command.hpp"

namespace oncegate::persistence {

class sqlite_store;

/// The outcome of one batch: one result per command, in order, or the
/// error that kept all of them from committing.
using batch_outcome = caf::expected<std::vector<command_result>>;

/// Receives the outcome of one batch that a sink commits asynchronously:
/// called exactly once, from any thread; must not block.
using commit_callback = std::function<void(batch_outcome)>;

/// How a sink commits; fixed for its lifetime.
struct sink_traits {
  /// Batches handed to the sink and not yet answered at most.
  uint32_t max_in_flight = 1;
  /// Bytes of commands (as encoded) per batch at most; a larger command is
  /// a batch of its own.
  uint64_t max_batch_bytes = std::numeric_limits<uint64_t>::max();
  /// At exit, commit what is still queued (its senders were accepted and
  /// wait for the answer) instead of failing it with
  /// `errc::store_unavailable` (it never left this node: nothing happened).
  bool commit_on_exit = true;
  /// The thread that learns an outcome runs the store for it whatever the
  /// batch's size (a thread of the sink's own, with nothing else to do;
  /// the key actors of a batch of more than one still go to the
  /// scheduler). Otherwise only an outcome of one, as the sink's callback
  /// then says (see `commit`).
  bool settle_where_learnt = false;
};

/// Where the store actor (`spawn_store`) hands its batches: the seam below
/// group commit. The store actor queues, bounds, slices and answers; a sink
/// makes one batch durable, either on this node's SQLite writer
/// (`local_sink`) or as a replicated log entry (`cluster::raft_sink`).
///
/// Every member is called from the store actor only.
class commit_sink {
public:
  virtual ~commit_sink();

  /// How this sink commits.
  virtual sink_traits traits() const = 0;

  /// The connection that reads (get, list, next, count, stats, what a
  /// purge leaves) are answered from.
  virtual sqlite_store& reader() = 0;

  /// The time a command made at `requested_ms` is decided at: the request's
  /// own time on a single node, the leader's batch clock in a cluster.
  virtual int64_t stamp(int64_t requested_ms) = 0;

  /// Why no batch can be committed now (queued commands then fail with it),
  /// or no error.
  virtual caf::error refusal() = 0;

  /// Commits `batch`, stamping its claims and purges where the sink's clock
  /// decides. A synchronous sink returns the outcome (after COMMIT
  /// returned); an asynchronous one returns none and calls `done` once.
  virtual std::optional<batch_outcome> commit(std::vector<command>& batch,
                                              commit_callback done)
    = 0;
};

} // namespace oncegate::persistence
