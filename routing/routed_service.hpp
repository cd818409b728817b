// The node service of a cluster node: routes every request to the ready
// leader (this node's actors when it is the one, the leader over the node
// link otherwise), retries while there is none or it lost leadership (with the
// same request id), releases abandoned claims, keeps record transitions
// that found no leader trying in the background (bounded), and reads the
// Raft state for /v1/cluster and /readyz. The single node's service is
// service/local_service.hpp; the HTTP side sees only `node_service`.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include <caf/fwd.hpp>
#include <caf/timespan.hpp>

#include "routing/cluster_node.hpp"
#include "service/bridge.hpp"
#include "service/node_service.hpp"

namespace oncegate::gateway {

struct routed_service_options {
  service_options service;
  /// How long a request keeps looking for a ready leader (retrying every
  /// `retry_interval`, backing off, while there is none, or while the one
  /// asked lost leadership) before it is answered 503.
  caf::timespan leader_wait = std::chrono::seconds(3);
  caf::timespan retry_interval = std::chrono::milliseconds(20);
  /// Record transitions retried in the background (an outcome that found no
  /// leader, the release of an abandoned claim) at most, by count and by
  /// bytes. Beyond, a retry is dropped (logged, counted): its record stays
  /// in flight and turns in-doubt at its deadline, so nothing executes
  /// twice; an operator settles it.
  std::size_t max_background = 10'000;
  std::size_t max_background_bytes = 16 * 1024 * 1024;
};

/// The service over cluster node `n` (see above).
/// The bridge actors are the cluster node's (`cluster_node::bridge`);
/// `opts.service.actors` sized them (`cluster_options::bridge_actors`).
std::unique_ptr<node_service>
make_routed_service(const cluster::cluster_node& n,
                    routed_service_options opts);

} // namespace oncegate::gateway
