#include "common/record.hpp"
#include "common/enum_text.hpp"

#include "common/mutant.hpp"

namespace oncegate {

constexpr const char* record_state_names[] = {
  "in_flight", "completed", "in_doubt"};
static_assert(enum_table_covers(record_state::in_doubt, record_state_names));

const char* to_string(record_state x) {
  return enum_text(x, record_state_names);
}

constexpr const char* decision_names[] = {
  "accepted", "duplicate", "mismatch", "renewed"};
static_assert(enum_table_covers(decision::renewed, decision_names));

const char* to_string(decision x) {
  return enum_text(x, decision_names);
}

constexpr const char* transition_names[] = {
  "complete", "release", "in_doubt", "release_settled"};
static_assert(enum_table_covers(transition::release_settled, transition_names));

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
  return r;
}

record_update after_delivery(std::string route, std::string key,
                             int64_t first_seen_ms, delivery d,
                             uint16_t status, std::string headers,
                             std::string response) {
  record_update upd;
  upd.route = std::move(route);
  upd.key = std::move(key);
  upd.first_seen_ms = first_seen_ms;
  upd.op = d == delivery::answered   ? transition::complete
           : d == delivery::not_sent ? transition::release
                                     : transition::in_doubt;
  if (d == delivery::answered) {
    upd.status = status;
    upd.headers = std::move(headers);
    upd.response = std::move(response);
  }
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
  if (static_cast<uint8_t>(req.initial_state)
      > static_cast<uint8_t>(record_state::in_doubt))
    return "record state";
  if (req.status != 0 && (req.status < 100 || req.status > 599))
    return "status";
  if (req.headers.size() > record_bounds::headers
      || req.response.size() > record_bounds::response
      || req.signal.size() > record_bounds::signal)
    return "answer size";
  if (req.now_ms < 0 || req.ttl_ms <= 0 || req.ttl_ms > record_bounds::ttl_ms)
    return "time";
  return nullptr;
}

const char* malformed(const record_update& upd) {
  if (auto why = malformed_key(upd.route, upd.key))
    return why;
  if (static_cast<uint8_t>(upd.op)
      > static_cast<uint8_t>(transition::release_settled))
    return "transition";
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
                               int64_t now_ms) {
  if (h == nullptr)
    return decision::accepted;
  if (!live(h->state, h->expires_at_ms, now_ms))
    return decision::renewed;
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
