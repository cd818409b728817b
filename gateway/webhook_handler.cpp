#include "gateway/webhook_handler.hpp"

#include <utility>

#include "common/logging.hpp"
#include "gateway/idempotency_key.hpp"
#include "gateway/json_text.hpp"

namespace oncegate::gateway {

namespace {

constexpr std::string_view problem_base = "https://oncegate.dev/problems/";

bool printable_ascii(std::string_view str) {
  for (auto c : str)
    if (c < 0x20 || c > 0x7E)
      return false;
  return !str.empty();
}

void common_headers(http_response& res, const std::string& key) {
  res.set("Cache-Control", "no-store");
  // Header values must be visible ASCII; body-sourced keys may not be.
  if (printable_ascii(key))
    res.set("Idempotency-Key", key);
}

// Accepts JSON and TradingView's text/plain (a JSON body posted as text);
// a missing Content-Type is read as JSON.
bool acceptable_media_type(std::optional<std::string_view> value) {
  if (!value)
    return true;
  auto type = value->substr(0, value->find(';'));
  while (!type.empty() && type.back() == ' ')
    type.remove_suffix(1);
  std::string lower;
  for (auto c : type)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "application/json" || lower == "text/plain";
}

std::string accepted_body(const idempotency_key& key, int64_t now_ms) {
  std::string out = R"({"status":"accepted","idempotency_key":)";
  append_json_string(out, key.value);
  out += R"(,"key_source":")";
  out += to_string(key.source);
  out += R"(","received_at":")";
  out += format_timestamp(now_ms);
  out += "\"}";
  return out;
}

http_response decision_response(const claim_reply& reply,
                                 const idempotency_key& key) {
  if (!reply.ok) {
    rejection why{503, "unavailable", "Service unavailable",
                  reply.error == errc::overloaded
                    ? "node overloaded; retry later"
                    : "no durable decision could be made; nothing was "
                      "executed; retry later"};
    auto res = make_problem(why, key.value);
    res.set("Retry-After", "1");
    return res;
  }
  auto& rec = reply.result.rec;
  switch (reply.result.outcome) {
    case decision::accepted:
    case decision::renewed: {
      http_response res;
      res.status = rec.status;
      res.set("Content-Type", "application/json");
      common_headers(res, key.value);
      res.body = rec.response;
      return res;
    }
    case decision::duplicate: {
      rejection why{409, "duplicate", "Duplicate request",
                    "this idempotency key was already used; the original "
                    "request was executed"};
      auto res = make_problem(why, key.value);
      // Insert the original's facts before the closing brace.
      res.body.pop_back();
      res.body += R"(,"first_seen":")";
      res.body += format_timestamp(rec.first_seen_ms);
      res.body += R"(","original_status":)";
      res.body += std::to_string(rec.status);
      res.body += R"(,"key_source":")";
      res.body += to_string(key.source);
      res.body += "\"}";
      res.set("Idempotent-Replayed", "true");
      return res;
    }
    case decision::mismatch:
      break;
  }
  rejection why{422, "key-reused", "Idempotency key reused",
                "this idempotency key was used with a different payload; "
                "nothing was executed"};
  return make_problem(why, key.value);
}

} // namespace

http_response make_problem(const rejection& why, const std::string& key) {
  http_response res;
  res.status = why.status;
  res.set("Content-Type", "application/problem+json");
  common_headers(res, key);
  std::string& out = res.body;
  out = R"({"type":")";
  out += problem_base;
  out += why.type;
  out += R"(","title":)";
  append_json_string(out, why.title);
  out += R"(,"status":)";
  out += std::to_string(why.status);
  out += R"(,"detail":)";
  append_json_string(out, why.detail);
  if (!key.empty()) {
    out += R"(,"idempotency_key":)";
    append_json_string(out, key);
  }
  out += '}';
  return res;
}

webhook_handler::webhook_handler(webhook_options opts, claim_service& claims,
                                 wall_clock_fn now)
  : opts_(std::move(opts)), claims_(claims), now_(std::move(now)) {
  // nop
}

void webhook_handler::handle(http_request req, responder done) {
  auto path = req.path();
  if (path == "/healthz") {
    if (req.method != "GET" && req.method != "HEAD") {
      auto res = make_problem({405, "method-not-allowed", "Method not allowed",
                               "use GET"});
      res.set("Allow", "GET, HEAD");
      return done(std::move(res));
    }
    http_response res;
    res.set("Content-Type", "application/json");
    res.set("Cache-Control", "no-store");
    res.body = R"({"status":"ok"})";
    return done(std::move(res));
  }
  if (path == "/v1/webhook") {
    if (req.method != "POST") {
      auto res = make_problem({405, "method-not-allowed", "Method not allowed",
                               "webhooks are POSTed"});
      res.set("Allow", "POST");
      return done(std::move(res));
    }
    return handle_webhook(req, done);
  }
  done(make_problem({404, "not-found", "Not found",
                     "no such endpoint or route"}));
}

void webhook_handler::handle_webhook(http_request& req, responder& done) {
  if (!acceptable_media_type(req.header("content-type")))
    return done(make_problem({415, "unsupported-media-type",
                              "Unsupported media type",
                              "send application/json or text/plain"}));
  auto parsed = parse_payload(req.body, opts_.payload);
  if (auto why = std::get_if<rejection>(&parsed))
    return done(make_problem(*why));
  auto& body = std::get<payload>(parsed);
  auto selected = select_key(req.header("idempotency-key"), body);
  if (auto why = std::get_if<rejection>(&selected))
    return done(make_problem(*why));
  auto key = std::get<idempotency_key>(std::move(selected));
  auto now = now_();
  claim_request claim;
  claim.route = opts_.default_route;
  claim.key = key.value;
  claim.fingerprint = std::move(body.fingerprint);
  claim.now_ms = now;
  claim.ttl_ms = opts_.ttl_ms;
  claim.initial_state = record_state::completed;
  claim.status = 200;
  claim.response = accepted_body(key, now);
  claim.signal = std::move(req.body);
  log::gateway()->debug("[C{}][R{}] claim.submit route={} key_source={}",
                        req.conn_id, req.req_id, claim.route,
                        to_string(key.source));
  claims_.claim(std::move(claim),
                [done = std::move(done), key = std::move(key),
                 conn = req.conn_id, rid = req.req_id](claim_reply reply) {
                  auto res = decision_response(reply, key);
                  log::gateway()->debug("[C{}][R{}] claim.{} status={}", conn,
                                        rid,
                                        reply.ok ? to_string(
                                          reply.result.outcome)
                                                 : "failed",
                                        res.status);
                  done(std::move(res));
                });
}

} // namespace oncegate::gateway
