#pragma once

// The key's lifecycle after a granted claim on a route with an upstream:
// send the first request upstream, turn its outcome into the record's
// transition, and make that durable through the node service. Must not
// live here: the sender's HTTP answer (`api/decision_answers.hpp`), the
// decision cache and anything of request parsing (`api/webhook_pipeline.*`).
//
//               send upstream
//   in_flight ─────────────────> response ───> update(complete: status, body)
//                                not_sent ───> update(release), or
//                                              update(defer) when durable
//                                maybe_sent ─> update(in_doubt)
//                                                │ durable, or failed
//                                                v
//                                             settled(result)
//
// A failed update leaves the record in flight; the node turns it in doubt
// at its deadline, so it is never executed again automatically.
//
// The rule itself (which transition each outcome makes) is the key's
// lifecycle and lives with the records (`after_delivery` in
// common/record.hpp); this file only sends and records. Forwarding sits in
// api/ beside the webhook that starts it because it needs the route's
// upstream target and the upstream client (http/), and the node service
// below must not know HTTP.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/clock.hpp"
#include "common/record.hpp"
#include "api/delivery_policy.hpp"
#include "api/idempotency_key.hpp"
#include "api/metrics.hpp"
#include "http/upstream_client.hpp"
#include "service/node_service.hpp"

namespace oncegate::gateway {

/// An attempt to send a key's signal upstream: the claim's own first one,
/// or one started from the delivery queue (`api/redelivery.hpp`).
struct forward_job {
  std::string route;
  /// Position of the route in the route table (per-route metrics).
  std::size_t route_index = 0;
  /// Where to send it; outlives the forward (owned by the route table).
  const upstream_target* target = nullptr;
  idempotency_key key;
  /// The claimed record's `first_seen`, which identifies it to `update`.
  int64_t first_seen_ms = 0;
  /// Connection and request numbers for log lines.
  uint64_t conn = 0;
  uint64_t req = 0;
  std::string body;
  std::string content_type;
  /// Durable delivery: the attempt's number (1: the claim's own) and
  /// request id (0: the claim's), the route's policy (null: deliver once)
  /// and the fence's term.
  uint32_t attempt = 0;
  uint64_t request_id = 0;
  const delivery_policy* delivery = nullptr;
  uint64_t term = 0;
  /// The record's delivery deadline (0: none): no retry is scheduled
  /// later than this, so the record fails when it passes.
  int64_t deliver_by_ms = 0;
};

/// What became of a forward.
struct forward_result {
  upstream_result upstream;
  /// The node's answer to recording the transition.
  reply<update_result> recorded;
};

/// The transition an upstream outcome at `now_ms` makes on the record of
/// `job` (`after_delivery`); `random` picks the backoff's jitter.
record_update outcome_update(const forward_job& job, const upstream_result& res,
                             int64_t now_ms, uint64_t random);

/// Runs forwards on the upstream client's thread and counts those whose
/// outcome is not yet recorded. Thread-safe.
class forwarder {
public:
  /// Runs once per forward, after the node answered the update.
  using settled_fn = std::function<void(forward_result)>;

  /// `now` is the node's clock (common/clock.hpp), which stamps what an
  /// attempt records (its time, its next retry): never the system clock,
  /// which an operator or NTP may step.
  forwarder(node_service& node, gateway_metrics& metrics, wall_clock_fn now);

  forwarder(const forwarder&) = delete;
  forwarder& operator=(const forwarder&) = delete;

  /// Sends `job` upstream, records the outcome, then calls `settled`.
  void forward(forward_job job, settled_fn settled);

  /// Releases the claimed record of `job` without sending anything: its
  /// sender was already told that nothing was executed (the response
  /// timeout answered before the forward could begin), so a retry must
  /// execute. Never deferred, also on a durable route: the signal is the
  /// sender's again. A failed release leaves the record in flight, and it
  /// turns in doubt at its deadline.
  void release_unsent(forward_job job);

  /// Runs `fn` after `delay` on the upstream client's thread.
  void after(std::chrono::milliseconds delay, std::function<void()> fn);

  /// Sends `req` to `target` and hands back what became of it, recording
  /// nothing (a reconciliation's question).
  void ask(const upstream_target& target, upstream_request req,
           std::function<void(upstream_result)> done);

  /// Forwards started and not yet recorded (their outcome durable).
  std::size_t in_flight() const;

  /// Waits until every forward started so far has its outcome recorded, or
  /// `bound` passed; returns how many are still running.
  std::size_t wait(std::chrono::milliseconds bound);

private:
  void recorded();

  node_service& node_;
  gateway_metrics& metrics_;
  wall_clock_fn now_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::size_t running_ = 0;
  /// Last member: destroyed first, so its thread stops before anything its
  /// callbacks use goes away.
  std::unique_ptr<upstream_client> upstream_;
};

} // namespace oncegate::gateway
