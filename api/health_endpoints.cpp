#include "api/health_endpoints.hpp"

#include <optional>
#include <string>
#include <utility>

#include "api/json_text.hpp"
#include "api/responses.hpp"

namespace oncegate::gateway {

namespace {

bool get_or_head(const http_request& req) {
  return req.method == "GET" || req.method == "HEAD";
}

} // namespace

void serve_healthz(const http_request& req, responder& done) {
  if (!get_or_head(req))
    return done(method_not_allowed("GET, HEAD"));
  done(json_response(200, R"({"status":"ok"})"));
}

void serve_readyz(node_service& node, const clock_offset_monitor* clock_offset,
                  const http_request& req, responder& done) {
  if (!get_or_head(req))
    return done(method_not_allowed("GET, HEAD"));
  node.ready([clock_offset, done = std::move(done)](bool ok, std::string why) {
    // The node's own reason first: a follower still catching up applies
    // old entries late, which can read as an offset until it is live.
    if (ok && clock_offset != nullptr)
      if (auto off = clock_offset->read(); off.exceeded) {
        // The reason is a fixed token for probes; the numbers for people.
        std::string body
          = R"({"status":"unavailable","reason":"clock-offset","offset_ms":)"
            + std::to_string(off.offset_ms) + R"(,"max_offset_ms":)"
            + std::to_string(clock_offset->options().max_offset_ms) + "}";
        auto res = json_response(503, std::move(body));
        res.set("Retry-After", "1");
        return done(std::move(res));
      }
    if (ok)
      return done(json_response(200, R"({"status":"ready"})"));
    std::string body = R"({"status":"unavailable","reason":)";
    append_json_string(body, why);
    body += '}';
    auto res = json_response(503, std::move(body));
    res.set("Retry-After", "1");
    done(std::move(res));
  });
}

void serve_metrics(node_service& node, const gateway_metrics& metrics,
                   const clock_offset_monitor* clock_offset,
                   const http_request& req, responder& done) {
  if (!get_or_head(req))
    return done(method_not_allowed("GET, HEAD"));
  std::optional<clock_offset_reading> off;
  if (clock_offset != nullptr)
    off = clock_offset->read();
  node.metrics([&metrics, off, done = std::move(done)](node_metrics m) {
    http_response res;
    res.set("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    res.set("Cache-Control", "no-store");
    res.body = metrics.render(m);
    if (off)
      render_clock_offset(res.body, *off);
    done(std::move(res));
  });
}

} // namespace oncegate::gateway
