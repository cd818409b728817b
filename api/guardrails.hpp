#pragma once

// A route's trading guardrails (docs/http-api.md, "Guardrails"): how old a
// signal may be when it arrives (`max-age`) and how many new executions a
// minute the route may make (`max-new-per-minute`). Their options are read
// here, each request is judged here (`judge`), and the store enforces the
// judgement in the decision (`claim_guards`, common/record.hpp): a guard
// only ever keeps a claim from creating a record, so a duplicate of a
// signal executed in time is answered as a duplicate however late it comes.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include <caf/config_value.hpp>

#include "common/record.hpp"
#include "api/auth.hpp"
#include "api/payload.hpp"
#include "api/rejection.hpp"
#include "http/http_types.hpp"

namespace oncegate::gateway {

struct guardrails {
  /// `max-age`: a signal whose own time is older than this when it arrives
  /// is refused (0: no limit).
  int64_t max_age_ms = 0;
  /// `max-ahead`: a signal whose time is this far ahead of the node's clock
  /// is refused the same way (clocks differ a little; a signal from the
  /// future is a wrong clock or a forgery).
  int64_t max_ahead_ms = 5000;
  /// `signal-time`: the body member holding the signal's time (epoch
  /// seconds or milliseconds, or ISO 8601). Empty: the signed
  /// `webhook-timestamp` on a standard-webhooks route, else `timestamp`
  /// (the member a derived key reads).
  std::string time_member;
  /// `max-new-per-minute`: new executions the route may make per minute of
  /// the store's clock (0: no cap); `cap-by`: the member whose value each
  /// has its own cap of (e.g. `symbol`; empty: the whole route).
  uint32_t max_new_per_minute = 0;
  std::string cap_by;
};

/// Whether `key` is a route option read here (`max-age`, `max-ahead`,
/// `signal-time`, `max-new-per-minute`, `cap-by`).
bool is_guard_option(std::string_view key);

/// Applies option `key`; returns why its value is wrong ("" when right).
std::string apply_guard_option(std::string_view key,
                               const caf::config_value& value, guardrails& g);

/// Checks the options together, for a route with `auth` that reads text
/// bodies (`text`) or JSON: on a fault returns the option to blame and
/// sets `why`; empty when right. A `max-age` without a time to judge (a
/// text route that is not standard-webhooks, unless it names none either)
/// and a `cap-by` on a text route are faults: the node refuses to start.
std::string finish_guardrails(const guardrails& g, auth_mode auth, bool text,
                              std::string& why);

/// What a request's claim carries, and the signal's age when it was judged.
struct judgement {
  claim_guards guards;
  /// Milliseconds since the signal's own time (negative: ahead of the
  /// clock); 0 on a route without `max-age`.
  int64_t age_ms = 0;
  /// Set when the signal cannot be judged: its time (422
  /// `missing-signal-time`) or its cap member (422 `missing-fields`) is
  /// missing or unreadable. `guards.stale` is set too: the answer when the
  /// store refuses the claim (a duplicate of a signal executed before the
  /// route's guardrails were configured is still a duplicate).
  std::optional<rejection> unjudged;
};

/// Judges a request of a route with guardrails `g` at `now_ms`:
/// `webhook_timestamp` is the verified header of a standard-webhooks
/// route. Nothing is refused here: a signal that is stale, or cannot be
/// judged, is `guards.stale`, and only a claim that would create a record
/// is refused, by the store.
judgement
judge(const guardrails& g, auth_mode auth,
      std::optional<std::string_view> webhook_timestamp, const payload& body,
      int64_t now_ms);

/// 422 `stale-signal` for a claim of `key` the store refused as stale: its
/// age and the limits, in the detail and as `age_ms`, `max_age_ms` and
/// `max_ahead_ms`.
http_response stale_signal(const guardrails& g, int64_t age_ms,
                           const std::string& key);

/// 429 `rate-limited` with `Retry-After` for a claim the store refused at
/// the cap (`max_new_per_minute` says it).
http_response rate_limited(const guardrails& g, const std::string& key);

} // namespace oncegate::gateway
