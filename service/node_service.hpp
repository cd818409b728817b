#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actors/alarm_actor.hpp"
#include "actors/registry.hpp"
#include "common/errc.hpp"
#include "common/raft_progress.hpp"
#include "common/record.hpp"
#include "persistence/store_actor.hpp"

namespace oncegate::gateway {

/// An answer from the node: a value, or why there is none.
template <class T>
struct reply {
  bool ok = false;
  T value;
  /// When `!ok`: the reason (`timeout`, `overloaded`, storage errors).
  errc error = errc::none;
  std::string detail;
};

/// One member of a cluster's Raft configuration.
struct cluster_member {
  uint64_t id = 0;
  std::string address;
  /// `voter`, `standby` or `spare`.
  std::string role;
};

/// The node link's counters (link::link_stats, as /metrics shows them).
struct link_counters {
  uint64_t links = 0;
  uint64_t streams = 0;
  uint64_t buffered_bytes = 0;
  uint64_t refused_handshake = 0;
  uint64_t refused_identity = 0;
  uint64_t refused_hello = 0;
  uint64_t refused_busy = 0;
  uint64_t refused_source = 0;
  uint64_t refused_frame = 0;
  uint64_t requests_sent = 0;
  uint64_t requests_failed = 0;
  uint64_t late_answers = 0;
  uint64_t requests_served = 0;
  uint64_t requests_overloaded = 0;
};

/// One partition (Raft group) of a cluster node, as this node sees it.
struct partition_info : raft_progress {
  uint16_t partition = 0;
  /// This node's role in it: `leader`, `follower`, `candidate` or
  /// `unavailable`.
  std::string role;
  /// The ids of its voters, as this node knows its configuration.
  std::vector<uint64_t> voters;
};

/// The Raft state of a cluster node (`enabled` is false on a single node).
/// The fields it inherits are partition 0's (a cluster without partitions
/// has that one), `partitions` has every partition's.
struct cluster_info : raft_progress {
  bool enabled = false;
  uint64_t id = 0;
  /// `leader`, `follower`, `candidate` or `unavailable`.
  std::string role;
  /// Record transitions being retried in the background, their bytes, and
  /// how many were dropped at the bound.
  uint64_t background_retries = 0;
  uint64_t background_bytes = 0;
  uint64_t background_dropped = 0;
  /// Messages from other nodes refused as malformed.
  uint64_t peer_messages_refused = 0;
  link_counters link;
  std::vector<cluster_member> members;
  std::vector<partition_info> partitions;
};

/// Operator changes of a cluster (run on the leader).
enum class cluster_op : uint8_t {
  /// Add a node of `cluster.peers` as a spare, then promote it to voter
  /// (the leader catches it up first).
  add,
  /// Remove a node from the configuration.
  remove,
  /// Hand leadership to a node (0: any voter).
  transfer,
};

/// Counters gathered from the node's actors for `/metrics`.
struct node_metrics {
  /// False when some actor did not answer in time (the rest is partial).
  bool complete = true;
  registry_stats registry;
  persistence::store_stats store;
  alarm_stats alarm;
  cluster_info cluster;
  /// The paused routes (partition 0's state as this node applied it).
  route_pauses paused;
};

/// What the HTTP side needs of the node. Implemented on top of the actors
/// (service/local_service.hpp, routing/routed_service.hpp); every call returns at once and calls its
/// completion exactly once, on an arbitrary thread.
class node_service {
public:
  virtual ~node_service() = default;

  /// Asks for a durable decision on a claim.
  virtual void claim(claim_request req,
                     std::function<void(reply<claim_result>)> done) = 0;

  /// Applies a record transition (complete, release, in doubt).
  virtual void update(record_update upd,
                      std::function<void(reply<update_result>)> done) = 0;

  /// Reads a record.
  virtual void lookup(std::string route, std::string key,
                      std::function<void(reply<lookup_result>)> done) = 0;

  /// Lists committed records of `route` in `state` after key `after`.
  virtual void list(std::string route, record_state state, std::string after,
                    uint32_t limit,
                    std::function<void(reply<record_page>)> done) = 0;

  /// Whether this node runs the delivery queue now (a single node always;
  /// in a cluster the ready leader of some partition: one node at a time
  /// delivers each partition's records, see `delivery_of`), and
  /// the fence of attempts it starts (`term`: the Raft term, 0 on a single
  /// node) and its node id (`owner` of the attempts).
  struct delivery_turn {
    bool mine = false;
    uint64_t term = 0;
    uint64_t node_id = 0;
  };
  virtual delivery_turn delivery() const {
    return {};
  }

  /// The turn of the record of `(route, key)`: whether this node delivers
  /// it now (in a cluster: it is the ready leader of the key's partition)
  /// and the fence of its attempts (that partition's term).
  virtual delivery_turn delivery_of(const std::string&,
                                    const std::string&) const {
    return delivery();
  }

  /// Reads this node's delivery queue (`delivery_queue`; in a cluster the
  /// queues of the partitions it leads); only meaningful where
  /// `delivery().mine`.
  virtual void due(int64_t, uint32_t,
                   std::function<void(reply<delivery_queue>)> done) {
    reply<delivery_queue> res;
    res.error = errc::invalid_argument;
    res.detail = "this node does not deliver";
    done(std::move(res));
  }

  /// Reads the paused routes (`pause_op::read`), or pauses or resumes
  /// `route` at `now_ms` (in a cluster: in every partition, each through
  /// its leader; answered once every partition committed it). The value is
  /// the paused routes afterwards.
  virtual void pause(std::string, pause_op, int64_t,
                     std::function<void(reply<route_pauses>)> done) {
    reply<route_pauses> res;
    res.error = errc::invalid_argument;
    res.detail = "this node cannot pause routes";
    done(std::move(res));
  }

  /// Gathers counters from every actor.
  virtual void metrics(std::function<void(node_metrics)> done) = 0;

  /// Checks that the store answers; `reason` is set when not ready.
  virtual void ready(std::function<void(bool ok, std::string reason)> done)
    = 0;

  /// The node's Raft state (thread-safe, immediate).
  virtual cluster_info cluster() const {
    return {};
  }

  /// Applies an operator's change through the leader; the value is the
  /// leader after a transfer, 0 otherwise. Adds and removals apply to every
  /// partition (each through its leader); a transfer to `partition` only.
  virtual void change_cluster(cluster_op op, uint64_t id, uint16_t partition,
                              std::function<void(reply<uint64_t>)> done) {
    reply<uint64_t> res;
    res.error = errc::invalid_argument;
    res.detail = "this node does not run a cluster";
    done(std::move(res));
  }
};

} // namespace oncegate::gateway
