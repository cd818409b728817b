#include "persistence/codec.hpp"

#include <limits>

namespace oncegate::persistence::codec {

namespace {

// Without bounds (the log), any length the input holds is read.
constexpr std::size_t unbounded = std::numeric_limits<std::size_t>::max();

std::size_t bound(format f, std::size_t max) {
  return f.bounded ? max : unbounded;
}

} // namespace

void write(writer& w, const claim_request& c, format f) {
  w.str(c.route);
  w.str(c.key);
  w.str(c.fingerprint);
  w.i64(c.now_ms);
  w.i64(c.ttl_ms);
  w.u8(static_cast<uint8_t>(c.initial_state));
  w.u16(c.status);
  w.str(c.headers);
  w.str(c.response);
  w.str(c.signal);
  w.u64(c.owner);
  w.u64(c.request_id);
  if (f.delivery) {
    w.i64(c.deliver_by_ms);
    w.str(c.signal_type);
  }
  if (f.guards == guard_fields::present) {
    w.u8(c.guards.stale ? 1 : 0);
    w.u32(c.guards.max_new_per_minute);
    w.str(c.guards.cap_scope);
  }
}

namespace {

bool read_guards(reader& r, claim_guards& g, format f) {
  if (f.guards == guard_fields::none)
    return true;
  return r.flag(g.stale) && r.u32(g.max_new_per_minute)
         && r.str(g.cap_scope, bound(f, record_bounds::cap_scope),
                  "cap scope size");
}

} // namespace

bool read(reader& r, claim_request& c, format f) {
  namespace b = record_bounds;
  return r.str(c.route, bound(f, b::route), "route size")
         && r.str(c.key, bound(f, b::key), "key size")
         && r.str(c.fingerprint, bound(f, b::fingerprint), "fingerprint size")
         && r.i64(c.now_ms) && r.i64(c.ttl_ms)
         && r.enumeration(c.initial_state, record_state::in_doubt,
                          "record state")
         && r.u16(c.status)
         && r.str(c.headers, bound(f, b::headers), "headers size")
         && r.str(c.response, bound(f, b::response), "response size")
         && r.str(c.signal, bound(f, b::signal), "signal size")
         && r.u64(c.owner) && r.u64(c.request_id)
         && (!f.delivery
             || (r.i64(c.deliver_by_ms)
                 && r.str(c.signal_type, bound(f, b::signal_type),
                          "content type size")))
         && read_guards(r, c.guards, f);
}

void write(writer& w, const record_update& u, format f) {
  w.str(u.route);
  w.str(u.key);
  w.u8(static_cast<uint8_t>(u.op));
  w.i64(u.first_seen_ms);
  w.u16(u.status);
  w.str(u.headers);
  w.str(u.response);
  w.u64(u.request_id);
  if (f.delivery) {
    w.u32(u.attempt);
    w.u64(u.owner);
    w.i64(u.now_ms);
    w.i64(u.next_attempt_ms);
    w.i64(u.deliver_by_ms);
  }
}

bool read(reader& r, record_update& u, format f) {
  namespace b = record_bounds;
  auto last = f.delivery ? transition::reconcile_wait
                         : transition::release_settled;
  return r.str(u.route, bound(f, b::route), "route size")
         && r.str(u.key, bound(f, b::key), "key size")
         && r.enumeration(u.op, last, "transition")
         && r.i64(u.first_seen_ms) && r.u16(u.status)
         && r.str(u.headers, bound(f, b::headers), "headers size")
         && r.str(u.response, bound(f, b::response), "response size")
         && r.u64(u.request_id)
         && (!f.delivery
             || (r.u32(u.attempt) && r.u64(u.owner) && r.i64(u.now_ms)
                 && r.i64(u.next_attempt_ms) && r.i64(u.deliver_by_ms)));
}

void write(writer& w, const record& x) {
  w.str(x.route);
  w.str(x.key);
  w.u8(static_cast<uint8_t>(x.state));
  w.str(x.fingerprint);
  w.i64(x.first_seen_ms);
  w.i64(x.expires_at_ms);
  w.u16(x.status);
  w.str(x.headers);
  w.str(x.response);
  w.str(x.signal);
  w.u64(x.owner);
  w.u64(x.request_id);
  w.u32(x.attempts);
  w.i64(x.next_attempt_ms);
  w.i64(x.deliver_by_ms);
  w.str(x.signal_type);
  w.u32(x.reconciles);
}

bool read(reader& r, record& x, bool bounded) {
  namespace b = record_bounds;
  format f{true, bounded};
  return r.str(x.route, bound(f, b::route), "route size")
         && r.str(x.key, bound(f, b::key), "key size")
         && r.enumeration(x.state, record_state::failed, "record state")
         && r.str(x.fingerprint, bound(f, b::fingerprint), "fingerprint size")
         && r.i64(x.first_seen_ms) && r.i64(x.expires_at_ms)
         && r.u16(x.status)
         && r.str(x.headers, bound(f, b::headers), "headers size")
         && r.str(x.response, bound(f, b::response), "response size")
         && r.str(x.signal, bound(f, b::signal), "signal size")
         && r.u64(x.owner) && r.u64(x.request_id) && r.u32(x.attempts)
         && r.i64(x.next_attempt_ms) && r.i64(x.deliver_by_ms)
         && r.str(x.signal_type, bound(f, b::signal_type),
                  "content type size")
         && r.u32(x.reconciles);
}

} // namespace oncegate::persistence::codec
