#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <caf/fwd.hpp>
#include <caf/timespan.hpp>

#include "actors/node.hpp"
#include "link/frames.hpp"
#include "replication/raft_node.hpp"
#include "replication/raft_sink.hpp"
#include "service/bridge.hpp"
#include "service/caller.hpp"

namespace oncegate::cluster {

/// A node of the cluster as every node knows it: its id and the address of
/// its node link (Raft's address).
struct peer {
  uint64_t id = 0;
  std::string raft_address;
};

/// Parses `ID=HOST:PORT`. The form of builds before the node link,
/// `ID=HOST:PORT,CAF_HOST:CAF_PORT`, is read too (the second address is no
/// longer used; `legacy` says it was there). Empty `error` on success.
peer parse_peer(const std::string& text, std::string& error,
                bool* legacy = nullptr);

/// What a cluster node needs beyond a single node's options.
struct cluster_options {
  /// This node's id (must be one of `peers`).
  uint64_t id = 0;
  /// Every node this one may talk to, itself included.
  std::vector<peer> peers;
  /// Ids of the voters of a fresh cluster (bootstrap); empty: every peer.
  /// A node started with `join` does not bootstrap: it waits to be added.
  std::vector<uint64_t> initial;
  bool join = false;
  /// Raft timing, snapshots and the node link (id, address, members and
  /// dir are filled in).
  raft_node_options raft;
  replicated_store_options store;
  /// Partitions (Raft groups) of the cluster, 1..`link::max_groups`; fixed
  /// when the cluster is created (`check_partition_count`).
  uint16_t partitions = 1;
  /// Bound on each request to another node (over the link).
  caf::timespan remote_timeout = std::chrono::seconds(1);
  /// Actors that run this node's background requests (metrics, probes,
  /// delivery scans, a retry's back-off, membership changes;
  /// `actor_bridge`); claims, updates and lookups need none
  /// (`actor_caller`).
  std::size_t bridge_actors = 1;
};

/// Why a request from another node cannot be served as it is (bounds,
/// enums, an owner or node that is no member), as a short reason; nullptr
/// when it can. Every request that arrives on the link passes here before
/// anything acts on it.
const char* refusal(const link::request& req, const std::vector<peer>& peers);

/// Ready: this node's actors serve requests while it is the ready leader.
struct cluster_context;

/// One node of a cluster: per partition, the node's actors over that
/// partition's replicated store; its Raft server (every partition's group,
/// with the node link), the caller that asks those actors for this node's
/// gateway and for the other nodes, and the bridge actors that run its
/// background requests.
class cluster_node {
public:
  /// Partition g's actors (registry shards, alarm, store over group g).
  std::vector<node> parts;
  std::shared_ptr<raft_node> raft;
  std::shared_ptr<gateway::actor_bridge> bridge;
  std::shared_ptr<gateway::actor_caller> caller;
  std::shared_ptr<cluster_context> context;
  cluster_options opts;
  /// Requests from other nodes refused as malformed (and answers that
  /// made no sense), shared with the node's metrics.
  std::shared_ptr<std::atomic<uint64_t>> refused_messages
    = std::make_shared<std::atomic<uint64_t>>(0);

  /// Stops the alarm, registries and store; then Raft.
  void shutdown();
};

/// Runs `req` at this node's actors of partition `group` (its registry
/// shard, its store, its Raft group) as that group's ready leader, from any
/// thread, and calls `done` with
/// the answer on the thread that has it (the answering actor's, the Raft
/// thread's, a bridge actor's, or the caller's when nothing was asked):
/// the one path of a request, whether this node's gateway or another node
/// asked. `done` must not block. `not_leader` unless this node is the
/// group's ready leader.
void call_locally(const std::shared_ptr<cluster_context>& cx, uint16_t group,
                  link::request req, std::function<void(link::answer)> done);

/// Hooks of the cluster node into the layers above (run on the Raft
/// thread, must not block).
struct cluster_hooks {
  /// After every applied entry of any partition (all nodes): e.g. drop
  /// cached decisions of records an entry released.
  std::function<void(uint16_t group, const std::vector<persistence::command>&,
                     const std::vector<persistence::command_result>&)>
    on_applied;
  /// After a snapshot replaced a partition's database.
  std::function<void(uint16_t group)> on_restored;
  /// Raft stopped for good (`raft_hooks::on_unavailable`): the node must
  /// exit so that its supervisor restarts it.
  std::function<void()> on_unavailable;
};

/// A partition's share of a node-wide budget (bytes, pages, entries):
/// `budget / partitions`, at least `floor`; 0 (no bound) stays 0, and one
/// partition has the whole budget as it is.
uint64_t partition_share(uint64_t budget, uint16_t partitions, uint64_t floor);

/// The file of partition `group`'s database under `data_dir`:
/// `oncegate.db` for partition 0 (a cluster without partitions keeps its
/// layout), `oncegate-p<g>.db` for the others.
std::string partition_db(const std::string& data_dir, uint16_t group);

/// Checks the partition count `partitions` against the one `data_dir` was
/// created with (its file `partitions`), writing it (atomically) when the
/// directory has none yet: a directory with data but without that file
/// (a build before partitions) holds one partition. A mismatch, or a file
/// that is not a count, is refused with a message that says so.
caf::error check_partition_count(const std::string& data_dir,
                                 uint16_t partitions);

/// Checks the partition count, opens every partition's database under
/// `opts.data_dir` (Raft logs in `raft/`, `raft-g/` beside them), starts
/// Raft with the node link, spawns the actors, and serves other nodes'
/// requests at them.
caf::expected<std::unique_ptr<cluster_node>>
start_cluster_node(caf::actor_system& sys, node_options opts,
                   cluster_options copts, cluster_hooks hooks = {},
                   wall_clock_fn now = wall_clock_ms);

} // namespace oncegate::cluster
