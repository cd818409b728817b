#pragma once

// The cluster admin endpoints: `GET /v1/cluster` (Raft state),
// `POST|DELETE /v1/cluster/members/ID`, `POST /v1/cluster/transfer[?to=ID]`.
// Only request parsing and answers; the changes themselves are the node
// service's. Admin auth is checked before (`api/admin_auth.hpp`).

#include "http/http_types.hpp"
#include "service/node_service.hpp"

namespace oncegate::gateway {

/// Answers a request to `/v1/cluster` or below it.
void serve_cluster_admin(node_service& node, const http_request& req,
                         responder& done);

} // namespace oncegate::gateway
