#pragma once

// The webhook endpoints (`POST /v1/webhook[/ROUTE]`): source allowlist,
// media type, size, signatures and tokens, the payload and its key, the
// decision cache, the claim, and handing a granted key to the forwarder.
// Must not live here: path routing (`api/webhook_handler.*`), the record's
// transitions after the claim (`api/forwarder.*`), admin endpoints.

#include <cstdint>
#include <string>

#include "common/clock.hpp"
#include "common/clock_offset.hpp"
#include "api/decision_cache.hpp"
#include "api/forwarder.hpp"
#include "api/metrics.hpp"
#include "api/payload.hpp"
#include "api/routes.hpp"
#include "http/http_types.hpp"
#include "service/node_service.hpp"

namespace oncegate::gateway {

/// Everything a webhook request meets, in order, up to its answer.
class webhook_pipeline {
public:
  /// `fwd` may be null when no route has an upstream. `now` stamps and ages
  /// decisions; `signature_now` judges signed timestamps, unless
  /// `clock_offset` (null on a single node) says that clock is too far off
  /// the cluster's. Every reference must outlive the pipeline.
  webhook_pipeline(const route_table& routes, const payload_limits& limits,
                   node_service& node, decision_cache& cache,
                   gateway_metrics& metrics, forwarder* fwd,
                   wall_clock_fn now, wall_clock_fn signature_now,
                   const clock_offset_monitor* clock_offset = nullptr);

  /// Answers one request to `route` (a member of the route table).
  void handle(const route_config& route, http_request& req, responder done);

private:
  void run(const route_config& route, http_request& req, responder& done);

  /// Sends a granted key's first request upstream; answers with the
  /// outcome, or 202 when `respond_after` passes first.
  void forward(const route_config& route, forward_job job, uint64_t epoch,
               std::string routing, responder done);

  const route_table& routes_;
  const payload_limits& limits_;
  node_service& node_;
  decision_cache& cache_;
  gateway_metrics& metrics_;
  forwarder* forwarder_;
  wall_clock_fn now_;
  wall_clock_fn signature_now_;
  const clock_offset_monitor* clock_offset_;
};

} // namespace oncegate::gateway
