#include "api/redelivery.hpp"

#include <algorithm>
#include <random>
#include <utility>

#include "api/idempotency_key.hpp"
#include "api/url.hpp"
#include "common/logging.hpp"
#include "common/mutant.hpp"

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
                       gateway_metrics& metrics, const route_table& routes,
                       wall_clock_fn now, redelivery_options opts)
  : node_(node), fwd_(fwd), metrics_(metrics), routes_(routes),
    now_(std::move(now)), opts_(opts) {
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
  reconcile_pass(turn);
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
  // The fence of the record's own partition (a cluster node may lead some
  // partitions and not others; the queue it read holds only its own).
  turn = node_.delivery_of(rec.route, rec.key);
  if (!turn.mine) {
    fwd_.after(std::chrono::milliseconds(0),
               [this, routing] { finished(routing); });
    return;
  }
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
  job->deliver_by_ms = rec.deliver_by_ms;
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


void redelivery::reconcile_pass(node_service::delivery_turn turn) {
  for (auto& route : routes_.routes) {
    if (!route.reconcile.target || !route.upstream)
      continue;
    auto& after = reconcile_after_[route.name];
    node_.list(route.name, record_state::in_doubt, after, opts_.batch,
               [this, turn, name = route.name](reply<record_page> rep) {
                 auto shared = std::make_shared<reply<record_page>>(
                   std::move(rep));
                 fwd_.after(std::chrono::milliseconds(0), [this, turn, name,
                                                           shared] {
                   if (stopped_ || !shared->ok)
                     return;
                   auto route = routes_.by_name(name);
                   if (route == nullptr)
                     return;
                   reconcile_after_[name] = shared->value.next_after;
                   for (auto& rec : shared->value.records)
                     reconcile(std::move(rec), *route, turn);
                 });
               });
  }
}

void redelivery::reconcile(record rec, const route_config& route,
                           node_service::delivery_turn turn) {
  auto& policy = route.reconcile;
  auto now = now_();
  // The first question waits `after` from the attempt's start (a request
  // still on its way lands first); later ones come when the last said.
  auto due = rec.reconciles == 0
               ? std::max(rec.first_seen_ms, rec.next_attempt_ms)
                   + policy.after.count()
               : rec.next_attempt_ms;
  if (now < due || rec.reconciles >= policy.attempts
      || running_ >= opts_.max_running)
    return;
  // Only the ready leader of the record's partition asks (the list holds
  // every partition's records).
  turn = node_.delivery_of(rec.route, rec.key);
  if (!turn.mine)
    return;
  auto sent_key = forwarded_key(rec.key);
  // A key that a normaliser could turn into another path is never asked
  // about: that path's 404 would read as "absent" and deliver it again.
  // It stays in doubt for the operator.
  auto segment = stable_path_segment(sent_key);
  if (!segment) {
    metrics_.count_reconcile_skipped(routes_.index_of(route));
    log::gateway()->debug("delivery.reconcile_skipped route={} "
                          "reason=key-not-path-safe",
                          rec.route);
    return;
  }
  auto routing = routing_key(rec.route, rec.key);
  if (busy_.count(routing) != 0)
    return;
  busy_.insert(routing);
  ++running_;
  upstream_request req;
  req.get = true;
  req.path = policy.path_prefix + *segment + policy.path_suffix;
  req.idempotency_key = std::move(sent_key);
  req.attempt = std::to_string(turn.term) + "." + std::to_string(rec.attempts);
  log::gateway()->info("delivery.reconcile route={} attempt={} asked={}",
                       rec.route, rec.attempts, rec.reconciles + 1);
  auto shared = std::make_shared<record>(std::move(rec));
  fwd_.ask(*policy.target, std::move(req),
           [this, shared, name = route.name, routing](upstream_result res) {
             auto route = routes_.by_name(name);
             if (route != nullptr)
               settle(*shared, *route, res);
             fwd_.after(std::chrono::milliseconds(0),
                        [this, routing] { finished(routing); });
           });
}

void redelivery::settle(const record& rec, const route_config& route,
                        const upstream_result& res) {
  auto now = now_();
  record_update upd;
  upd.route = rec.route;
  upd.key = rec.key;
  upd.first_seen_ms = rec.first_seen_ms;
  const char* verdict = "unknown";
  if (res.outcome == upstream_result::kind::response && res.status == 200) {
    // The order exists: its answer is the outcome, nothing is sent again.
    verdict = "found";
    upd.op = transition::complete;
    upd.status = 200;
    upd.headers = res.content_type.empty()
                    ? std::string{}
                    : "Content-Type: " + res.content_type;
    upd.response = res.body;
  } else if (res.outcome == upstream_result::kind::response
             && (res.status == 404
                 || (res.status >= 400 && res.status < 500
                     // mutant: any 4xx read as "absent"
                     && ONCEGATE_MUTANT("reconcile-4xx-absent")))) {
    // It certainly does not: deliver it now, once, through the queue.
    verdict = "absent";
    upd.op = transition::requeue;
    upd.now_ms = now;
    upd.deliver_by_ms = now + route.delivery.deadline.count();
  } else {
    upd.op = transition::reconcile_wait;
    upd.now_ms = now;
    upd.next_attempt_ms = now + route.reconcile.interval.count();
  }
  log::gateway()->info("delivery.reconciled route={} verdict={} status={} "
                       "error={}",
                       rec.route, verdict, res.status, res.error);
  node_.update(std::move(upd), [](reply<update_result>) {});
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
