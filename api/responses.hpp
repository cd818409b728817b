#pragma once

// The response shapes every endpoint family shares: problems (RFC 9457),
// JSON bodies, 404/405/503. No endpoint logic and no knowledge of records
// or decisions here (those answers are in `api/decision_answers.hpp`).

#include <string>

#include "common/errc.hpp"
#include "api/rejection.hpp"
#include "http/http_types.hpp"

namespace oncegate::gateway {

/// Builds an `application/problem+json` response (RFC 9457).
/// `key` (may be empty) is echoed as `idempotency_key`; `extensions` are
/// more members, as JSON text starting with a comma (`,"age_ms":61000`).
http_response make_problem(const rejection& why, const std::string& key = {},
                           std::string_view extensions = {});

/// Sets `Cache-Control: no-store` and echoes `key` as `Idempotency-Key`
/// when it is a valid header value (a body-sourced key may not be).
void set_common_headers(http_response& res, const std::string& key);

/// A `200`-style JSON answer: `Content-Type: application/json`, no-store.
http_response json_response(int status, std::string body);

/// 405 with `Allow: allow`.
http_response method_not_allowed(const char* allow);

/// 404 problem.
http_response not_found(std::string detail = "no such endpoint or route");

/// 503 with `Retry-After`: the node could not decide; this request was not
/// executed (a key executed before stays executed: a retry finds it).
http_response unavailable_response(errc error, const std::string& key);

/// 503 `paused` with `Retry-After`: route `route` is paused (`oncegate
/// routes pause`); this request was not executed, and its resend after
/// the route is resumed will be.
http_response route_paused(const std::string& route, const std::string& key);

} // namespace oncegate::gateway
