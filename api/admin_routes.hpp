#pragma once

// The route admin endpoints: `GET /v1/routes` (each route and whether it
// is paused), `POST /v1/routes/NAME/pause` and `POST /v1/routes/NAME/resume`
// (the kill switch, docs/http-api.md "Pausing a route"). Only request
// parsing and answers; the pause itself is the node service's (durable,
// and in a cluster held by every partition before it is acknowledged).
// Admin auth is checked before (`api/admin_auth.hpp`).

#include <cstdint>

#include "api/routes.hpp"
#include "http/http_types.hpp"
#include "service/node_service.hpp"

namespace oncegate::gateway {

/// Answers a request to `/v1/routes` or below it; `now_ms` stamps a pause.
void serve_routes_admin(node_service& node, const route_table& routes,
                        int64_t now_ms, const http_request& req,
                        responder& done);

} // namespace oncegate::gateway
