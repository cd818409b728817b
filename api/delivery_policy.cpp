#include "api/delivery_policy.hpp"

// The route options of a delivery policy, checked (docs/operations.md,
// "Routes").

#include <caf/timespan.hpp>

namespace oncegate::gateway {

namespace {

using std::chrono::milliseconds;

// A positive duration of at most `most`.
std::string duration(const caf::config_value& value, milliseconds most,
                     milliseconds& out) {
  auto span = caf::get_if<caf::timespan>(&value);
  if (!span || span->count() <= 0)
    return "expected a positive duration (e.g. 2s)";
  auto ms = std::chrono::duration_cast<milliseconds>(*span);
  if (ms.count() < 1 || ms > most)
    return "expected 1ms.." + std::to_string(most.count() / 3'600'000) + "h";
  out = ms;
  return {};
}

} // namespace

std::string apply_delivery_option(std::string_view key,
                                  const caf::config_value& value,
                                  delivery_policy& p, reconcile_policy& r) {
  if (key == "reconcile") {
    auto str = caf::get_if<std::string>(&value);
    constexpr std::string_view placeholder = "{key}";
    constexpr std::string_view marker = "oncegate-reconcile-key";
    auto pos = str ? str->find(placeholder) : std::string::npos;
    if (pos == std::string::npos
        || str->find(placeholder, pos + 1) != std::string::npos)
      return "expected a URL with {key} once in its path, e.g. "
             "https://orders.internal/by-client-id/{key}";
    auto url = *str;
    url.replace(pos, placeholder.size(), marker);
    auto target = parse_upstream_url(url);
    auto at = target ? target->path.find(marker) : std::string::npos;
    if (at == std::string::npos)
      return "expected http://host[:port]/path or https://... with {key} in "
             "the path";
    r.path_prefix = target->path.substr(0, at);
    r.path_suffix = target->path.substr(at + marker.size());
    r.target = std::move(target);
    return {};
  }
  if (key == "reconcile-attempts") {
    auto num = caf::get_if<int64_t>(&value);
    if (!num || *num < 1 || *num > 1000)
      return "expected 1..1000";
    r.attempts = static_cast<uint32_t>(*num);
    return {};
  }
  if (key == "delivery") {
    auto str = caf::get_if<std::string>(&value);
    if (str && *str == "sync")
      p.async = false;
    else if (str && *str == "async")
      p.async = true;
    else
      return "expected sync or async";
    return {};
  }
  if (key == "delivery-backoff") {
    auto num = caf::get_if<int64_t>(&value);
    if (!num || *num < 1 || *num > 10)
      return "expected a factor 1..10";
    p.factor = static_cast<uint32_t>(*num);
    return {};
  }
  // A year bounds every interval: far beyond any signal's use.
  auto year = milliseconds(int64_t{366} * 24 * 3'600'000);
  if (key == "delivery-first-retry")
    return duration(value, year, p.first_retry);
  if (key == "delivery-max-retry")
    return duration(value, year, p.max_retry);
  if (key == "delivery-deadline")
    return duration(value, year, p.deadline);
  if (key == "reconcile-after")
    return duration(value, year, r.after);
  if (key == "reconcile-interval")
    return duration(value, year, r.interval);
  return "unknown delivery option";
}

std::string finish_delivery_policy(delivery_policy& p, bool has_upstream,
                                   milliseconds respond_after,
                                   bool delivery_options_set) {
  if (delivery_options_set && !has_upstream)
    return "delivery options need an upstream";
  if (p.max_retry < p.first_retry)
    return "delivery-max-retry must be at least delivery-first-retry";
  p.durable = has_upstream && (p.async || respond_after.count() > 0);
  if (delivery_options_set && has_upstream && !p.durable)
    return "delivery-* options need delivery = \"async\" or respond-after "
           "(a sender that waits for the answer retries itself)";
  return {};
}

} // namespace oncegate::gateway
