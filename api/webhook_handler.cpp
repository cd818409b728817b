#include "api/webhook_handler.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "api/admin_cluster.hpp"
#include "api/admin_routes.hpp"
#include "api/forwarder.hpp"
#include "api/redelivery.hpp"
#include "api/health_endpoints.hpp"
#include "api/webhook_pipeline.hpp"

namespace oncegate::gateway {

namespace {

bool starts_with(std::string_view str, std::string_view prefix) {
  return str.substr(0, prefix.size()) == prefix;
}

std::vector<std::string> route_names(const route_table& routes) {
  std::vector<std::string> names;
  for (auto& r : routes.routes)
    names.push_back(r.name);
  return names;
}

bool any_upstream(const route_table& routes) {
  for (auto& r : routes.routes)
    if (r.upstream)
      return true;
  return false;
}

} // namespace

webhook_handler::webhook_handler(webhook_options opts, node_service& node,
                                 wall_clock_fn now,
                                 wall_clock_fn signature_now)
  : opts_(std::move(opts)),
    node_(node),
    cache_(opts_.decision_cache, opts_.decision_cache_bytes),
    metrics_(route_names(opts_.routes)),
    keys_(opts_.routes, opts_.payload, node_, cache_, now),
    now_(now) {
  if (any_upstream(opts_.routes))
    forwarder_ = std::make_unique<forwarder>(node_, metrics_, now);
  if (!signature_now)
    signature_now = now;
  auto durable = std::any_of(opts_.routes.routes.begin(),
                             opts_.routes.routes.end(),
                             [](const route_config& r) {
                               return r.upstream && r.delivery.durable;
                             });
  if (forwarder_ && durable) {
    redelivery_ = std::make_unique<redelivery>(node_, *forwarder_, metrics_,
                                               opts_.routes, now);
    redelivery_->start();
  }
  pipeline_ = std::make_unique<webhook_pipeline>(
    opts_.routes, opts_.payload, node_, cache_, metrics_, forwarder_.get(),
    std::move(now), std::move(signature_now), opts_.clock_offset.get());
}

webhook_handler::~webhook_handler() {
  // nop: `forwarder_` goes first (see its declaration)
}

std::size_t webhook_handler::body_limit(std::string_view target) const {
  auto path = target.substr(0, target.find('?'));
  if (auto route = opts_.routes.by_path(path))
    return route->body_limit;
  return static_cast<std::size_t>(-1);
}

void webhook_handler::forget_cached(const std::string& route,
                                    const std::string& key) {
  cache_.forget(routing_key(route, key));
}

void webhook_handler::forget_all_cached() {
  cache_.forget_all();
}

std::size_t webhook_handler::forwards_in_flight() const {
  return (forwarder_ ? forwarder_->in_flight() : 0)
         + (redelivery_ ? redelivery_->running() : 0);
}

void webhook_handler::stop_delivery() {
  if (redelivery_)
    redelivery_->stop();
}

std::size_t webhook_handler::wait_for_forwards(std::chrono::milliseconds bound) {
  auto until = std::chrono::steady_clock::now() + bound;
  std::size_t left = 0;
  if (redelivery_) {
    // The queue's attempts first: one between its start and its forward is
    // not yet the forwarder's.
    redelivery_->stop();
    left += redelivery_->wait(bound);
  }
  if (forwarder_) {
    auto rest = std::chrono::duration_cast<std::chrono::milliseconds>(
      until - std::chrono::steady_clock::now());
    left = forwarder_->wait(std::max(rest, std::chrono::milliseconds(0)))
           + (redelivery_ ? redelivery_->running() : 0);
  }
  return left;
}

void webhook_handler::handle(http_request req, responder done) {
  if (!opts_.proxies.trusted.empty())
    req.client = resolve_client(opts_.proxies, req);
  auto path = req.path();
  if (auto route = opts_.routes.by_path(path))
    return pipeline_->handle(*route, req, std::move(done));
  if (path == "/healthz")
    return serve_healthz(req, done);
  if (path == "/readyz")
    return serve_readyz(node_, opts_.clock_offset.get(), req, done);
  if (path == "/metrics")
    return serve_metrics(node_, metrics_, opts_.clock_offset.get(), req,
                         done);
  bool keys = starts_with(path, "/v1/keys/") || path == "/v1/keys";
  bool cluster = path == "/v1/cluster" || starts_with(path, "/v1/cluster/");
  bool routes = path == "/v1/routes" || starts_with(path, "/v1/routes/");
  if (keys || cluster || routes) {
    if (auto refused = refuse_admin(opts_.admin, opts_.proxies, req))
      return done(std::move(*refused));
    if (cluster)
      return serve_cluster_admin(node_, req, done);
    if (routes)
      return serve_routes_admin(node_, opts_.routes, now_(), req, done);
    return keys_.handle(req, done);
  }
  if (starts_with(path, "/v1/webhook"))
    return done(not_found("no such route"));
  done(not_found());
}

} // namespace oncegate::gateway
