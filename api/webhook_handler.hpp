#pragma once

#include <cstddef>
#include <cstdint>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "common/clock.hpp"
#include "api/decision_cache.hpp"
#include "http/http_types.hpp"
#include "api/metrics.hpp"
#include "service/node_service.hpp"
#include "api/payload.hpp"
#include "api/rejection.hpp"
#include "api/routes.hpp"
#include "http/upstream_client.hpp"

namespace oncegate::gateway {

/// Who may use the admin endpoints (`/v1/keys/...`).
struct admin_options {
  /// Bearer token; empty: none configured.
  std::string token;
  /// Whether the listener is bound to a loopback address. Without a token,
  /// admin endpoints answer only there.
  bool loopback_listener = true;
};

/// Behaviour of the HTTP endpoints.
struct webhook_options {
  route_table routes;
  payload_limits payload;
  admin_options admin;
  /// Completed decisions kept for answering duplicates on HTTP threads
  /// (entries; 0 disables).
  std::size_t decision_cache = 100'000;
  /// Bytes the decision cache holds at most (0: no byte bound).
  std::size_t decision_cache_bytes = decision_cache::default_max_bytes;
};

/// Maps HTTP requests to node operations and answers to HTTP responses:
/// webhooks (`/v1/webhook[/ROUTE]`), admin (`/v1/keys/KEY`), `/healthz`,
/// `/readyz`, `/metrics`. Pure request logic: no sockets, no actors (those
/// sit behind `node_service`), so it is tested directly.
class webhook_handler : public request_handler {
public:
  /// `now` stamps and ages decisions (the node's clock); `signature_now`
  /// (default: `now`) judges signed timestamps, which senders make from
  /// their real clocks: the system clock, corrections included.
  webhook_handler(webhook_options opts, node_service& node,
                  wall_clock_fn now = wall_clock_ms,
                  wall_clock_fn signature_now = nullptr);

  void handle(http_request req, responder done) override;

  std::size_t body_limit(std::string_view target) const override;

  const gateway_metrics& metrics() const {
    return metrics_;
  }

  /// Drops the cached decision of `(route, key)`: a cluster node calls it
  /// when a replicated entry released the record (e.g. an operator's DELETE
  /// through another node). Thread-safe.
  void forget_cached(const std::string& route, const std::string& key);

  /// Forwards started and not yet recorded (their outcome durable).
  std::size_t forwards_in_flight() const;

  /// Waits until every forward started so far has its outcome recorded, or
  /// `bound` passed; returns how many are still running. A clean stop calls
  /// it after the HTTP server stopped: a forward already answered `202`
  /// runs on, and leaving it would turn its key in-doubt at the next start.
  std::size_t wait_for_forwards(std::chrono::milliseconds bound);

private:
  struct key_info;

  void handle_webhook(const route_config& route, http_request& req,
                      responder& done);
  void forward(const route_config& route, std::shared_ptr<key_info> key,
               std::string body, std::string content_type, responder done);
  void handle_admin(http_request& req, responder& done);
  /// Applies an operator's change to a record and answers with `answer`.
  void admin_update(record_update upd, responder done,
                    std::function<http_response(const update_result&)> answer);
  void handle_admin_list(http_request& req, responder& done);
  /// `/v1/cluster`: Raft state; members add/remove; leadership transfer.
  void handle_cluster(http_request& req, responder& done);

  webhook_options opts_;
  node_service& node_;
  wall_clock_fn now_;
  wall_clock_fn signature_now_;
  decision_cache cache_;
  gateway_metrics metrics_;
  /// Forwards in flight (see `wait_for_forwards`).
  mutable std::mutex forwards_mtx_;
  std::condition_variable forwards_cv_;
  std::size_t forwards_ = 0;
  /// Last member: destroyed first, so its thread stops before anything its
  /// callbacks use goes away.
  std::unique_ptr<upstream_client> upstream_;
};

/// Builds an `application/problem+json` response (RFC 9457).
/// `key` (may be empty) is echoed as `idempotency_key`.
http_response make_problem(const rejection& why, const std::string& key = {});

} // namespace oncegate::gateway
