#pragma once

#include <chrono>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <caf/actor.hpp>
#include <caf/expected.hpp>
#include <caf/fwd.hpp>
#include <caf/timespan.hpp>

#include "actors/node.hpp"
#include "replication/raft_node.hpp"
#include "replication/raft_sink.hpp"
#include "routing/peer_tls.hpp"

namespace oncegate::cluster {

/// A node of the cluster as every node knows it: its id, its Raft address
/// and where its front actor is published (CAF middleman).
struct peer {
  uint64_t id = 0;
  std::string raft_address;
  std::string host;
  uint16_t port = 0;
};

/// Parses `ID=RAFT_HOST:RAFT_PORT,CAF_HOST:CAF_PORT`; empty `error` on
/// success.
peer parse_peer(const std::string& text, std::string& error);

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
  /// Raft timing and snapshots (id, address and dir are filled in).
  raft_node_options raft;
  replicated_store_options store;
  /// Bound on each request to another node's front actor.
  caf::timespan remote_timeout = std::chrono::seconds(1);
  /// With TLS: the CAF port refuses, before any TLS, connections from an
  /// address that is no member's (`tls::policy_config::member_sources_only`).
  bool member_sources_only = true;
  /// With TLS: the largest message (BASP payload) another node may send
  /// (`tls::policy_config::max_message_bytes`).
  uint32_t max_peer_message = tls::policy_config{}.max_message_bytes;
};

/// Cached handles of the other nodes' front actors (thread-safe). Connects
/// through the middleman on demand, without blocking the caller.
class peer_links {
public:
  peer_links(caf::actor_system& sys, std::vector<peer> peers,
             caf::timespan timeout, bool tls = false);

  /// The front actor of `id` if connected; otherwise starts connecting
  /// (from `self`, asynchronously) and returns an invalid handle.
  caf::actor get(caf::event_based_actor* self, uint64_t id);

  /// Forgets the handle of `id` (after a failed request), so that the next
  /// `get` reconnects.
  void drop(uint64_t id);

  const peer* find(uint64_t id) const;

  const std::vector<peer>& peers() const {
    return peers_;
  }

private:
  caf::actor_system& sys_;
  std::vector<peer> peers_;
  caf::timespan timeout_;
  /// Connect through libcaf_openssl's manager instead of the middleman.
  bool tls_ = false;
  std::mutex mtx_;
  std::unordered_map<uint64_t, caf::actor> links_;
  std::unordered_set<uint64_t> connecting_;
};

/// One node of a cluster: the node's actors over a replicated store, its
/// Raft server, and its front actor, published for the other nodes'
/// gateways. The front forwards claims, updates and lookups to the local
/// registries while this node is the ready leader, and refuses them with
/// `errc::not_leader` otherwise.
class cluster_node {
public:
  node local;
  std::shared_ptr<raft_node> raft;
  caf::actor front;
  std::shared_ptr<peer_links> links;
  /// Messages from other nodes the front refused as malformed.
  std::shared_ptr<std::atomic<uint64_t>> refused_messages
    = std::make_shared<std::atomic<uint64_t>>(0);
  uint16_t front_port = 0;
  cluster_options opts;

  /// Stops the alarm, registries, store and front; then Raft.
  void shutdown();
};

/// Hooks of the cluster node into the layers above (run on the Raft
/// thread, must not block).
struct cluster_hooks {
  /// After every applied entry (all nodes): e.g. drop cached decisions of
  /// records an entry released.
  std::function<void(const std::vector<persistence::command>&,
                     const std::vector<persistence::command_result>&)>
    on_applied;
  /// After a snapshot replaced the database.
  std::function<void()> on_restored;
  /// Raft stopped for good (`raft_hooks::on_unavailable`): the node must
  /// exit so that its supervisor restarts it.
  std::function<void()> on_unavailable;
};

/// Whether the message `self` is handling comes from `target` (another
/// node's front actor), by node and actor id. CAF matches answers to
/// requests by message id alone, so every answer from another node is
/// checked with this; the node ids on the CAF port are bound to the
/// certificates (routing/peer_basp.hpp), so a member cannot answer for
/// another.
bool answered_by(caf::event_based_actor* self, const caf::actor& target);

/// Prepares the node's CAF connections to the other nodes for mutual TLS
/// (libcaf_openssl with the node-identity policy of `peer_tls.hpp`) when
/// `copts.raft.tls` is set: loads the OpenSSL module and checks the
/// certificates. Call it before creating the actor system.
caf::error prepare_peer_tls(caf::actor_system_config& cfg,
                            const cluster_options& copts);

/// After the actor system exists: proves the policy is in force (the
/// OpenSSL calls of libcaf_openssl reach it).
caf::error check_peer_tls(caf::actor_system& sys,
                          const cluster_options& copts);

/// Opens the database under `opts.data_dir` (Raft log in `raft/` beside
/// it), starts Raft, spawns the actors and publishes the front actor.
/// Requires the middleman (`caf::io::middleman`) to be loaded.
caf::expected<std::unique_ptr<cluster_node>>
start_cluster_node(caf::actor_system& sys, node_options opts,
                   cluster_options copts, cluster_hooks hooks = {},
                   wall_clock_fn now = wall_clock_ms);

} // namespace oncegate::cluster
