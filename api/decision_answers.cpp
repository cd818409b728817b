#include "api/decision_answers.hpp"

#include <algorithm>
#include <string_view>
#include <utility>

#include "api/json_text.hpp"
#include "api/responses.hpp"

namespace oncegate::gateway {

namespace {

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

// A stored or relayed answer: its status, type and body, with the key.
http_response relayed(int status, std::string content_type, std::string body,
                      const idempotency_key& key) {
  http_response res;
  res.status = status;
  res.set("Content-Type", std::move(content_type));
  set_common_headers(res, key.value);
  res.body = std::move(body);
  return res;
}

// 409 of an unsettled key; one still in flight is worth a retry soon.
http_response unsettled_duplicate(const rejection& why,
                                  const idempotency_key& key,
                                  bool retry_soon) {
  auto res = make_problem(why, key.value);
  if (retry_soon)
    res.set("Retry-After", "1");
  res.set("Idempotent-Replayed", "true");
  return res;
}

} // namespace

std::string status_body(const char* status, const idempotency_key& key,
                        int64_t now_ms) {
  std::string out = R"({"status":")";
  out += status;
  out += R"(","idempotency_key":)";
  append_json_string(out, key.value);
  out += R"(,"key_source":")";
  out += to_string(key.source);
  out += R"(","received_at":")";
  append_timestamp(out, now_ms);
  out += "\"}";
  return out;
}

http_response granted_response(const record& rec, const idempotency_key& key) {
  return relayed(rec.status, "application/json", rec.response, key);
}

http_response key_reused(const idempotency_key& key) {
  return make_problem({422, "key-reused", "Idempotency key reused",
                       "this idempotency key was used with a different "
                       "payload; nothing was executed"},
                      key.value);
}

http_response duplicate_response(const route_config& route, const record& rec,
                                 const idempotency_key& key) {
  switch (rec.state) {
    case record_state::in_flight:
      return unsettled_duplicate({409, "in-flight", "Request in flight",
                                  "the original request with this key is "
                                  "still being executed; retry later"},
                                 key, true);
    case record_state::queued:
      return unsettled_duplicate({409, "in-flight", "Request in flight",
                                  "the original request with this key was "
                                  "accepted and its delivery upstream is "
                                  "being retried; retry later"},
                                 key, true);
    case record_state::in_doubt:
      return unsettled_duplicate({409, "in-doubt", "Outcome in doubt",
                                  "the original request may have been "
                                  "executed; an operator must settle this "
                                  "key"},
                                 key, false);
    case record_state::failed:
      return unsettled_duplicate({409, "failed", "Delivery failed",
                                  "the original request with this key was "
                                  "accepted but never reached the upstream "
                                  "before its delivery deadline; an "
                                  "operator can redeliver it"},
                                 key, false);
    case record_state::completed:
      break;
  }
  if (route.on_duplicate == duplicate_policy::replay) {
    auto res = relayed(rec.status, stored_content_type(rec.headers),
                       rec.response, key);
    res.set("Idempotent-Replayed", "true");
    return res;
  }
  auto res = make_problem({409, "duplicate", "Duplicate request",
                           "this idempotency key was already used; the "
                           "original request was executed"},
                          key.value);
  // The members the contract adds to a duplicate's problem, written into
  // its body in place (before the closing brace).
  auto& out = res.body;
  out.pop_back();
  out += R"(,"first_seen":")";
  append_timestamp(out, rec.first_seen_ms);
  out += R"(","original_status":)";
  out += std::to_string(rec.status);
  out += R"(,"key_source":")";
  out += to_string(key.source);
  out += "\"}";
  res.set("Idempotent-Replayed", "true");
  return res;
}

http_response in_progress_response(const idempotency_key& key,
                                   int64_t first_seen_ms) {
  auto res = json_response(202, status_body("in_progress", key, first_seen_ms));
  set_common_headers(res, key.value);
  return res;
}

http_response upstream_outcome_response(upstream_result res,
                                        const idempotency_key& key) {
  switch (res.outcome) {
    case upstream_result::kind::response:
      return relayed(res.status,
                     res.content_type.empty()
                       ? std::string{"application/json"}
                       : std::move(res.content_type),
                     std::move(res.body), key);
    case upstream_result::kind::not_sent: {
      auto out = make_problem({503, "upstream-unavailable",
                               "Upstream unavailable",
                               "the upstream could not be reached; nothing "
                               "was executed; retry later"},
                              key.value);
      out.set("Retry-After", "1");
      return out;
    }
    case upstream_result::kind::maybe_sent:
      break;
  }
  return make_problem({res.timed_out ? 504 : 502, "in-doubt",
                       "Outcome in doubt",
                       "the upstream may have executed this request but did "
                       "not answer; it will not be executed again "
                       "automatically"},
                      key.value);
}

http_response unrecorded_outcome_response(int status,
                                          const idempotency_key& key) {
  return make_problem({502, "in-doubt", "Outcome in doubt",
                       "the upstream answered " + std::to_string(status)
                         + ", but its outcome could not be recorded; the "
                           "record stays unsettled until it is, or an "
                           "operator settles it; it will not be executed "
                           "again automatically"},
                      key.value);
}

http_response forward_timed_out_response(const idempotency_key& key) {
  return make_problem({504, "in-doubt", "Outcome in doubt",
                       "no outcome within the response timeout; the upstream "
                       "may have executed this request; it will not be "
                       "executed again automatically"},
                      key.value);
}

} // namespace oncegate::gateway
