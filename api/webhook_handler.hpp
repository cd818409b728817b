#pragma once

// The HTTP side's entry point: options, and the dispatcher that routes each
// request by path to its endpoint family. Must not grow endpoint logic:
// webhooks are `api/webhook_pipeline.*` (forwards `api/forwarder.*`), admin
// `api/admin_keys.*` and `api/admin_cluster.*` behind `api/admin_auth.*`,
// probes `api/health_endpoints.*`, shared answers `api/responses.*`.

#include <cstddef>
#include <cstdint>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.hpp"
#include "common/clock_offset.hpp"
#include "api/admin_auth.hpp"
#include "api/admin_keys.hpp"
#include "api/client_address.hpp"
#include "api/decision_cache.hpp"
#include "http/http_types.hpp"
#include "api/metrics.hpp"
#include "service/node_service.hpp"
#include "api/payload.hpp"
#include "api/rejection.hpp"
#include "api/responses.hpp"
#include "api/routes.hpp"
#include "http/upstream_client.hpp"

namespace oncegate::gateway {

class forwarder;
class redelivery;
class webhook_pipeline;

/// Behaviour of the HTTP endpoints.
struct webhook_options {
  route_table routes;
  payload_limits payload;
  admin_options admin;
  /// Reverse proxies in front of the node (`http.trusted-proxies`): whose
  /// forwarding headers name the client for allowlists and logs.
  proxy_options proxies;
  /// Completed decisions kept for answering duplicates on HTTP threads
  /// (entries; 0 disables).
  std::size_t decision_cache = 100'000;
  /// Bytes the decision cache holds at most (0: no byte bound).
  std::size_t decision_cache_bytes = decision_cache::default_max_bytes;
  /// A cluster node's clock measured against the cluster's (null on a
  /// single node): beyond its limit `/readyz` is 503 `clock-offset`, and a
  /// signed delivery refused only for its timestamp's age is 503, not 401.
  std::shared_ptr<const clock_offset_monitor> clock_offset;
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

  ~webhook_handler() override;

  void handle(http_request req, responder done) override;

  std::size_t body_limit(std::string_view target) const override;

  const gateway_metrics& metrics() const {
    return metrics_;
  }

  /// Drops the cached decision of `(route, key)`: a cluster node calls it
  /// when a replicated entry released the record (e.g. an operator's DELETE
  /// through another node). Thread-safe.
  void forget_cached(const std::string& route, const std::string& key);

  /// Drops every cached decision: a snapshot replaced the database (its
  /// releases were never applied as entries here). Thread-safe.
  void forget_all_cached();

  /// Forwards started and not yet recorded (their outcome durable),
  /// the delivery queue's attempts included.
  std::size_t forwards_in_flight() const;

  /// Starts no further attempt of the delivery queue (a clean stop, after
  /// the HTTP server stopped; queued signals wait in their records for the
  /// next start or leader).
  void stop_delivery();

  /// Waits until every forward started so far has its outcome recorded, or
  /// `bound` passed; returns how many are still running. A clean stop calls
  /// it after the HTTP server stopped: a forward already answered `202`
  /// runs on, and leaving it would turn its key in-doubt at the next start.
  std::size_t wait_for_forwards(std::chrono::milliseconds bound);

private:
  webhook_options opts_;
  node_service& node_;
  decision_cache cache_;
  gateway_metrics metrics_;
  admin_keys keys_;
  /// The node's clock (stamps pauses).
  wall_clock_fn now_;
  std::unique_ptr<webhook_pipeline> pipeline_;
  /// Null unless a route delivers durably. Destroyed after `forwarder_`,
  /// whose thread runs its callbacks.
  std::unique_ptr<redelivery> redelivery_;
  /// Null when no route has an upstream. Last member: destroyed first, so
  /// its thread stops before anything its callbacks use goes away.
  std::unique_ptr<forwarder> forwarder_;
};

} // namespace oncegate::gateway
