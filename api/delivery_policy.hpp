#pragma once

// How a route delivers its signals upstream: once, with the sender waiting
// (a failure before sending releases the key and the sender retries), or
// durably: once oncegate has answered 202 the signal is its own, kept in
// the record until the upstream has it; attempts that certainly did not
// reach the upstream are retried from the record (common/record.hpp,
// `queued`) with exponential backoff, until a deadline makes it `failed`.
// An attempt that may have reached the upstream is never retried blindly:
// it is in doubt (docs/http-api.md, "Delivery").

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include <optional>

#include <caf/config_value.hpp>

#include "http/upstream_client.hpp"

namespace oncegate::gateway {

struct delivery_policy {
  /// Keep the signal until the upstream has it (a route with
  /// `respond-after`, or `delivery = "async"`).
  bool durable = false;
  /// Answer 202 as soon as the claim is durable (`delivery = "async"`).
  bool async = false;
  /// Backoff of the attempts after the first: `first_retry`, times
  /// `factor` per attempt, at most `max_retry`, each with jitter (between
  /// half and all of it, so that a recovering upstream is not hit by every
  /// queued signal at once).
  std::chrono::milliseconds first_retry{1000};
  uint32_t factor = 2;
  std::chrono::milliseconds max_retry{60000};
  /// After this long since the claim, a signal still not delivered fails
  /// (a dead letter for the operator: `GET /v1/keys?state=failed`).
  std::chrono::milliseconds deadline{std::chrono::hours(24)};

  /// When the next attempt may start after attempt `attempt` (1-based) was
  /// not sent at `now_ms`; `random` is any 64-bit random value.
  int64_t retry_at(int64_t now_ms, uint32_t attempt, uint64_t random) const {
    double base = static_cast<double>(first_retry.count());
    for (uint32_t i = 1; i < attempt && base < max_retry.count(); ++i)
      base *= factor;
    auto cap = static_cast<int64_t>(
      std::min<double>(base, static_cast<double>(max_retry.count())));
    cap = std::max<int64_t>(cap, 1);
    auto half = cap / 2;
    auto span = static_cast<uint64_t>(cap - half) + 1;
    return now_ms + half + static_cast<int64_t>(random % span);
  }
};

/// Settling in-doubt records by asking the upstream (`reconcile`): a GET of
/// the route's reconcile URL with the key (as sent in `Idempotency-Key`,
/// percent-encoded; never a key that is not safe in a path, see
/// `stable_path_segment`) in place of `{key}`. 200: the order exists, the record
/// completes with that answer; 404: it certainly does not, the record is
/// queued and delivered (once); anything else: asked again later, at most
/// `attempts` times, then left to the operator.
struct reconcile_policy {
  /// Where to ask (scheme, host, port, TLS); its path is per key.
  std::optional<upstream_target> target;
  /// The path around `{key}`.
  std::string path_prefix;
  std::string path_suffix;
  /// Wait after an attempt turned in doubt before asking: longer than the
  /// upstream takes to act on a request that was still on its way.
  std::chrono::milliseconds after{60000};
  std::chrono::milliseconds interval{10000};
  uint32_t attempts = 10;
};

/// The route options of a delivery policy (`[route.NAME]`).
constexpr std::string_view delivery_option_keys[] = {
  "delivery", "delivery-first-retry", "delivery-backoff",
  "delivery-max-retry", "delivery-deadline", "reconcile", "reconcile-after",
  "reconcile-interval", "reconcile-attempts"};

/// Applies route option `key` (one of `delivery_option_keys`) to `p` and
/// `r`; returns what is wrong with `value`, empty if nothing.
std::string apply_delivery_option(std::string_view key,
                                  const caf::config_value& value,
                                  delivery_policy& p, reconcile_policy& r);

/// Completes a route's policy once all its options are read (`durable`
/// follows from `delivery = "async"` or a `respond_after`); returns what is
/// wrong, empty if nothing.
std::string finish_delivery_policy(delivery_policy& p, bool has_upstream,
                                   std::chrono::milliseconds respond_after,
                                   bool delivery_options_set);

} // namespace oncegate::gateway
