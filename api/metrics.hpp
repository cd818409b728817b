#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock_offset.hpp"
#include "service/node_service.hpp"

namespace oncegate::gateway {

/// What became of one webhook request (the `outcome` label).
enum class outcome : uint8_t {
  /// Granted: executed (`new`).
  granted,
  duplicate,
  mismatch,
  rejected_auth,
  forbidden,
  bad_request,
  unavailable,
  /// Refused by a guardrail (api/guardrails.hpp): the signal was too old
  /// (or ahead), or the route's cap of new signals was reached.
  stale,
  rate_limited,
  /// Refused: the route is paused (`oncegate routes pause`).
  paused,
};

constexpr std::size_t outcome_count = 10;

/// Returns the label value, e.g. `new`, `rejected_auth`.
const char* to_string(outcome x);

/// Lock-free counters of the HTTP side, rendered together with the actors'
/// counters in the Prometheus text format.
class gateway_metrics {
public:
  explicit gateway_metrics(std::vector<std::string> route_names);

  /// Counts one webhook request of route number `route`.
  void count(std::size_t route, outcome x);

  /// Counts one forwarded request's result (0 response, 1 not sent, 2 maybe
  /// sent) on route number `route`.
  void count_upstream(std::size_t route, std::size_t result);

  /// Counts one in-doubt key of route number `route` that reconciliation
  /// did not ask about (its key is not safe in a URL path).
  void count_reconcile_skipped(std::size_t route);

  /// Records the time from a complete request to its response.
  void observe_request(double seconds);

  /// Renders everything as Prometheus text exposition (version 0.0.4).
  std::string render(const node_metrics& node) const;

  /// The current count (tests).
  uint64_t value(std::size_t route, outcome x) const;

private:
  std::vector<std::string> routes_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::unique_ptr<std::atomic<uint64_t>[]> upstream_;
  std::unique_ptr<std::atomic<uint64_t>[]> reconcile_skipped_;
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<uint64_t> latency_count_{0};
  /// Sum in nanoseconds (an integer, so it can be atomic).
  std::atomic<uint64_t> latency_sum_ns_{0};
};

/// Appends the clock-offset gauges of a cluster node (Prometheus text):
/// `oncegate_clock_offset_exceeded` always, `oncegate_clock_offset_seconds`
/// when measured (a follower).
void render_clock_offset(std::string& out, const clock_offset_reading& off);

} // namespace oncegate::gateway
