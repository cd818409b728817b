#pragma once

// The probe endpoints: `GET /healthz` (liveness), `GET /readyz`
// (readiness, from the node service) and `GET /metrics` (Prometheus text of
// the HTTP side's and the node's counters). No webhook or admin logic here.

#include "common/clock_offset.hpp"
#include "api/metrics.hpp"
#include "http/http_types.hpp"
#include "service/node_service.hpp"

namespace oncegate::gateway {

/// `/healthz`: 200 while the process serves.
void serve_healthz(const http_request& req, responder& done);

/// `/readyz`: 200 when the node says it is ready, else 503 with its reason;
/// a ready node whose clock `clock_offset` (null on a single node) finds
/// beyond its limit: 503 `clock-offset`.
void serve_readyz(node_service& node, const clock_offset_monitor* clock_offset,
                  const http_request& req, responder& done);

/// `/metrics`: `metrics` (must outlive the answer), the clock offset when
/// measured (`clock_offset` may be null) and the node's counters.
void serve_metrics(node_service& node, const gateway_metrics& metrics,
                   const clock_offset_monitor* clock_offset,
                   const http_request& req, responder& done);

} // namespace oncegate::gateway
