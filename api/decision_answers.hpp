#pragma once

// How a key's decision and a forward's outcome read as HTTP: the accepted
// and in-progress bodies, duplicates (409 or replay), key reuse (422), and
// the sender's answer to an upstream outcome. Pure functions: no node, no
// cache, no upstream here (those are the pipeline's and the forwarder's).

#include <cstdint>
#include <string>

#include "common/record.hpp"
#include "api/idempotency_key.hpp"
#include "api/routes.hpp"
#include "http/http_types.hpp"
#include "http/upstream_client.hpp"

namespace oncegate::gateway {

/// `{"status":"<status>","idempotency_key":...,"key_source":...,
/// "received_at":...}`: the body of 200 accepted and 202 in progress.
std::string status_body(const char* status, const idempotency_key& key,
                        int64_t now_ms);

/// The first request's answer from its committed record (no upstream).
http_response granted_response(const record& rec, const idempotency_key& key);

/// 422 `key-reused`: the key is known with another fingerprint.
http_response key_reused(const idempotency_key& key);

/// A duplicate's answer: 409 while in flight or in doubt; for a completed
/// record 409 with `first_seen`, or the stored answer when `route` replays.
http_response duplicate_response(const route_config& route, const record& rec,
                                 const idempotency_key& key);

/// 202 `in_progress`: the upstream has not answered by `respond_after`.
http_response in_progress_response(const idempotency_key& key,
                                   int64_t first_seen_ms);

/// The sender's answer to an upstream outcome: the upstream's own answer,
/// 503 when nothing was sent, 502/504 `in-doubt` when it may have been.
http_response upstream_outcome_response(upstream_result res,
                                        const idempotency_key& key);

/// 502 `in-doubt`: the upstream answered `status`, but its outcome is not
/// a committed record (the store failed, leadership was lost, the node is
/// stopping). A resend hears `in-doubt` too until the outcome lands or an
/// operator settles it, so the sender is told no more than is durable.
http_response unrecorded_outcome_response(int status,
                                          const idempotency_key& key);

/// 504 `in-doubt`: `http.response-timeout` passed after the forward
/// began; the upstream may have executed the request.
http_response forward_timed_out_response(const idempotency_key& key);

} // namespace oncegate::gateway
