#include "common/record.hpp"
#include "common/enum_text.hpp"

#include "common/mutant.hpp"

namespace oncegate {

constexpr const char* record_state_names[] = {
  "in_flight", "completed", "in_doubt", "queued", "failed"};
static_assert(enum_table_covers(record_state::failed, record_state_names));

const char* to_string(record_state x) {
  return enum_text(x, record_state_names);
}

constexpr const char* decision_names[] = {
  "accepted", "duplicate", "mismatch", "renewed", "stale", "rate_limited",
  "paused"};
static_assert(enum_table_covers(last_decision, decision_names));

const char* to_string(decision x) {
  return enum_text(x, decision_names);
}

constexpr const char* transition_names[] = {
  "complete", "release",       "in_doubt", "release_settled", "defer",
  "start_attempt", "fail",     "redeliver", "requeue", "reconcile_wait"};
static_assert(enum_table_covers(transition::reconcile_wait, transition_names));

const char* to_string(transition x) {
  return enum_text(x, transition_names);
}

record make_record(const claim_request& req, int64_t now_ms) {
  record r;
  r.route = req.route;
  r.key = req.key;
  r.state = req.initial_state;
  r.fingerprint = req.fingerprint;
  r.first_seen_ms = now_ms;
  r.expires_at_ms = now_ms + req.ttl_ms;
  r.status = req.status;
  r.headers = req.headers;
  r.response = req.response;
  r.signal = req.signal;
  r.owner = req.owner;
  r.request_id = req.request_id;
  r.deliver_by_ms = req.deliver_by_ms;
  r.signal_type = req.signal_type;
  if (req.initial_state == record_state::in_flight && req.deliver_by_ms != 0) {
    // The claimant sends the first attempt at once.
    r.attempts = 1;
    r.next_attempt_ms = now_ms;
  }
  return r;
}

record_update after_delivery(const delivery_attempt& a, delivery d,
                             uint16_t status, std::string headers,
                             std::string response) {
  record_update upd;
  upd.route = a.route;
  upd.key = a.key;
  upd.first_seen_ms = a.first_seen_ms;
  upd.request_id = a.request_id;
  upd.attempt = a.attempt;
  switch (d) {
    case delivery::answered:
      upd.op = transition::complete;
      upd.status = status;
      upd.headers = std::move(headers);
      upd.response = std::move(response);
      break;
    case delivery::not_sent:
      if (a.retry_at_ms != 0) {
        // The record delivers durably: queued (or failed past its
        // deadline), never released.
        upd.op = transition::defer;
        upd.next_attempt_ms = a.retry_at_ms;
        upd.now_ms = a.now_ms;
      } else {
        upd.op = transition::release;
      }
      break;
    case delivery::maybe_sent:
      upd.op = transition::in_doubt;
      break;
  }
  return upd;
}

record_update release_of(const claim_request& req) {
  record_update upd;
  upd.route = req.route;
  upd.key = req.key;
  upd.op = transition::release;
  upd.request_id = req.request_id;
  return upd;
}

const char* malformed_key(std::string_view route, std::string_view key) {
  if (route.empty() || route.size() > record_bounds::route)
    return "route size";
  if (key.empty() || key.size() > record_bounds::key)
    return "key size";
  return nullptr;
}

const char* malformed(const claim_request& req) {
  if (auto why = malformed_key(req.route, req.key))
    return why;
  if (req.fingerprint.size() != record_bounds::fingerprint)
    return "fingerprint size";
  // Queued and failed records come from transitions, never from a claim.
  if (static_cast<uint8_t>(req.initial_state)
      > static_cast<uint8_t>(record_state::in_doubt))
    return "record state";
  if (req.deliver_by_ms < 0
      || (req.deliver_by_ms != 0
          && (req.initial_state != record_state::in_flight
              || req.deliver_by_ms <= req.now_ms)))
    return "delivery deadline";
  if (req.signal_type.size() > record_bounds::signal_type)
    return "content type size";
  if (req.status != 0 && (req.status < 100 || req.status > 599))
    return "status";
  if (req.headers.size() > record_bounds::headers
      || req.response.size() > record_bounds::response
      || req.signal.size() > record_bounds::signal)
    return "answer size";
  if (req.now_ms < 0 || req.ttl_ms <= 0 || req.ttl_ms > record_bounds::ttl_ms)
    return "time";
  if (req.guards.cap_scope.size() > record_bounds::cap_scope
      || req.guards.max_new_per_minute > record_bounds::max_new_per_minute)
    return "guards";
  return nullptr;
}

const char* malformed(const record_update& upd) {
  if (auto why = malformed_key(upd.route, upd.key))
    return why;
  if (static_cast<uint8_t>(upd.op)
      > static_cast<uint8_t>(transition::reconcile_wait))
    return "transition";
  if (upd.now_ms < 0 || upd.next_attempt_ms < 0 || upd.deliver_by_ms < 0)
    return "time";
  if (upd.attempt > record_bounds::attempts)
    return "attempt";
  switch (upd.op) {
    case transition::start_attempt:
      if (upd.attempt < 2 || upd.now_ms == 0 || upd.request_id == 0)
        return "attempt";
      break;
    case transition::defer:
      if (upd.attempt == 0 || upd.next_attempt_ms == 0)
        return "attempt";
      break;
    case transition::fail:
      if (upd.now_ms == 0)
        return "time";
      break;
    case transition::redeliver:
      if (upd.now_ms == 0 || upd.deliver_by_ms <= upd.now_ms)
        return "delivery deadline";
      break;
    case transition::requeue:
      if (upd.now_ms == 0)
        return "time";
      break;
    case transition::reconcile_wait:
      if (upd.now_ms == 0 || upd.next_attempt_ms <= upd.now_ms)
        return "time";
      break;
    default:
      break;
  }
  if (upd.status > 599)
    return "status";
  if (upd.headers.size() > record_bounds::headers
      || upd.response.size() > record_bounds::response)
    return "answer size";
  if (upd.first_seen_ms < 0)
    return "time";
  return nullptr;
}

std::string routing_key(const std::string& route, const std::string& key) {
  // Route names never contain NUL, so the pair maps to one string only.
  std::string result;
  result.reserve(route.size() + key.size() + 1);
  result += route;
  result += '\0';
  result += key;
  return result;
}

std::optional<decision> decide(const holder* h, std::string_view fingerprint,
                               uint64_t request_id, uint64_t owner,
                               int64_t now_ms, std::optional<decision> refusal) {
  if (h == nullptr)
    return refusal.value_or(decision::accepted);
  if (!live(h->state, h->expires_at_ms, now_ms))
    return refusal.value_or(decision::renewed);
  if (h->fingerprint != fingerprint) {
    if (ONCEGATE_MUTANT("grant-on-mismatch"))
      return decision::renewed; // mutant: another payload executes
    return decision::mismatch;
  }
  if (request_id != 0 && h->request_id == request_id) {
    if (!h->owner_known)
      return std::nullopt;
    if (h->owner == owner)
      return decision::accepted; // the same attempt asks again
  }
  return decision::duplicate;
}

} // namespace oncegate
