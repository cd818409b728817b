#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include <caf/fwd.hpp>
#include <caf/timespan.hpp>

#include "actors/node.hpp"
#include "routing/cluster_node.hpp"
#include "service/node_service.hpp"

namespace oncegate::gateway {

struct gateway_actor_options {
  /// Bound on gathering metrics and on the readiness probe. Claims have no
  /// actor-side timeout (a clock entry per request is expensive): the HTTP
  /// response timeout bounds them.
  caf::timespan probe_timeout = std::chrono::seconds(2);
  /// Gateway actors sharing the load (round robin).
  std::size_t actors = 1;
  /// Cluster mode: how long a request keeps looking for a ready leader
  /// (retrying every `retry_interval` while there is none, or while the one
  /// asked lost leadership) before it is answered 503.
  caf::timespan leader_wait = std::chrono::seconds(3);
  caf::timespan retry_interval = std::chrono::milliseconds(20);
  /// Cluster mode: record transitions retried in the background (an outcome
  /// that found no leader, the release of an abandoned claim) at most, by
  /// count and by bytes. Beyond, a retry is dropped (logged, counted): its
  /// record stays in flight and turns in-doubt at its deadline, so nothing
  /// executes twice; an operator settles it.
  std::size_t max_background = 10'000;
  std::size_t max_background_bytes = 16 * 1024 * 1024;
};

/// The bridge between asio threads and the actors. An asio thread hands a
/// job over with a fire-and-forget message (never blocking); a long-lived
/// gateway actor requests the answer from the key's registry shard (or the
/// store) and calls the completion on its own thread, which posts the answer
/// back onto the connection's strand.
std::unique_ptr<node_service>
make_gateway_service(caf::actor_system& sys, const node& n,
                     gateway_actor_options opts);

/// The same bridge on a cluster node: claims, updates, lookups and lists go
/// to the local actors while this node is the ready leader, and otherwise to
/// the leader's front actor (finite timeouts); a request finding no leader
/// within `leader_wait` fails with `errc::not_leader`.
std::unique_ptr<node_service>
make_cluster_gateway_service(caf::actor_system& sys,
                             const cluster::cluster_node& n,
                             gateway_actor_options opts);

} // namespace oncegate::gateway
