#include "api/forwarder.hpp"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "common/logging.hpp"

namespace oncegate::gateway {

namespace {

const char* to_string(upstream_result::kind x) {
  switch (x) {
    case upstream_result::kind::response:
      return "response";
    case upstream_result::kind::not_sent:
      return "not_sent";
    case upstream_result::kind::maybe_sent:
      break;
  }
  return "maybe_sent";
}

// The attempt of `job` at `now_ms`, without a retry time.
delivery_attempt attempt_of(const forward_job& job, int64_t now_ms) {
  delivery_attempt a;
  a.route = job.route;
  a.key = job.key.value;
  a.first_seen_ms = job.first_seen_ms;
  a.attempt = job.attempt;
  a.request_id = job.request_id;
  a.now_ms = now_ms;
  return a;
}

} // namespace

record_update outcome_update(const forward_job& job, const upstream_result& res,
                             int64_t now_ms, uint64_t random) {
  using kind = upstream_result::kind;
  // Anything this code does not know as certain is "maybe sent".
  auto d = res.outcome == kind::response   ? delivery::answered
           : res.outcome == kind::not_sent ? delivery::not_sent
                                           : delivery::maybe_sent;
  auto a = attempt_of(job, now_ms);
  if (job.delivery != nullptr && job.delivery->durable && job.attempt > 0)
    a.retry_at_ms = job.delivery->retry_at(now_ms, job.attempt, random);
  if (a.retry_at_ms != 0 && job.deliver_by_ms != 0)
    a.retry_at_ms = std::min(a.retry_at_ms, job.deliver_by_ms);
  if (d != delivery::answered)
    return after_delivery(a, d);
  return after_delivery(a, d, static_cast<uint16_t>(res.status),
                        res.content_type.empty()
                          ? std::string{}
                          : "Content-Type: " + res.content_type,
                        res.body);
}

forwarder::forwarder(node_service& node, gateway_metrics& metrics,
                     wall_clock_fn now)
  : node_(node),
    metrics_(metrics),
    now_(std::move(now)),
    upstream_(std::make_unique<upstream_client>()) {
  // nop
}

void forwarder::forward(forward_job job, settled_fn settled) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    ++running_;
  }
  upstream_request up;
  up.body = std::move(job.body);
  up.content_type = std::move(job.content_type);
  // Injective and a valid header value (see forwarded_key).
  up.idempotency_key = forwarded_key(job.key.value);
  // The fence of a durable delivery's attempt: the term it was started in
  // (a deposed leader's late attempt has a lower one) and its number.
  if (job.attempt > 0)
    up.attempt = std::to_string(job.term) + "." + std::to_string(job.attempt);
  auto target = job.target;
  upstream_->send(*target, std::move(up), [this, job = std::move(job),
                                           settled = std::move(settled)](
                                            upstream_result res) mutable {
    auto now = now_();
    thread_local std::mt19937_64 rng{std::random_device{}()};
    auto upd = outcome_update(job, res, now, rng());
    metrics_.count_upstream(job.route_index, static_cast<size_t>(res.outcome));
    log::gateway()->info("[C{}][R{}] upstream.{} route={} status={} "
                         "attempt={} error={}",
                         job.conn, job.req, to_string(res.outcome), job.route,
                         res.status, job.attempt, res.error);
    // The transition is made durable before the sender hears of it.
    node_.update(std::move(upd), [this, conn = job.conn, req = job.req,
                                  settled = std::move(settled),
                                  res = std::move(res)](
                                   reply<update_result> rep) mutable {
      if (!rep.ok)
        log::gateway()->error("[C{}][R{}] upstream.unrecorded error={}", conn,
                              req, rep.detail);
      settled(forward_result{std::move(res), std::move(rep)});
      recorded();
    });
  });
}

void forwarder::release_unsent(forward_job job) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    ++running_;
  }
  // No retry time: released, not deferred.
  auto upd = after_delivery(attempt_of(job, 0), delivery::not_sent);
  log::gateway()->warn("[C{}][R{}] upstream.abandoned route={} "
                       "reason=response-timeout",
                       job.conn, job.req, job.route);
  node_.update(std::move(upd), [this, conn = job.conn,
                                req = job.req](reply<update_result> rep) {
    if (!rep.ok)
      log::gateway()->error("[C{}][R{}] upstream.unrecorded error={}", conn,
                            req, rep.detail);
    recorded();
  });
}

void forwarder::after(std::chrono::milliseconds delay,
                      std::function<void()> fn) {
  upstream_->after(delay, std::move(fn));
}

void forwarder::ask(const upstream_target& target, upstream_request req,
                    std::function<void(upstream_result)> done) {
  upstream_->send(target, std::move(req), std::move(done));
}

void forwarder::recorded() {
  std::lock_guard<std::mutex> guard{mtx_};
  if (--running_ == 0)
    cv_.notify_all();
}

std::size_t forwarder::in_flight() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return running_;
}

std::size_t forwarder::wait(std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> guard{mtx_};
  cv_.wait_for(guard, bound, [this] { return running_ == 0; });
  return running_;
}

} // namespace oncegate::gateway
