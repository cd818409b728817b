#include "api/webhook_handler.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "common/logging.hpp"
#include "common/mutant.hpp"
#include "common/sha256.hpp"
#include "api/auth.hpp"
#include "api/idempotency_key.hpp"
#include "api/json_text.hpp"
#include "api/url.hpp"

namespace oncegate::gateway {

namespace {

constexpr std::string_view problem_base = "https://oncegate.dev/problems/";
constexpr std::string_view keys_prefix = "/v1/keys/";

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

http_response json_response(int status, std::string body) {
  http_response res;
  res.status = status;
  res.set("Content-Type", "application/json");
  res.set("Cache-Control", "no-store");
  res.body = std::move(body);
  return res;
}

http_response method_not_allowed(const char* allow) {
  auto res = make_problem({405, "method-not-allowed", "Method not allowed",
                           std::string{"allowed: "} + allow});
  res.set("Allow", allow);
  return res;
}

http_response not_found(std::string detail = "no such endpoint or route") {
  return make_problem({404, "not-found", "Not found", std::move(detail)});
}

// Accepts JSON and TradingView's text/plain (a JSON body posted as text);
// a missing Content-Type is read as JSON.
bool acceptable_media_type(std::optional<std::string_view> value) {
  if (!value)
    return true;
  auto type = value->substr(0, value->find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t'))
    type.remove_suffix(1);
  std::string lower;
  for (auto c : type)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "application/json" || lower == "text/plain";
}

// `{"status":"<status>","idempotency_key":...,"key_source":...,
// "received_at":...}`: the body of 200 accepted and 202 in progress.
std::string status_body(const char* status, const idempotency_key& key,
                        int64_t now_ms) {
  std::string out = R"({"status":")";
  out += status;
  out += R"(","idempotency_key":)";
  append_json_string(out, key.value);
  out += R"(,"key_source":")";
  out += to_string(key.source);
  out += R"(","received_at":")";
  out += format_timestamp(now_ms);
  out += "\"}";
  return out;
}

rejection unavailable(errc error) {
  return {503, "unavailable", "Service unavailable",
          error == errc::overloaded
            ? "node overloaded; this request was not executed; retry later"
            : "no durable decision could be made; this request was not "
              "executed; retry later"};
}

// 503 with Retry-After: the node could not decide; this request was not
// executed (a key executed before stays executed: a retry finds it).
http_response unavailable_response(errc error, const std::string& key) {
  auto res = make_problem(unavailable(error), key);
  res.set("Retry-After", "1");
  return res;
}

// Adds members to a problem body (which ends with `}`).
void extend_problem(http_response& res, const std::string& members) {
  res.body.pop_back();
  res.body += members;
  res.body += '}';
}

// Stored headers are `Name: value` lines; only Content-Type is kept.
std::string stored_content_type(const std::string& headers) {
  constexpr std::string_view prefix = "Content-Type: ";
  std::string_view text{headers};
  while (!text.empty()) {
    auto line = text.substr(0, text.find('\n'));
    if (line.substr(0, prefix.size()) == prefix)
      return std::string{line.substr(prefix.size())};
    text.remove_prefix(std::min(text.size(), line.size() + 1));
  }
  return "application/json";
}

http_response key_reused(const idempotency_key& key) {
  return make_problem({422, "key-reused", "Idempotency key reused",
                       "this idempotency key was used with a different "
                       "payload; nothing was executed"},
                      key.value);
}

