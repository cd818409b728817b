#include "api/admin_keys.hpp"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "common/logging.hpp"
#include "common/sha256.hpp"
#include "api/json_text.hpp"
#include "api/responses.hpp"
#include "api/url.hpp"

namespace oncegate::gateway {

namespace {

constexpr std::string_view keys_prefix = "/v1/keys/";

std::string record_json(const record& rec) {
  std::string out = R"({"route":)";
  append_json_string(out, rec.route);
  out += R"(,"key":)";
  append_json_string(out, rec.key);
  out += R"(,"state":")";
  out += to_string(rec.state);
  out += R"(","first_seen":")";
  append_timestamp(out, rec.first_seen_ms);
  out += R"(","expires_at":")";
  append_timestamp(out, rec.expires_at_ms);
  out += R"(","fingerprint":")";
  out += to_hex(rec.fingerprint);
  out += "\"";
  if (rec.deliver_by_ms != 0) {
    // Durable delivery: how far it got, and until when it is tried.
    out += R"(,"attempts":)";
    out += std::to_string(rec.attempts);
    out += R"(,"reconciles":)";
    out += std::to_string(rec.reconciles);
    out += R"(,"deliver_by":")";
    append_timestamp(out, rec.deliver_by_ms);
    out += "\"";
    if (rec.state == record_state::queued) {
      out += R"(,"next_attempt":")";
      append_timestamp(out, rec.next_attempt_ms);
      out += "\"";
    }
  }
  if (rec.state == record_state::completed) {
    out += R"(,"status":)";
    out += std::to_string(rec.status);
    out += R"(,"response":)";
    append_json_string(out, rec.response);
  }
  out += '}';
  return out;
}

std::string page_json(const record_page& page) {
  std::string body = R"({"records":[)";
  bool first = true;
  for (auto& rec : page.records) {
    if (!first)
      body += ',';
    first = false;
    body += record_json(rec);
  }
  body += R"(],"next_after":)";
  if (page.next_after.empty())
    body += "null";
  else
    append_json_string(body, page.next_after);
  body += '}';
  return body;
}

http_response bad_request(std::string detail) {
  return make_problem({400, "bad-request", "Bad request", std::move(detail)});
}

http_response no_record() {
  return not_found("no record for this key");
}

// The answer to an operator's completion.
http_response completed_answer(const update_result& res) {
  if (res.applied)
    return json_response(200, record_json(res.current.rec));
  if (!res.current.found)
    return no_record();
  return make_problem({409, "not-unsettled", "Not unsettled",
                       "only in-flight or in-doubt records can be completed"},
                      res.current.rec.key);
}

// The answer to an operator's release of `key`.
http_response released_answer(const update_result& res,
                              const std::string& key) {
  if (!res.applied && res.current.found
      && res.current.rec.state == record_state::in_flight) {
    auto out = make_problem({409, "in-flight", "Request in flight",
                             "the first request of this key is still being "
                             "forwarded; it turns in_doubt if no answer "
                             "comes by its deadline. DELETE with force=true "
                             "releases it anyway (a retry may then execute "
                             "while the first still runs)"},
                            key);
    out.set("Retry-After", "1");
    return out;
  }
  if (!res.applied)
    return no_record();
  std::string body = R"({"released":true,"key":)";
  append_json_string(body, key);
  body += '}';
  return json_response(200, std::move(body));
}

} // namespace

admin_keys::admin_keys(const route_table& routes, const payload_limits& limits,
                       node_service& node, decision_cache& cache,
                       wall_clock_fn now)
  : routes_(routes),
    limits_(limits),
    node_(node),
    cache_(cache),
    now_(std::move(now)) {
  // nop
}

void admin_keys::handle(http_request& req, responder& done) {
  if (req.path() == "/v1/keys")
    return list(req, done);
  auto raw_key = req.path().substr(keys_prefix.size());
  auto strip = [&raw_key](std::string_view suffix) {
    bool has = raw_key.size() > suffix.size()
               && raw_key.substr(raw_key.size() - suffix.size()) == suffix;
    if (has)
      raw_key.remove_suffix(suffix.size());
    return has;
  };
  bool completing = strip("/complete");
  bool redelivering = !completing && strip("/redeliver");
  auto key = percent_decode(raw_key);
  if (!key || key->empty() || key->size() > 255)
    return done(make_problem({400, "invalid-key", "Invalid key",
                              "the key in the path is empty, too long or "
                              "badly escaped"}));
  auto route = routes_.by_name(
    query_param(req.target, "route").value_or("default"));
  if (!route)
    return done(not_found("no such route"));
  if (completing)
    return complete(req, *route, *key, done);
  if (redelivering)
    return redeliver(req, *route, *key, done);
  if (req.method == "GET" || req.method == "HEAD") {
    return node_.lookup(
      route->name, *key,
      [done = std::move(done), k = *key](reply<lookup_result> rep) {
        if (!rep.ok)
          return done(unavailable_response(rep.error, k));
        if (!rep.value.found)
          return done(no_record());
        done(json_response(200, record_json(rep.value.rec)));
      });
  }
  if (req.method == "DELETE")
    return release(req, *route, *key, done);
  done(method_not_allowed("GET, HEAD, DELETE"));
}

