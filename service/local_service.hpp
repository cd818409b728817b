// The node service of a single node: every request goes to the local
// actors (the key's registry shard, the store). Nothing here knows of
// clusters; routing/routed_service.hpp is the cluster's implementation.
#pragma once

#include <memory>

#include <caf/fwd.hpp>

#include "actors/node.hpp"
#include "service/bridge.hpp"
#include "service/node_service.hpp"

namespace oncegate::gateway {

/// A claim, update, lookup or list is sent from the calling thread to the
/// key's registry shard (or the store) and completed on the thread of the
/// actor that answered (`actor_caller`, never blocking); metrics, probes and
/// delivery scans go through a bridge actor.
std::unique_ptr<node_service>
make_local_service(caf::actor_system& sys, const node& n,
                   service_options opts);

} // namespace oncegate::gateway
