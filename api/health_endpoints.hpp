#pragma once

// The probe endpoints: `GET /healthz` (liveness), `GET /readyz`
// (readiness, from the node service) and `GET /metrics` (Prometheus text of
// the HTTP side's and the node's counters). No webhook or admin logic here.

#include "api/metrics.hpp"
#include "http/http_types.hpp"
#include "service/node_service.hpp"

namespace oncegate::gateway {

/// `/healthz`: 200 while the process serves.
void serve_healthz(const http_request& req, responder& done);

/// `/readyz`: 200 when the node says it is ready, else 503 with its reason.
void serve_readyz(node_service& node, const http_request& req,
                  responder& done);

/// `/metrics`: `metrics` (must outlive the answer) and the node's counters.
void serve_metrics(node_service& node, const gateway_metrics& metrics,
                   const http_request& req, responder& done);

} // namespace oncegate::gateway
