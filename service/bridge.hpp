// The bridge between threads that are not actors (asio's) and the node's
// actors, shared by both implementations of `node_service`: a small pool of
// bridge actors that run handed-over jobs, and the request helpers they use.
// Knows nothing of clusters (routing/ does).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>

#include "actors/node.hpp"
#include "service/node_service.hpp"

namespace oncegate::gateway {

/// A unit of work handed over to a bridge actor. Local only (it carries
/// callbacks).
struct bridge_job {
  std::function<void(caf::event_based_actor*)> run;
};

} // namespace oncegate::gateway

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(oncegate::gateway::bridge_job)

namespace oncegate::gateway {

/// What both node services share.
struct service_options {
  /// Bound on gathering metrics and on the readiness probe. Claims carry
  /// no timeout of the bridge's own on a single node (the HTTP response
  /// timeout bounds them); on a cluster, `leader_wait` does.
  caf::timespan probe_timeout = std::chrono::seconds(2);
  /// Bridge actors sharing the load (round robin).
  std::size_t actors = 1;
};

/// Runs jobs handed over from any thread (a fire-and-forget message, never
/// blocking) inside one of its actors, round robin.
class actor_bridge {
public:
  using job = std::function<void(caf::event_based_actor*)>;

  actor_bridge(caf::actor_system& sys, std::size_t actors);
  ~actor_bridge();

  actor_bridge(const actor_bridge&) = delete;
  actor_bridge& operator=(const actor_bridge&) = delete;

  void post(job fn);

  /// Stops the bridge actors (idempotent); jobs posted afterwards are
  /// dropped. Jobs waiting in them (a retry's delayed message) may hold
  /// what owns this bridge: the owner stops it rather than wait for its
  /// destructor.
  void stop();

  /// Whether `stop` was called (thread-safe): callbacks that would run a
  /// job's continuation outside a bridge actor drop it then, as the bridge
  /// drops jobs.
  bool stopped() const {
    return stopped_.load(std::memory_order_acquire);
  }

  /// Runs `fn` in `self` (a bridge actor) after `delay`.
  static void post_later(caf::event_based_actor* self, caf::timespan delay,
                         job fn);

private:
  std::vector<caf::actor> actors_;
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> stopped_{false};
};

/// The reply for a request that failed with `err`.
/// The reply carrying `value`.
template <class T>
reply<T> success(T value) {
  reply<T> res;
  res.ok = true;
  res.value = std::move(value);
  return res;
}

template <class T>
reply<T> failure(caf::actor_system& sys, const caf::error& err) {
  reply<T> res;
  res.error = errc_of(err);
  if (err == caf::sec::request_timeout)
    res.error = errc::timeout;
  else if (res.error == errc::none)
    res.error = errc::store_unavailable;
  res.detail = sys.render(err);
  return res;
}

/// Requests `xs...` from `hdl` and maps the answer to a `reply<T>`.
template <class T, class Handle, class Timeout, class... Ts>
void ask(caf::event_based_actor* self, const Handle& hdl, Timeout timeout,
         std::function<void(reply<T>)> done, Ts&&... xs) {
  self->request(hdl, timeout, std::forward<Ts>(xs)...)
    .then(
      [done](T& value) { done(success(std::move(value))); },
      [self, done](caf::error& err) {
        done(failure<T>(self->system(), err));
      });
}

/// Collects the counters of every actor of `nodes` (a single node's one,
/// or a cluster node's partitions: counters summed, histograms merged, the
/// earliest alarm); answers once all replied or failed (then `complete` is
/// false).
void gather_metrics(caf::event_based_actor* self,
                    const std::vector<node>& nodes, caf::timespan timeout,
                    std::function<void(node_metrics)> done);

/// Ready when the store of every one of `nodes` answers within `timeout`.
void probe_store(caf::event_based_actor* self, const std::vector<node>& nodes,
                 caf::timespan timeout,
                 std::function<void(bool, std::string)> done);

} // namespace oncegate::gateway
