#pragma once

// The delivery queue's runner: on the node that delivers (a single node;
// in a cluster the ready leader, `node_service::delivery`), it takes queued
// records whose next attempt is due (the rows are the schedule: a restarted
// node or a new leader just reads them), starts each attempt durably
// (`transition::start_attempt`: one starter wins, and an attempt that dies
// after sending is left in flight for the forward deadline to turn in
// doubt), sends it with the record's stored signal through the forwarder,
// and lets the forwarder record the outcome (`after_delivery`: completed,
// queued again with backoff, failed past the deadline, or in doubt). A
// queued record past its deadline without an attempt fails.
//
//   tick ──> due(now) ──> per record: start_attempt ──(applied)──> forward
//    ^                                                                │
//    └──── after min(next due, max_sleep), or at once if more are due ┘
//
// Runs on the upstream client's thread (the forwarder's `after`); the node
// service's answers hop back there, so its state needs no lock.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "api/forwarder.hpp"
#include "api/routes.hpp"
#include "common/clock.hpp"
#include "service/node_service.hpp"

namespace oncegate::gateway {

struct redelivery_options {
  /// Records taken from the queue per tick at most.
  uint32_t batch = 64;
  /// Attempts of the queue running at once at most.
  std::size_t max_running = 64;
  /// Longest sleep between looks at the queue (bounds how late a record
  /// queued by another node, or a redelivered one, is seen).
  std::chrono::milliseconds max_sleep{1000};
  /// Sleep while this node does not deliver (a follower), or after an
  /// error.
  std::chrono::milliseconds idle_sleep{500};
};

class redelivery {
public:
  redelivery(node_service& node, forwarder& fwd, gateway_metrics& metrics,
             const route_table& routes, wall_clock_fn now,
             redelivery_options opts = {});

  redelivery(const redelivery&) = delete;
  redelivery& operator=(const redelivery&) = delete;

  /// Starts looking at the queue.
  void start();

  /// Starts no attempt from now on (attempts already started finish and
  /// are recorded through the forwarder). Thread-safe.
  void stop();

  /// Attempts started by the queue and not yet recorded.
  std::size_t running() const {
    return running_.load();
  }

  /// After `stop()`: waits until no attempt of the queue runs, or `bound`
  /// passed; returns how many still run.
  std::size_t wait(std::chrono::milliseconds bound);

private:
  void schedule(std::chrono::milliseconds delay);
  void tick();
  void take(reply<delivery_queue> rep, node_service::delivery_turn turn);
  void attempt(record rec, const route_config& route,
               node_service::delivery_turn turn);
  void finished(const std::string& routing);
  // Reconciliation of in-doubt records (routes with `reconcile`).
  void reconcile_pass(node_service::delivery_turn turn);
  void reconcile(record rec, const route_config& route,
                 node_service::delivery_turn turn);
  void settle(const record& rec, const route_config& route,
              const upstream_result& res);

  node_service& node_;
  forwarder& fwd_;
  gateway_metrics& metrics_;
  const route_table& routes_;
  wall_clock_fn now_;
  redelivery_options opts_;
  std::atomic<bool> stopped_{false};
  std::atomic<std::size_t> running_{0};
  std::mutex mtx_;
  std::condition_variable idle_;
  /// Keys (routing_key) whose attempt this node is starting or running:
  /// never two at once (the store's fence would refuse the second anyway).
  std::unordered_set<std::string> busy_;
  /// Per route: the key after which the next reconcile pass lists.
  std::unordered_map<std::string, std::string> reconcile_after_;
};

} // namespace oncegate::gateway
