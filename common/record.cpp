#include "common/record.hpp"

#include "common/mutant.hpp"

namespace oncegate {

const char* to_string(record_state x) {
  switch (x) {
    case record_state::in_flight:
      return "in_flight";
    case record_state::completed:
      return "completed";
    case record_state::in_doubt:
      return "in_doubt";
  }
  return "unknown";
}

const char* to_string(decision x) {
  switch (x) {
    case decision::accepted:
      return "accepted";
    case decision::duplicate:
      return "duplicate";
    case decision::mismatch:
      return "mismatch";
    case decision::renewed:
      return "renewed";
  }
  return "unknown";
}

const char* to_string(transition x) {
  switch (x) {
    case transition::complete:
      return "complete";
    case transition::release:
      return "release";
    case transition::in_doubt:
      return "in_doubt";
    case transition::release_settled:
      return "release_settled";
  }
  return "unknown";
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
