// What every layer reports of a node's Raft state, in one struct: the
// replication layer's full status (`cluster::raft_status`) and the
// service's view for /v1/cluster and /metrics (`cluster_info`) both extend
// it, so it is copied whole, never field by field.
#pragma once

#include <cstdint>
#include <string>

namespace oncegate {

struct raft_progress {
  uint64_t term = 0;
  /// Known leader (0: none) and its Raft address.
  uint64_t leader_id = 0;
  std::string leader_address;
  /// True once this node is leader and the barrier issued at its election
  /// committed: every entry of earlier terms is applied locally, so the
  /// node's SQLite holds every committed decision.
  bool leader_ready = false;
  uint64_t commit_index = 0;
  uint64_t applied_index = 0;
  uint64_t last_index = 0;
  /// Times this node saw the leader change (including to none).
  uint64_t leader_changes = 0;
  /// Proposals that were applied / failed, and their latency histogram
  /// input (seconds from `propose` to the callback).
  uint64_t proposals_applied = 0;
  uint64_t proposals_failed = 0;
  double proposal_seconds_sum = 0;
  /// Times this node, leading, handed leadership over to repair a stuck
  /// follower (`cluster.repair-after`).
  uint64_t follower_repairs = 0;
};

} // namespace oncegate
