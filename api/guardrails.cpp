#include "api/guardrails.hpp"

#include <chrono>

#include <caf/timespan.hpp>

#include "api/idempotency_key.hpp"
#include "api/responses.hpp"

namespace oncegate::gateway {

namespace {

constexpr std::string_view option_keys[] = {
  "max-age", "max-ahead", "signal-time", "max-new-per-minute", "cap-by"};

// A member name: what a body's top-level member may be called here.
bool member_name(const std::string& s) {
  return !s.empty() && s.size() <= 64;
}

std::string seconds_text(int64_t ms) {
  auto s = std::to_string(ms / 1000);
  if (auto frac = ms % 1000; frac != 0) {
    auto f = std::to_string(frac < 0 ? -frac : frac);
    s += '.' + std::string(3 - f.size(), '0') + f;
  }
  return s + " s";
}

// The signal's own time, in epoch milliseconds; nothing when it is missing
// or unreadable.
std::optional<int64_t>
signal_time(const guardrails& g, auth_mode auth,
            std::optional<std::string_view> webhook_timestamp,
            const payload& body) {
  if (g.time_member.empty() && auth == auth_mode::standard_webhooks) {
    // Verified already: the signature covers it (whole seconds).
    if (!webhook_timestamp)
      return std::nullopt;
    field f;
    f.type = field::kind::number;
    f.text = std::string{*webhook_timestamp};
    return parse_timestamp_ms(f);
  }
  auto name = g.time_member.empty() ? std::string_view{"timestamp"}
                                    : std::string_view{g.time_member};
  auto i = body.fields.find(name);
  if (i == body.fields.end())
    return std::nullopt;
  return parse_timestamp_ms(i->second);
}

} // namespace

bool is_guard_option(std::string_view key) {
  for (auto k : option_keys)
    if (key == k)
      return true;
  return false;
}

std::string apply_guard_option(std::string_view key,
                               const caf::config_value& value, guardrails& g) {
  if (key == "max-age" || key == "max-ahead") {
    auto span = caf::get_if<caf::timespan>(&value);
    auto ms = span ? std::chrono::duration_cast<std::chrono::milliseconds>(
                       *span)
                       .count()
                   : 0;
    if (!span || ms < 1 || ms > record_bounds::ttl_ms)
      return "expected a positive duration (e.g. 30s)";
    (key == "max-age" ? g.max_age_ms : g.max_ahead_ms) = ms;
  } else if (key == "signal-time" || key == "cap-by") {
    auto str = caf::get_if<std::string>(&value);
    if (!str || !member_name(*str))
      return "expected the name of a body member (1-64 bytes)";
    (key == "signal-time" ? g.time_member : g.cap_by) = *str;
  } else if (key == "max-new-per-minute") {
    auto num = caf::get_if<int64_t>(&value);
    if (!num || *num < 1 || *num > record_bounds::max_new_per_minute)
      return "expected 1.."
             + std::to_string(record_bounds::max_new_per_minute);
    g.max_new_per_minute = static_cast<uint32_t>(*num);
  }
  return {};
}

std::string finish_guardrails(const guardrails& g, auth_mode auth, bool text,
                              std::string& why) {
  if (g.max_age_ms == 0 && !g.time_member.empty()) {
    why = "set, but max-age is not";
    return "signal-time";
  }
  if (g.max_new_per_minute == 0 && !g.cap_by.empty()) {
    why = "set, but max-new-per-minute is not";
    return "cap-by";
  }
  if (text && !g.cap_by.empty()) {
    why = "a text route's body has no members to cap by";
    return "cap-by";
  }
  if (g.max_age_ms != 0 && text
      && (auth != auth_mode::standard_webhooks || !g.time_member.empty())) {
    why = "a text route has no time to judge: only a standard-webhooks "
          "route's signed webhook-timestamp can be";
    return "max-age";
  }
  return {};
}

judgement
judge(const guardrails& g, auth_mode auth,
      std::optional<std::string_view> webhook_timestamp, const payload& body,
      int64_t now_ms) {
  judgement out;
  if (g.max_age_ms != 0) {
    auto at = signal_time(g, auth, webhook_timestamp, body);
    if (!at) {
      std::string source = !g.time_member.empty()
                               ? "member \"" + g.time_member + "\""
                           : auth == auth_mode::standard_webhooks
                             ? std::string{"webhook-timestamp"}
                             : std::string{"member \"timestamp\""};
      out.unjudged = rejection{
        422, "missing-signal-time", "Missing signal time",
        "the route judges a signal's age by its " + source
          + " (epoch seconds or milliseconds, or ISO 8601): missing or "
            "unreadable; not executed"};
    } else {
      out.age_ms = now_ms - *at;
    }
    out.guards.stale = !at || out.age_ms > g.max_age_ms
                       || -out.age_ms > g.max_ahead_ms;
  }
  if (g.max_new_per_minute != 0) {
    out.guards.max_new_per_minute = g.max_new_per_minute;
    if (!g.cap_by.empty()) {
      auto value = trimmed_string(body, g.cap_by);
      if (!value || value->size() > record_bounds::cap_scope) {
        if (!out.unjudged)
          out.unjudged = rejection{
            422, "missing-fields", "Missing cap member",
            "the route caps new signals per \"" + g.cap_by
              + "\": a string of 1-" + std::to_string(record_bounds::cap_scope)
              + " bytes; not executed"};
        out.guards.stale = true;
        return out;
      }
      // One scope per symbol however it is spelt (as a derived key reads
      // it).
      for (auto c : *value)
        out.guards.cap_scope += (c >= 'a' && c <= 'z')
                                  ? static_cast<char>(c - 'a' + 'A')
                                  : c;
    }
  }
  return out;
}

http_response stale_signal(const guardrails& g, int64_t age_ms,
                           const std::string& key) {
  rejection r{422, "stale-signal", "Stale signal", {}};
  if (age_ms < 0)
    r.detail = "the signal's time is " + seconds_text(-age_ms)
               + " ahead of this node's clock, beyond the route's max-ahead ("
               + seconds_text(g.max_ahead_ms) + "); not executed";
  else
    r.detail = "the signal is " + seconds_text(age_ms)
               + " old, beyond the route's max-age ("
               + seconds_text(g.max_age_ms) + "); not executed";
  return make_problem(r, key,
                      ",\"age_ms\":" + std::to_string(age_ms)
                        + ",\"max_age_ms\":" + std::to_string(g.max_age_ms)
                        + ",\"max_ahead_ms\":"
                        + std::to_string(g.max_ahead_ms));
}

http_response rate_limited(const guardrails& g, const std::string& key) {
  rejection r{429, "rate-limited", "Rate limited",
              "the route's cap of " + std::to_string(g.max_new_per_minute)
                + " new signals per minute"
                + (g.cap_by.empty() ? std::string{} : " per " + g.cap_by)
                + " is reached; not executed"};
  auto res = make_problem(r, key,
                          ",\"max_new_per_minute\":"
                            + std::to_string(g.max_new_per_minute));
  // A minute is the longest a new signal waits for the cap.
  res.set("Retry-After", "60");
  return res;
}

} // namespace oncegate::gateway
