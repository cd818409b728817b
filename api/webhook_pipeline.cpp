#include "api/webhook_pipeline.hpp"

#include <atomic>
#include <cctype>
#include <chrono>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "common/logging.hpp"
#include "common/mutant.hpp"
#include "api/auth.hpp"
#include "api/decision_answers.hpp"
#include "api/guardrails.hpp"
#include "api/idempotency_key.hpp"
#include "api/responses.hpp"
#include "api/url.hpp"

namespace oncegate::gateway {

namespace {

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

/// Why a request goes no further, and how it is counted.
struct refusal {
  rejection why;
  outcome counted;
};

refusal unauthorized(std::string detail) {
  return {{401, "unauthorized", "Unauthorized", std::move(detail)},
          outcome::rejected_auth};
}

// A signed delivery whose signature is right but whose timestamp this
// node judges stale while its own clock is off the cluster's: the fault is
// ours, and a 401 would tell the sender it is theirs.
refusal clock_offset_refusal(const clock_offset_reading& off) {
  return {{503, "clock-offset", "Clock offset",
           "this node's clock is " + std::to_string(off.offset_ms)
             + " ms off the cluster's, beyond cluster.max-clock-offset: "
               "the timestamp cannot be judged here"},
          outcome::unavailable};
}

// Signatures are checked on the raw body, before parsing it. On success
// `delivery_id` is the delivery id the route's auth names, if any.
std::optional<refusal>
check_signature(const route_config& route, const http_request& req,
                const wall_clock_fn& signature_now,
                const clock_offset_monitor* clock_offset,
                std::optional<std::string_view>& delivery_id) {
  switch (route.auth) {
    case auth_mode::github: {
      auto sig = req.header("x-hub-signature-256");
      if (!sig || !verify_github(*sig, req.body, route.secrets))
        return unauthorized(sig ? "no valid signature"
                                : "missing X-Hub-Signature-256");
      delivery_id = req.header("x-github-delivery");
      break;
    }
    case auth_mode::standard_webhooks: {
      standard_webhook_headers hdrs{req.header("webhook-id"),
                                    req.header("webhook-timestamp"),
                                    req.header("webhook-signature")};
      if (auto why = verify_standard_webhook(hdrs, req.body, route.secrets,
                                             signature_now() / 1000,
                                             route.tolerance_s)) {
        // Only the timestamp's age, and only while the clock is known to be
        // off: every other refusal stays 401.
        if (clock_offset != nullptr && why->detail == stale_timestamp_detail)
          if (auto off = clock_offset->read();
              off.exceeded
              && standard_webhook_signed(hdrs, req.body, route.secrets))
            return clock_offset_refusal(off);
        return refusal{*why, outcome::rejected_auth};
      }
      delivery_id = hdrs.id;
      break;
    }
    case auth_mode::none:
    case auth_mode::token:
      break;
  }
  return std::nullopt;
}

// A `token` route's secret comes as `?token=` or a `passphrase` member
// (TradingView cannot send headers); every secret is compared, in
// constant time.
std::optional<refusal> check_token(const route_config& route,
                                   const http_request& req,
                                   const payload& body) {
  if (route.auth != auth_mode::token)
    return std::nullopt;
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
    return unauthorized(token ? "invalid token" : "missing token");
  return std::nullopt;
}

} // namespace

webhook_pipeline::webhook_pipeline(const route_table& routes,
                                   const payload_limits& limits,
                                   node_service& node, decision_cache& cache,
                                   gateway_metrics& metrics, forwarder* fwd,
                                   wall_clock_fn now,
                                   wall_clock_fn signature_now,
                                   const clock_offset_monitor* clock_offset)
  : routes_(routes),
    limits_(limits),
    node_(node),
    cache_(cache),
    metrics_(metrics),
    forwarder_(fwd),
    now_(std::move(now)),
    signature_now_(std::move(signature_now)),
    clock_offset_(clock_offset) {
  // nop
}

void webhook_pipeline::handle(const route_config& route, http_request& req,
                              responder done) {
  // Time every webhook from its complete arrival to its response.
  auto start = std::chrono::steady_clock::now();
  responder timed = [this, start, done = std::move(done)](http_response res) {
    metrics_.observe_request(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count());
    done(std::move(res));
  };
  run(route, req, timed);
}

void webhook_pipeline::run(const route_config& route, http_request& req,
                           responder& done) {
  auto idx = routes_.index_of(route);
  auto reject = [&](const refusal& no, const std::string& key = {}) {
    metrics_.count(idx, no.counted);
    log::gateway()->debug("[C{}][R{}] webhook.rejected route={} status={} "
                          "type={} client={}",
                          req.conn_id, req.req_id, route.name, no.why.status,
                          no.why.type, req.client_address());
    auto res = make_problem(no.why, key);
    if (no.why.status == 413)
      res.close = true;
    // Only `clock-offset` refuses with 503 here: by the time the sender
    // retries, a load balancer reading /readyz has moved it elsewhere.
    if (no.why.status == 503)
      res.set("Retry-After", "5");
    done(std::move(res));
  };
  if (!route.allow.empty()
      && !address_allowed(req.client_address(), route.allow))
    return reject({{403, "forbidden", "Forbidden",
                    "source address not allowed on this route"},
                   outcome::forbidden});
  if (req.method != "POST") {
    metrics_.count(idx, outcome::bad_request);
    return done(method_not_allowed("POST"));
  }
  if (!acceptable_media_type(req.header("content-type")))
    return reject({{415, "unsupported-media-type", "Unsupported media type",
                    "send application/json or text/plain"},
                   outcome::bad_request});
  if (req.body.size() > route.body_limit)
    return reject({{413, "body-too-large", "Body too large",
                    "request body exceeds the route's limit"},
                   outcome::bad_request});
  auto now = now_();
  std::optional<std::string_view> delivery_id;
  if (auto no = check_signature(route, req, signature_now_, clock_offset_,
                                    delivery_id))
    return reject(*no);
  bool text = route.body == body_format::text;
  if (text && req.body.empty())
    return reject({{400, "empty-body", "Empty body",
                    "a text route's signal is its body: send one"},
                   outcome::bad_request});
  auto parsed = text ? std::variant<payload, rejection>{text_payload(req.body)}
                     : parse_payload(req.body, limits_);
  if (auto why = std::get_if<rejection>(&parsed))
    return reject({*why, outcome::bad_request});
  auto& body = std::get<payload>(parsed);
  if (auto no = check_token(route, req, body))
    return reject(*no);
  // Repeated Idempotency-Key lines combine into a list, which is not a
  // valid key: refusing is safer than picking one.
  auto key_header = req.combined_header("idempotency-key");
  key_inputs inputs;
  inputs.auth = route.auth;
  inputs.header = key_header;
  inputs.delivery_id = delivery_id;
  inputs.raw_body = req.body;
  inputs.text = text;
  auto selected = select_key(inputs, body);
  if (auto why = std::get_if<rejection>(&selected))
    return reject({*why, outcome::bad_request});
  auto key = std::get<idempotency_key>(std::move(selected));
  // The guardrails: a stale signal or one beyond the cap is refused by the
  // store only if it would create a record (a duplicate stays one).
  auto judged = judge(route.guards, route.auth, req.header("webhook-timestamp"),
                      body, now);
  bool replay = route.on_duplicate == duplicate_policy::replay;
  // Duplicates of completed keys are answered here, on the HTTP thread,
  // from committed decisions; everything else asks the key's actor.
  auto routing = routing_key(route.name, key.value);
  if (auto hit = cache_.lookup(routing, body.fingerprint, now, replay)) {
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
  claim.guards = std::move(judged.guards);
  // With an upstream the record is in flight until its outcome is stored;
  // without one, recording the signal is the execution.
  std::optional<forward_job> job;
  if (route.upstream) {
    claim.initial_state = record_state::in_flight;
    job.emplace();
    job->route = route.name;
    job->route_index = idx;
    job->target = &*route.upstream;
    job->conn = req.conn_id;
    job->req = req.req_id;
    job->body = req.body;
    job->content_type = std::string{req.header("content-type").value_or("")};
    if (route.delivery.durable) {
      // The signal stays in the record until the upstream has it: the
      // claim carries what another attempt needs.
      job->attempt = 1;
      job->delivery = &route.delivery;
      job->term = node_.delivery_of(claim.route, claim.key).term;
      claim.deliver_by_ms = now + route.delivery.deadline.count();
      job->deliver_by_ms = claim.deliver_by_ms;
      claim.signal_type = job->content_type;
    }
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
    [this, idx, &route, replay, age_ms = judged.age_ms,
     unjudged = std::move(judged.unjudged), done = std::move(done),
     key = std::move(key), conn = req.conn_id, rid = req.req_id, epoch,
     routing = std::move(routing),
     job = std::move(job),
     deadline = req.deadline](reply<claim_result> rep) mutable {
      http_response res;
      if (!rep.ok) {
        metrics_.count(idx, outcome::unavailable);
        res = unavailable_response(rep.error, key.value);
        log::gateway()->warn("[C{}][R{}] claim.failed route={} error={}",
                             conn, rid, route.name, rep.detail);
        return done(std::move(res));
      }
      auto& rec = rep.value.rec;
      if (!refused(rep.value.outcome))
        cache_.remember(routing, rec, epoch, replay);
      switch (rep.value.outcome) {
        case decision::accepted:
        case decision::renewed:
          if (job) {
            job->key = std::move(key);
            job->first_seen_ms = rec.first_seen_ms;
            // Past the response timeout the sender heard 503 ("nothing
            // executed"): then the forward must not begin. Once it has,
            // the timeout's answer is "in doubt".
            if (deadline
                // mutant: the forward begins whatever the sender heard
                && !ONCEGATE_MUTANT("forward-after-timeout")
                && !deadline->begin_effect(
                  forward_timed_out_response(job->key))) {
              metrics_.count(idx, outcome::unavailable);
              forwarder_->release_unsent(std::move(*job));
              return;
            }
            metrics_.count(idx, outcome::granted);
            return forward(route, std::move(*job), epoch, std::move(routing),
                           std::move(done));
          }
          metrics_.count(idx, outcome::granted);
          res = granted_response(rec, key);
          break;
        case decision::duplicate:
          metrics_.count(idx, outcome::duplicate);
          res = duplicate_response(route, rec, key);
          break;
        case decision::mismatch:
          metrics_.count(idx, outcome::mismatch);
          res = key_reused(key);
          break;
        case decision::stale:
          if (unjudged) {
            metrics_.count(idx, outcome::bad_request);
            res = make_problem(*unjudged, key.value);
          } else {
            metrics_.count(idx, outcome::stale);
            res = stale_signal(route.guards, age_ms, key.value);
          }
          break;
        case decision::rate_limited:
          metrics_.count(idx, outcome::rate_limited);
          res = rate_limited(route.guards, key.value);
          break;
        case decision::paused:
          metrics_.count(idx, outcome::paused);
          res = route_paused(route.name, key.value);
          break;
      }
      log::gateway()->debug("[C{}][R{}] claim.{} route={} status={}", conn,
                            rid, to_string(rep.value.outcome), route.name,
                            res.status);
      done(std::move(res));
    });
}

void webhook_pipeline::forward(const route_config& route, forward_job job,
                               uint64_t epoch, std::string routing,
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
  auto key = job.key;
  auto first_seen_ms = job.first_seen_ms;
  bool replay = route.on_duplicate == duplicate_policy::replay;
  forwarder_->forward(std::move(job), [this, fl, key, epoch, replay,
                                       first_seen_ms,
                                       routing = std::move(routing)](
                                        forward_result out) {
    if (out.recorded.ok && out.recorded.value.current.found) {
      auto& rec = out.recorded.value.current.rec;
      cache_.remember(routing, rec, epoch, replay);
      // Not sent on a route that delivers durably: the signal is queued
      // for another attempt, and the sender is done.
      if (out.recorded.value.applied
          && (rec.state == record_state::queued
              || rec.state == record_state::failed)) {
        fl->answer(in_progress_response(key, first_seen_ms));
        return;
      }
    }
    // The upstream's answer is relayed only once it is the committed
    // record: a resend then hears the same. Unrecorded (the store failed,
    // leadership was lost, the node is stopping), the record is unsettled
    // and so is the answer; the outcome may still land later (a cluster
    // node keeps trying), and nothing is executed again either way.
    bool kept = out.recorded.ok && out.recorded.value.current.found
                && out.recorded.value.current.rec.state
                     == record_state::completed;
    if (out.upstream.outcome == upstream_result::kind::response && !kept
        && !ONCEGATE_MUTANT("relay-unrecorded")) {
      fl->answer(unrecorded_outcome_response(out.upstream.status, key));
      return;
    }
    fl->answer(upstream_outcome_response(std::move(out.upstream), key));
  });
  if (route.delivery.async)
    fl->answer(in_progress_response(key, first_seen_ms));
  else if (route.respond_after.count() > 0)
    forwarder_->after(route.respond_after, [fl, key, first_seen_ms] {
      fl->answer(in_progress_response(key, first_seen_ms));
    });
}

} // namespace oncegate::gateway
