#pragma once

#include <cstdint>
#include <string>

#include "common/clock.hpp"
#include "gateway/claim_service.hpp"
#include "gateway/http_types.hpp"
#include "gateway/payload.hpp"
#include "gateway/rejection.hpp"

namespace oncegate::gateway {

/// Behaviour of the webhook endpoint.
struct webhook_options {
  /// Name of the route served at `/v1/webhook` (its key namespace).
  std::string default_route = "default";
  /// Lifetime of a record from its first request.
  int64_t ttl_ms = 24LL * 3600 * 1000;
  payload_limits payload;
};

/// Maps HTTP requests to claims and decisions to HTTP responses:
/// `POST /v1/webhook`, `GET /healthz`. Pure request logic: no sockets, no
/// actors (those sit behind `claim_service`), so it is tested directly.
class webhook_handler : public request_handler {
public:
  webhook_handler(webhook_options opts, claim_service& claims,
                  wall_clock_fn now = wall_clock_ms);

  void handle(http_request req, responder done) override;

private:
  void handle_webhook(http_request& req, responder& done);

  webhook_options opts_;
  claim_service& claims_;
  wall_clock_fn now_;
};

/// Builds an `application/problem+json` response (RFC 9457).
/// `key` (may be empty) is echoed as `idempotency_key`.
http_response make_problem(const rejection& why, const std::string& key = {});

} // namespace oncegate::gateway