http_response duplicate_response(const route_config& route,
                                 const record& rec,
                                 const idempotency_key& key) {
  switch (rec.state) {
    case record_state::in_flight: {
      auto res = make_problem({409, "in-flight", "Request in flight",
                               "the original request with this key is "
                               "still being executed; retry later"},
                              key.value);
      res.set("Retry-After", "1");
      res.set("Idempotent-Replayed", "true");
      return res;
    }
    case record_state::in_doubt: {
      auto res = make_problem({409, "in-doubt", "Outcome in doubt",
                               "the original request may have been executed; "
                               "an operator must settle this key"},
                              key.value);
      res.set("Idempotent-Replayed", "true");
      return res;
    }
    case record_state::completed:
      break;
  }
  if (route.on_duplicate == duplicate_policy::replay) {
    http_response res;
    res.status = rec.status;
    res.set("Content-Type", stored_content_type(rec.headers));
    common_headers(res, key.value);
    res.set("Idempotent-Replayed", "true");
    res.body = rec.response;
    return res;
  }
  auto res = make_problem({409, "duplicate", "Duplicate request",
                           "this idempotency key was already used; the "
                           "original request was executed"},
                          key.value);
  std::string extra = R"(,"first_seen":")";
  extra += format_timestamp(rec.first_seen_ms);
  extra += R"(","original_status":)";
  extra += std::to_string(rec.status);
  extra += R"(,"key_source":")";
  extra += to_string(key.source);
  extra += "\"";
  extend_problem(res, extra);
  res.set("Idempotent-Replayed", "true");
  return res;
}

std::string record_json(const record& rec) {
  std::string out = R"({"route":)";
  append_json_string(out, rec.route);
  out += R"(,"key":)";
  append_json_string(out, rec.key);
  out += R"(,"state":")";
  out += to_string(rec.state);
  out += R"(","first_seen":")";
  out += format_timestamp(rec.first_seen_ms);
  out += R"(","expires_at":")";
  out += format_timestamp(rec.expires_at_ms);
  out += R"(","fingerprint":")";
  out += to_hex(rec.fingerprint);
  out += "\"";
  if (rec.state == record_state::completed) {
    out += R"(,"status":)";
    out += std::to_string(rec.status);
    out += R"(,"response":)";
    append_json_string(out, rec.response);
  }
  out += '}';
  return out;
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

webhook_handler::webhook_handler(webhook_options opts, node_service& node,
                                 wall_clock_fn now,
                                 wall_clock_fn signature_now)
  : opts_(std::move(opts)),
    node_(node),
    now_(std::move(now)),
    signature_now_(signature_now ? std::move(signature_now) : now_),
    cache_(opts_.decision_cache, opts_.decision_cache_bytes),
    metrics_([&] {
      std::vector<std::string> names;
      for (auto& r : opts_.routes.routes)
        names.push_back(r.name);
      return names;
    }()) {
  for (auto& r : opts_.routes.routes)
    if (r.upstream && !upstream_)
      upstream_ = std::make_unique<upstream_client>();
}

struct webhook_handler::key_info {
  idempotency_key key;
  int64_t first_seen_ms = 0;
  uint64_t conn = 0;
  uint64_t req = 0;
  /// Decision cache epoch read before the claim was submitted.
  uint64_t epoch = 0;
  std::string routing;
};

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