void admin_keys::list(const http_request& req, responder& done) {
  if (req.method != "GET" && req.method != "HEAD")
    return done(method_not_allowed("GET, HEAD"));
  auto state_name = query_param(req.target, "state").value_or("in_doubt");
  record_state state;
  if (state_name == "in_doubt")
    state = record_state::in_doubt;
  else if (state_name == "in_flight")
    state = record_state::in_flight;
  else if (state_name == "queued")
    state = record_state::queued;
  else if (state_name == "failed")
    state = record_state::failed;
  else
    return done(bad_request("state must be in_doubt, in_flight, queued or "
                            "failed"));
  auto route = routes_.by_name(
    query_param(req.target, "route").value_or("default"));
  if (!route)
    return done(not_found("no such route"));
  uint32_t limit = 100;
  if (auto text = query_param(req.target, "limit")) {
    char* end = nullptr;
    auto n = std::strtoul(text->c_str(), &end, 10);
    if (text->empty() || *end != '\0' || n < 1 || n > 1000)
      return done(bad_request("limit must be 1..1000"));
    limit = static_cast<uint32_t>(n);
  }
  auto after = query_param(req.target, "after").value_or("");
  node_.list(route->name, state, std::move(after), limit,
             [done = std::move(done)](reply<record_page> rep) {
               if (!rep.ok)
                 return done(unavailable_response(rep.error, {}));
               done(json_response(200, page_json(rep.value)));
             });
}

// {"status": 200, "body": "...", "content_type": "..."}: the outcome an
// operator verified upstream.
void admin_keys::complete(const http_request& req, const route_config& route,
                          const std::string& key, responder& done) {
  if (req.method != "POST")
    return done(method_not_allowed("POST"));
  auto parsed = parse_payload(req.body, limits_);
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
    return done(bad_request("status must be a number 200..599"));
  if (auto b = fields.find("body");
      (code == 204 || code == 304) && b != fields.end()
      && !(b->second.type == field::kind::string && b->second.text.empty()))
    return done(bad_request("a 204 or 304 outcome has no body"));
  record_update upd;
  upd.route = route.name;
  upd.key = key;
  upd.op = transition::complete;
  upd.status = static_cast<uint16_t>(code);
  if (auto b = fields.find("body");
      b != fields.end() && b->second.type == field::kind::string)
    upd.response = b->second.text;
  if (auto ct = fields.find("content_type");
      ct != fields.end() && ct->second.type == field::kind::string)
    upd.headers = "Content-Type: " + ct->second.text;
  log::gateway()->info("[C{}][R{}] admin.complete route={} status={} "
                       "client={} peer={}",
                       req.conn_id, req.req_id, route.name, code,
                       req.client_address(), req.remote);
  update(std::move(upd), std::move(done), completed_answer);
}

// A failed record (its delivery deadline passed) queued again, due now,
// with a new deadline of the route's.
void admin_keys::redeliver(const http_request& req, const route_config& route,
                           const std::string& key, responder& done) {
  if (req.method != "POST")
    return done(method_not_allowed("POST"));
  if (!route.delivery.durable)
    return done(bad_request("route " + route.name
                            + " does not deliver durably (delivery = "
                              "\"async\" or respond-after)"));
  auto now = now_();
  record_update upd;
  upd.route = route.name;
  upd.key = key;
  upd.op = transition::redeliver;
  upd.now_ms = now;
  upd.deliver_by_ms = now + route.delivery.deadline.count();
  log::gateway()->info("[C{}][R{}] admin.redeliver route={} client={} peer={}",
                       req.conn_id, req.req_id, route.name,
                       req.client_address(), req.remote);
  update(std::move(upd), std::move(done), [](const update_result& res) {
    if (res.applied)
      return json_response(200, record_json(res.current.rec));
    if (!res.current.found)
      return no_record();
    return make_problem({409, "not-failed", "Not failed",
                         "only a failed record (its delivery deadline "
                         "passed) can be redelivered"},
                        res.current.rec.key);
  });
}

void admin_keys::release(const http_request& req, const route_config& route,
                         const std::string& key, responder& done) {
  // An in-flight record's forward is still running: releasing it would
  // let the sender's next retry execute beside it. Only `force=true`
  // (the operator knows that forward never reached the upstream) does.
  auto force_text = query_param(req.target, "force").value_or("false");
  if (force_text != "true" && force_text != "false")
    return done(bad_request("force must be true or false"));
  bool force = force_text == "true";
  record_update upd;
  upd.route = route.name;
  upd.key = key;
  upd.op = force ? transition::release : transition::release_settled;
  log::gateway()->info("[C{}][R{}] admin.release route={} force={} "
                       "client={} peer={}",
                       req.conn_id, req.req_id, route.name, force,
                       req.client_address(), req.remote);
  update(std::move(upd), std::move(done), [key](const update_result& res) {
    return released_answer(res, key);
  });
}

void admin_keys::update(
  record_update upd, responder done,
  std::function<http_response(const update_result&)> answer) {
  auto routing = routing_key(upd.route, upd.key);
  auto key = upd.key;
  node_.update(std::move(upd),
               [this, done = std::move(done), answer = std::move(answer),
                routing = std::move(routing),
                key = std::move(key)](reply<update_result> rep) {
                 // Before an operator's change is acknowledged, no HTTP
                 // thread may answer from the key's old decision any more.
                 cache_.forget(routing);
                 if (!rep.ok)
                   return done(unavailable_response(rep.error, key));
                 done(answer(rep.value));
               });
}

} // namespace oncegate::gateway
