#include "api/redelivery.hpp"

#include <algorithm>
#include <random>
#include <utility>

#include "common/logging.hpp"

namespace oncegate::gateway {

namespace {

uint64_t fresh_request_id() {
  // Unique per attempt, never 0 (0 means "any" to the store's fences).
  thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t id = 0;
  while (id == 0)
    id = rng();
  return id;
}

} // namespace

redelivery::redelivery(node_service& node, forwarder& fwd,
                       const route_table& routes, wall_clock_fn now,
                       redelivery_options opts)
  : node_(node), fwd_(fwd), routes_(routes), now_(std::move(now)),
    opts_(opts) {
  // nop
}

void redelivery::start() {
  schedule(std::chrono::milliseconds(0));
}

void redelivery::stop() {
  stopped_ = true;
}

void redelivery::schedule(std::chrono::milliseconds delay) {
  if (stopped_)
    return;
  fwd_.after(delay, [this] { tick(); });
}

void redelivery::tick() {
  if (stopped_)
    return;
  auto turn = node_.delivery();
  if (!turn.mine || running_ >= opts_.max_running) {
    schedule(opts_.idle_sleep);
    return;
  }
  node_.due(now_(), opts_.batch, [this, turn](reply<delivery_queue> rep) {
    // Back on the upstream client's thread: busy_ is touched there only.
    auto shared = std::make_shared<reply<delivery_queue>>(std::move(rep));
    fwd_.after(std::chrono::milliseconds(0),
               [this, shared, turn] { take(std::move(*shared), turn); });
  });
}

void redelivery::take(reply<delivery_queue> rep,
                      node_service::delivery_turn turn) {
  if (stopped_)
    return;
  if (!rep.ok) {
    log::gateway()->warn("delivery.queue_unreadable error={}", rep.detail);
    schedule(opts_.idle_sleep);
    return;
  }
  auto& q = rep.value;
  auto now = now_();
  std::size_t started = 0;
  for (auto& rec : q.due) {
    if (running_ >= opts_.max_running)
      break;
    auto routing = routing_key(rec.route, rec.key);
    if (busy_.count(routing) != 0)
      continue;
    auto route = routes_.by_name(rec.route);
    if (route == nullptr || !route->upstream) {
      // The route was removed or lost its upstream since the claim: the
      // record waits for the operator (it stays queued, then fails).
      log::gateway()->warn("delivery.no_upstream route={}", rec.route);
      continue;
    }
    busy_.insert(routing);
    ++running_;
    ++started;
    if (now >= rec.deliver_by_ms) {
      record_update upd;
      upd.route = rec.route;
      upd.key = rec.key;
      upd.op = transition::fail;
      upd.first_seen_ms = rec.first_seen_ms;
      upd.now_ms = now;
      node_.update(std::move(upd), [this, routing, route = rec.route,
                                    attempts = rec.attempts](
                                     reply<update_result> res) {
        if (res.ok && res.value.applied)
          log::gateway()->warn("delivery.failed route={} attempts={} "
                               "(past the delivery deadline)",
                               route, attempts);
        fwd_.after(std::chrono::milliseconds(0),
                   [this, routing] { finished(routing); });
      });
      continue;
    }
    attempt(std::move(rec), *route, turn);
  }
  // More may be due: look again at once; otherwise when the next one is.
  if (started > 0 && q.due.size() == opts_.batch) {
    schedule(std::chrono::milliseconds(0));
    return;
  }
  auto sleep = opts_.max_sleep;
  if (q.next_ms >= 0)
    sleep = std::clamp(std::chrono::milliseconds(q.next_ms - now),
                       std::chrono::milliseconds(0), opts_.max_sleep);
  schedule(sleep);
}

void redelivery::attempt(record rec, const route_config& route,
                         node_service::delivery_turn turn) {
  auto routing = routing_key(rec.route, rec.key);
  record_update start;
  start.route = rec.route;
  start.key = rec.key;
  start.op = transition::start_attempt;
  start.first_seen_ms = rec.first_seen_ms;
  start.attempt = rec.attempts + 1;
  start.owner = turn.node_id;
  start.request_id = fresh_request_id();
  start.now_ms = now_();
  auto job = std::make_shared<forward_job>();
  job->route = rec.route;
  job->route_index = routes_.index_of(route);
  job->target = &*route.upstream;
  job->key.value = rec.key;
  job->first_seen_ms = rec.first_seen_ms;
  job->body = std::move(rec.signal);
  job->content_type = std::move(rec.signal_type);
  job->attempt = start.attempt;
  job->request_id = start.request_id;
  job->delivery = &route.delivery;
  job->term = turn.term;
  // Durable before it is sent: the one rule that keeps a queued signal at
  // most once (a node that dies after sending leaves it in flight).
  node_.update(std::move(start), [this, job, routing](
                                   reply<update_result> res) mutable {
    bool mine = res.ok && res.value.applied && res.value.current.found
                && res.value.current.rec.state == record_state::in_flight
                && res.value.current.rec.request_id == job->request_id;
    if (!mine) {
      fwd_.after(std::chrono::milliseconds(0),
                 [this, routing] { finished(routing); });
      return;
    }
    log::gateway()->info("delivery.attempt route={} attempt={} term={}",
                         job->route, job->attempt, job->term);
    fwd_.forward(std::move(*job), [this, routing](forward_result) {
      fwd_.after(std::chrono::milliseconds(0),
                 [this, routing] { finished(routing); });
    });
  });
}

void redelivery::finished(const std::string& routing) {
  busy_.erase(routing);
  std::lock_guard<std::mutex> guard{mtx_};
  if (--running_ == 0)
    idle_.notify_all();
}

std::size_t redelivery::wait(std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> guard{mtx_};
  idle_.wait_for(guard, bound, [this] { return running_ == 0; });
  return running_;
}

} // namespace oncegate::gateway