void webhook_handler::handle(http_request req, responder done) {
  auto path = req.path();
  bool get = req.method == "GET" || req.method == "HEAD";
  if (auto route = opts_.routes.by_path(path)) {
    // Time every webhook from its complete arrival to its response.
    auto start = std::chrono::steady_clock::now();
    responder timed = [this, start, done = std::move(done)](http_response res) {
      metrics_.observe_request(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count());
      done(std::move(res));
    };
    return handle_webhook(*route, req, timed);
  }
  if (path == "/healthz") {
    if (!get)
      return done(method_not_allowed("GET, HEAD"));
    return done(json_response(200, R"({"status":"ok"})"));
  }
  if (path == "/readyz") {
    if (!get)
      return done(method_not_allowed("GET, HEAD"));
    return node_.ready([done = std::move(done)](bool ok, std::string why) {
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
  if (path == "/metrics") {
    if (!get)
      return done(method_not_allowed("GET, HEAD"));
    return node_.metrics([this, done = std::move(done)](node_metrics m) {
      http_response res;
      res.set("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
      res.set("Cache-Control", "no-store");
      res.body = metrics_.render(m);
      done(std::move(res));
    });
  }
  if (path.substr(0, keys_prefix.size()) == keys_prefix || path == "/v1/keys"
      || path == "/v1/cluster" || path.substr(0, 12) == "/v1/cluster/")
    return handle_admin(req, done);
  if (path.substr(0, 11) == "/v1/webhook")
    return done(not_found("no such route"));
  done(not_found());
}

void webhook_handler::handle_webhook(const route_config& route,
                                     http_request& req, responder& done) {
  auto idx = opts_.routes.index_of(route);
  auto reject = [&](const rejection& why, outcome x,
                    const std::string& key = {}) {
    metrics_.count(idx, x);
    log::gateway()->debug("[C{}][R{}] webhook.rejected route={} status={} "
                          "type={}",
                          req.conn_id, req.req_id, route.name, why.status,
                          why.type);
    auto res = make_problem(why, key);
    if (why.status == 413)
      res.close = true;
    done(std::move(res));
  };
  if (!route.allow.empty() && !address_allowed(req.remote, route.allow))
    return reject({403, "forbidden", "Forbidden",
                   "source address not allowed on this route"},
                  outcome::forbidden);
  if (req.method != "POST") {
    metrics_.count(idx, outcome::bad_request);
    return done(method_not_allowed("POST"));
  }
  if (!acceptable_media_type(req.header("content-type")))
    return reject({415, "unsupported-media-type", "Unsupported media type",
                   "send application/json or text/plain"},
                  outcome::bad_request);
  if (req.body.size() > route.body_limit)
    return reject({413, "body-too-large", "Body too large",
                   "request body exceeds the route's limit"},
                  outcome::bad_request);
  auto now = now_();
  // Signatures are checked on the raw body, before parsing it.
  std::optional<std::string_view> delivery_id;
  switch (route.auth) {
    case auth_mode::github: {
      auto sig = req.header("x-hub-signature-256");
      if (!sig || !verify_github(*sig, req.body, route.secrets))
        return reject({401, "unauthorized", "Unauthorized",
                       sig ? "no valid signature"
                           : "missing X-Hub-Signature-256"},
                      outcome::rejected_auth);
      delivery_id = req.header("x-github-delivery");
      break;
    }
    case auth_mode::standard_webhooks: {
      standard_webhook_headers hdrs{req.header("webhook-id"),
                                    req.header("webhook-timestamp"),
                                    req.header("webhook-signature")};
      if (auto why = verify_standard_webhook(hdrs, req.body, route.secrets,
                                             signature_now_() / 1000,
                                             route.tolerance_s))
        return reject(*why, outcome::rejected_auth);
      delivery_id = hdrs.id;
      break;
    }
    case auth_mode::none:
    case auth_mode::token:
      break;
  }
  auto parsed = parse_payload(req.body, opts_.payload);
  if (auto why = std::get_if<rejection>(&parsed))
    return reject(*why, outcome::bad_request);
  auto& body = std::get<payload>(parsed);
  if (route.auth == auth_mode::token) {
    std::optional<std::string> token = query_param(req.target, "token");
    if (!token) {
      auto i = body.fields.find("passphrase");
      if (i != body.fields.end() && i->second.type == field::kind::string)
        token = i->second.text;
    }
    bool ok = false;
    for (auto& secret : route.secrets)
      ok = (token && constant_time_equal(*token, secret)) || ok;
    if (!ok)
      return reject({401, "unauthorized", "Unauthorized",
                     token ? "invalid token" : "missing token"},
                    outcome::rejected_auth);
  }
  // Repeated Idempotency-Key lines combine into a list, which is not a
  // valid key: refusing is safer than picking one.
  auto key_header = req.combined_header("idempotency-key");
  key_inputs inputs;
  inputs.auth = route.auth;
  inputs.header = key_header;
  inputs.delivery_id = delivery_id;
  inputs.raw_body = req.body;
  auto selected = select_key(inputs, body);
  if (auto why = std::get_if<rejection>(&selected))
    return reject(*why, outcome::bad_request);
  auto key = std::get<idempotency_key>(std::move(selected));
  // Duplicates of completed keys are answered here, on the HTTP thread,
  // from committed decisions; everything else asks the key's actor.
  auto routing = routing_key(route.name, key.value);
  if (auto hit = cache_.lookup(routing, body.fingerprint, now,
                               route.on_duplicate == duplicate_policy::replay)) {
    if (hit->outcome == decision::mismatch) {
      metrics_.count(idx, outcome::mismatch);
      return done(key_reused(key));
    }
    metrics_.count(idx, outcome::duplicate);
    record rec;
    rec.state = record_state::completed;
    rec.first_seen_ms = hit->first_seen_ms;
    rec.status = hit->status;
    rec.headers = std::move(hit->headers);
    rec.response = std::move(hit->response);
    return done(duplicate_response(route, rec, key));
  }
  auto epoch = cache_.epoch(routing);
  claim_request claim;
  claim.route = route.name;
  claim.key = key.value;
  claim.fingerprint = std::move(body.fingerprint);
  claim.now_ms = now;
  claim.ttl_ms = route.ttl_ms;
  // With an upstream the record is in flight until its outcome is stored;
  // without one, recording the signal is the execution.
  bool forwarding = route.upstream.has_value();
  std::string forward_body;
  std::string content_type;
  if (forwarding) {
    claim.initial_state = record_state::in_flight;
    forward_body = req.body;
    content_type = std::string{req.header("content-type").value_or("")};
  } else {
    claim.initial_state = record_state::completed;
    claim.status = 200;
    claim.response = status_body("accepted", key, now);
  }
  claim.signal = std::move(req.body);
  log::gateway()->debug("[C{}][R{}] claim.submit route={} key_source={}",
                        req.conn_id, req.req_id, route.name,
                        to_string(key.source));
  if (ONCEGATE_MUTANT("log-request-body")) // mutant: a secret in the log
    log::gateway()->info("[C{}][R{}] claim.body {}", req.conn_id, req.req_id,
                         claim.signal);
  node_.claim(
    std::move(claim),
    [this, idx, &route, done = std::move(done), key = std::move(key),
     conn = req.conn_id, rid = req.req_id, forwarding, epoch,
     routing = std::move(routing),
     forward_body = std::move(forward_body),
     content_type = std::move(content_type)](reply<claim_result> rep) mutable {
      http_response res;
      if (!rep.ok) {
        metrics_.count(idx, outcome::unavailable);
        res = unavailable_response(rep.error, key.value);
        log::gateway()->warn("[C{}][R{}] claim.failed route={} error={}",
                             conn, rid, route.name, rep.detail);
        return done(std::move(res));
      }
      auto& rec = rep.value.rec;
      cache_.remember(routing, rec, epoch,
                      route.on_duplicate == duplicate_policy::replay);
      switch (rep.value.outcome) {
        case decision::accepted:
        case decision::renewed:
          metrics_.count(idx, outcome::granted);
          if (forwarding) {
            auto info = std::make_shared<key_info>(key_info{
              std::move(key), rec.first_seen_ms, conn, rid, epoch,
              std::move(routing)});
            return forward(route, std::move(info), std::move(forward_body),
                           std::move(content_type), std::move(done));
          }
          res.status = rec.status;
          res.set("Content-Type", "application/json");
          common_headers(res, key.value);
          res.body = rec.response;
          break;
        case decision::duplicate:
          metrics_.count(idx, outcome::duplicate);
          res = duplicate_response(route, rec, key);
          break;
        case decision::mismatch:
          metrics_.count(idx, outcome::mismatch);
          res = key_reused(key);
          break;
      }
      log::gateway()->debug("[C{}][R{}] claim.{} route={} status={}", conn,
                            rid, to_string(rep.value.outcome), route.name,
                            res.status);
      done(std::move(res));
    });
}

void webhook_handler::forward(const route_config& route,
                              std::shared_ptr<key_info> info,
                              std::string body, std::string content_type,
                              responder done) {
  // Exactly one answer goes out: the upstream's outcome, or 202 when
  // `respond_after` passes first.
  struct flight {
    std::atomic<bool> answered{false};
    responder done;
    void answer(http_response res) {
      if (!answered.exchange(true))
        done(std::move(res));
    }
  };
  auto fl = std::make_shared<flight>();
  fl->done = std::move(done);
  {
    std::lock_guard<std::mutex> guard{forwards_mtx_};
    ++forwards_;
  }
  // Counted down once the outcome is recorded (or failed to be).
  auto recorded = [this] {
    std::lock_guard<std::mutex> guard{forwards_mtx_};
    if (--forwards_ == 0)
      forwards_cv_.notify_all();
  };
  auto idx = opts_.routes.index_of(route);
  if (route.respond_after.count() > 0)
    upstream_->after(route.respond_after, [fl, info] {
      auto res = json_response(202, status_body("in_progress", info->key,
                                                     info->first_seen_ms));
      common_headers(res, info->key.value);
      fl->answer(std::move(res));
    });
  upstream_request up;
  up.body = std::move(body);
  up.content_type = std::move(content_type);
  // Injective and a valid header value (see forwarded_key).
  up.idempotency_key = forwarded_key(info->key.value);
  upstream_->send(*route.upstream, std::move(up), [this, idx, &route, fl,
                                                   info, recorded](
                                                    upstream_result res) {
    record_update upd;
    upd.route = route.name;
    upd.key = info->key.value;
    upd.first_seen_ms = info->first_seen_ms;
    metrics_.count_upstream(idx, static_cast<size_t>(res.outcome));
    switch (res.outcome) {
      case upstream_result::kind::response:
        upd.op = transition::complete;
        upd.status = static_cast<uint16_t>(res.status);
        if (!res.content_type.empty())
          upd.headers = "Content-Type: " + res.content_type;
        upd.response = res.body;
        break;
      case upstream_result::kind::not_sent:
        upd.op = transition::release;
        break;
      case upstream_result::kind::maybe_sent:
        upd.op = transition::in_doubt;
        break;
    }
    log::gateway()->info("[C{}][R{}] upstream.{} route={} status={} error={}",
                         info->conn, info->req,
                         res.outcome == upstream_result::kind::response
                           ? "response"
                           : res.outcome == upstream_result::kind::not_sent
                               ? "not_sent"
                               : "maybe_sent",
                         route.name, res.status, res.error);
    // The transition is made durable before the sender hears of it.
    node_.update(std::move(upd), [this, &route, fl, info, recorded,
                                  res = std::move(res)](
                                   reply<update_result> rep) mutable {
      if (rep.ok && rep.value.current.found)
        cache_.remember(info->routing, rep.value.current.rec, info->epoch,
                        route.on_duplicate == duplicate_policy::replay);
      if (!rep.ok)
        log::gateway()->error("[C{}][R{}] upstream.unrecorded error={}",
                              info->conn, info->req, rep.detail);
      http_response out;
      switch (res.outcome) {
        case upstream_result::kind::response:
          // Even when the outcome could not be stored, the upstream's
          // answer is the truth: the record stays unsettled (in doubt
          // after a restart) and is never executed again.
          out.status = res.status;
          out.set("Content-Type", res.content_type.empty()
                                    ? std::string{"application/json"}
                                    : res.content_type);
          common_headers(out, info->key.value);
          out.body = std::move(res.body);
          break;
        case upstream_result::kind::not_sent:
          out = make_problem({503, "upstream-unavailable",
                              "Upstream unavailable",
                              "the upstream could not be reached; nothing was "
                              "executed; retry later"},
                             info->key.value);
          out.set("Retry-After", "1");
          break;
        case upstream_result::kind::maybe_sent:
          out = make_problem({res.timed_out ? 504 : 502, "in-doubt",
                              "Outcome in doubt",
                              "the upstream may have executed this request "
                              "but did not answer; it will not be executed "
                              "again automatically"},
                             info->key.value);
          break;
      }
      fl->answer(std::move(out));
      recorded();
    });
  });
}

std::size_t webhook_handler::forwards_in_flight() const {
  std::lock_guard<std::mutex> guard{forwards_mtx_};
  return forwards_;
}

std::size_t webhook_handler::wait_for_forwards(std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> guard{forwards_mtx_};
  forwards_cv_.wait_for(guard, bound, [this] { return forwards_ == 0; });
  return forwards_;
}

void webhook_handler::handle_admin_list(http_request& req, responder& done) {
  if (req.method != "GET" && req.method != "HEAD")
    return done(method_not_allowed("GET, HEAD"));
  auto state_name = query_param(req.target, "state").value_or("in_doubt");
  record_state state;
  if (state_name == "in_doubt")
    state = record_state::in_doubt;
  else if (state_name == "in_flight")
    state = record_state::in_flight;
  else
    return done(make_problem({400, "bad-request", "Bad request",
                              "state must be in_doubt or in_flight"}));
  auto route = opts_.routes.by_name(
    query_param(req.target, "route").value_or("default"));
  if (!route)
    return done(not_found("no such route"));
  uint32_t limit = 100;
  if (auto text = query_param(req.target, "limit")) {
    char* end = nullptr;
    auto n = std::strtoul(text->c_str(), &end, 10);
    if (text->empty() || *end != '\0' || n < 1 || n > 1000)
      return done(make_problem({400, "bad-request", "Bad request",
                                "limit must be 1..1000"}));
    limit = static_cast<uint32_t>(n);
  }
  auto after = query_param(req.target, "after").value_or("");
  node_.list(route->name, state, std::move(after), limit,
             [done = std::move(done)](reply<record_page> rep) {
               if (!rep.ok) {
                 return done(unavailable_response(rep.error, {}));
               }
               std::string body = R"({"records":[)";
               bool first = true;
               for (auto& rec : rep.value.records) {
                 if (!first)
                   body += ',';
                 first = false;
                 body += record_json(rec);
               }
               body += R"(],"next_after":)";
               if (rep.value.next_after.empty())
                 body += "null";
               else
                 append_json_string(body, rep.value.next_after);
               body += '}';
               done(json_response(200, std::move(body)));
             });
}

void webhook_handler::admin_update(
  record_update upd, responder done,
  std::function<http_response(const update_result&)> answer) {
  auto routing = routing_key(upd.route, upd.key);
  auto key = upd.key;
  node_.update(std::move(upd),
               [this, done = std::move(done), answer = std::move(answer),
                routing = std::move(routing),
                key = std::move(key)](reply<update_result> rep) {
                 // Before an operator's change is acknowledged, no HTTP thread
                 // may answer from the key's old decision any more.
                 cache_.forget(routing);
                 if (!rep.ok)
                   return done(unavailable_response(rep.error, key));
                 done(answer(rep.value));
               });
}

namespace {

std::string cluster_json(const cluster_info& c) {
  std::string out = R"({"mode":"cluster","id":)";
  out += std::to_string(c.id);
  out += R"(,"role":")";
  out += c.role;
  out += R"(","term":)";
  out += std::to_string(c.term);
  out += R"(,"leader_id":)";
  out += std::to_string(c.leader_id);
  out += R"(,"leader_address":)";
  append_json_string(out, c.leader_address);
  out += R"(,"leader_ready":)";
  out += c.leader_ready ? "true" : "false";
  out += R"(,"commit_index":)";
  out += std::to_string(c.commit_index);
  out += R"(,"applied_index":)";
  out += std::to_string(c.applied_index);
  out += R"(,"last_index":)";
  out += std::to_string(c.last_index);
  out += R"(,"leader_changes":)";
  out += std::to_string(c.leader_changes);
  out += R"(,"members":[)";
  for (size_t i = 0; i < c.members.size(); ++i) {
    if (i > 0)
      out += ',';
    out += R"({"id":)";
    out += std::to_string(c.members[i].id);
    out += R"(,"address":)";
    append_json_string(out, c.members[i].address);
    out += R"(,"role":")";
    out += c.members[i].role;
    out += "\"}";
  }
  out += "]}";
  return out;
}

// Parses a node id (a positive decimal number).
std::optional<uint64_t> parse_node_id(std::string_view text) {
  if (text.empty() || text.size() > 18)
    return std::nullopt;
  uint64_t value = 0;
  for (auto c : text) {
    if (c < '0' || c > '9')
      return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value == 0)
    return std::nullopt;
  return value;
}

} // namespace

void webhook_handler::handle_cluster(http_request& req, responder& done) {
  auto path = req.path();
  auto info = node_.cluster();
  if (path == "/v1/cluster") {
    if (req.method != "GET" && req.method != "HEAD")
      return done(method_not_allowed("GET, HEAD"));
    if (!info.enabled)
      return done(json_response(200, R"({"mode":"single"})"));
    return done(json_response(200, cluster_json(info)));
  }
  cluster_op op;
  std::optional<uint64_t> id;
  constexpr std::string_view members = "/v1/cluster/members/";
  if (path == "/v1/cluster/transfer") {
    if (req.method != "POST")
      return done(method_not_allowed("POST"));
    op = cluster_op::transfer;
    id = 0;
    if (auto to = query_param(req.target, "to")) {
      id = *to == "0" ? std::optional<uint64_t>{0} : parse_node_id(*to);
      if (!id)
        return done(make_problem({400, "bad-request", "Bad request",
                                  "to must be a node id"}));
    }
  } else if (path.substr(0, members.size()) == members) {
    id = parse_node_id(path.substr(members.size()));
    if (!id)
      return done(make_problem({400, "bad-request", "Bad request",
                                "the path must end in a node id"}));
    if (req.method == "POST")
      op = cluster_op::add;
    else if (req.method == "DELETE")
      op = cluster_op::remove;
    else
      return done(method_not_allowed("POST, DELETE"));
  } else {
    return done(not_found());
  }
  if (!info.enabled)
    return done(make_problem({409, "not-a-cluster", "Not a cluster",
                              "this node runs without cluster.id"}));
  node_.change_cluster(op, *id, [done](reply<uint64_t> rep) {
    if (rep.ok) {
      std::string body = R"({"status":"ok","leader_id":)";
      body += std::to_string(rep.value);
      body += '}';
      return done(json_response(200, std::move(body)));
    }
    if (rep.error == errc::invalid_argument) {
      auto res = make_problem({409, "cluster-change-refused",
                               "Cluster change refused", rep.detail});
      return done(std::move(res));
    }
    auto res = make_problem({503, "no-leader", "No leader",
                             "no ready raft leader answered: " + rep.detail});
    res.set("Retry-After", "1");
    done(std::move(res));
  });
}

void webhook_handler::handle_admin(http_request& req, responder& done) {
  auto& admin = opts_.admin;
  if (!admin.token.empty()) {
    auto auth = req.header("authorization");
    // The scheme name is case-insensitive (RFC 9110 11.1).
    auto scheme_ok = [](std::string_view value) {
      constexpr std::string_view bearer = "bearer ";
      if (value.size() < bearer.size())
        return false;
      for (size_t i = 0; i < bearer.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(value[i])) != bearer[i])
          return false;
      return true;
    };
    if (!auth || !scheme_ok(*auth)
        || !constant_time_equal(auth->substr(7), admin.token)) {
      auto res = make_problem({401, "unauthorized", "Unauthorized",
                               "admin endpoints need a valid bearer token"});
      res.set("WWW-Authenticate", "Bearer");
      return done(std::move(res));
    }
  } else if (!admin.loopback_listener) {
    return done(make_problem({403, "forbidden", "Forbidden",
                              "admin endpoints are off on a non-loopback "
                              "listener without an admin token"}));
  }
  if (req.path() == "/v1/keys")
    return handle_admin_list(req, done);
  if (req.path().substr(0, 11) == "/v1/cluster")
    return handle_cluster(req, done);
  auto raw_key = req.path().substr(keys_prefix.size());
  constexpr std::string_view complete_suffix = "/complete";
  bool complete = raw_key.size() > complete_suffix.size()
                  && raw_key.substr(raw_key.size() - complete_suffix.size())
                       == complete_suffix;
  if (complete)
    raw_key.remove_suffix(complete_suffix.size());
  auto key = percent_decode(raw_key);
  if (!key || key->empty() || key->size() > 255)
    return done(make_problem({400, "invalid-key", "Invalid key",
                              "the key in the path is empty, too long or "
                              "badly escaped"}));
  auto route_name = query_param(req.target, "route").value_or("default");
  auto route = opts_.routes.by_name(route_name);
  if (!route)
    return done(not_found("no such route"));
  if (complete) {
    if (req.method != "POST")
      return done(method_not_allowed("POST"));
    // {"status": 200, "body": "...", "content_type": "..."}: the outcome an
    // operator verified upstream.
    auto parsed = parse_payload(req.body, opts_.payload);
    if (auto why = std::get_if<rejection>(&parsed))
      return done(make_problem(*why));
    auto& fields = std::get<payload>(parsed).fields;
    auto status = fields.find("status");
    int code = 0;
    if (status != fields.end() && status->second.type == field::kind::number)
      code = std::atoi(status->second.text.c_str());
    // A stored outcome is a final HTTP answer: 200-599, and no body where
    // HTTP forbids one (it would be replayed to every duplicate).
    if (code < 200 || code > 599)
      return done(make_problem({400, "bad-request", "Bad request",
                                "status must be a number 200..599"}));
    if (auto b = fields.find("body");
        (code == 204 || code == 304) && b != fields.end()
        && !(b->second.type == field::kind::string && b->second.text.empty()))
      return done(make_problem({400, "bad-request", "Bad request",
                                "a 204 or 304 outcome has no body"}));
    record_update upd;
    upd.route = route->name;
    upd.key = *key;
    upd.op = transition::complete;
    upd.status = static_cast<uint16_t>(code);
    if (auto b = fields.find("body");
        b != fields.end() && b->second.type == field::kind::string)
      upd.response = b->second.text;
    if (auto ct = fields.find("content_type");
        ct != fields.end() && ct->second.type == field::kind::string)
      upd.headers = "Content-Type: " + ct->second.text;
    log::gateway()->info("[C{}][R{}] admin.complete route={} status={}",
                         req.conn_id, req.req_id, route->name, code);
    return admin_update(std::move(upd), std::move(done),
                        [](const update_result& res) {
                          if (res.applied)
                            return json_response(200,
                                                 record_json(res.current.rec));
                          if (!res.current.found)
                            return not_found("no record for this key");
                          return make_problem(
                            {409, "not-unsettled", "Not unsettled",
                             "only in-flight or in-doubt records can be "
                             "completed"},
                            res.current.rec.key);
                        });
  }
  if (req.method == "GET" || req.method == "HEAD") {
    return node_.lookup(
      route->name, *key,
      [done = std::move(done), k = *key](reply<lookup_result> rep) {
        if (!rep.ok)
          return done(unavailable_response(rep.error, k));
        if (!rep.value.found)
          return done(not_found("no record for this key"));
        done(json_response(200, record_json(rep.value.rec)));
      });
  }
  if (req.method == "DELETE") {
    // An in-flight record's forward is still running: releasing it would
    // let the sender's next retry execute beside it. Only `force=true`
    // (the operator knows that forward never reached the upstream) does.
    auto force_text = query_param(req.target, "force").value_or("false");
    if (force_text != "true" && force_text != "false")
      return done(make_problem({400, "bad-request", "Bad request",
                                "force must be true or false"}));
    bool force = force_text == "true";
    record_update upd;
    upd.route = route->name;
    upd.key = *key;
    upd.op = force ? transition::release : transition::release_settled;
    log::gateway()->info("[C{}][R{}] admin.release route={} force={}",
                         req.conn_id, req.req_id, route->name, force);
    return admin_update(std::move(upd), std::move(done),
                        [k = *key](const update_result& res) {
                          if (!res.applied && res.current.found
                              && res.current.rec.state
                                   == record_state::in_flight) {
                            auto out = make_problem(
                              {409, "in-flight", "Request in flight",
                               "the first request of this key is still "
                               "being forwarded; it turns in_doubt if no "
                               "answer comes by its deadline. DELETE with "
                               "force=true releases it anyway (a retry may "
                               "then execute while the first still runs)"},
                              k);
                            out.set("Retry-After", "1");
                            return out;
                          }
                          if (!res.applied)
                            return not_found("no record for this key");
                          std::string body = R"({"released":true,"key":)";
                          append_json_string(body, k);
                          body += '}';
                          return json_response(200, std::move(body));
                        });
  }
  done(method_not_allowed("GET, HEAD, DELETE"));
}

} // namespace oncegate::gateway
