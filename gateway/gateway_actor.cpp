#include "gateway/gateway_actor.hpp"

#include <atomic>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

namespace oncegate::gateway {

namespace {

// A unit of work handed over by an asio thread: runs inside the gateway
// actor. Local only (it carries callbacks).
struct gateway_job {
  std::function<void(caf::event_based_actor*)> run;
};

} // namespace

} // namespace oncegate::gateway

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(oncegate::gateway::gateway_job)

namespace oncegate::gateway {

namespace {

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

// Requests `xs...` from `hdl` and maps the answer to a `reply<T>`.
template <class T, class Handle, class Timeout, class... Ts>
void ask(caf::event_based_actor* self, const Handle& hdl, Timeout timeout,
         std::function<void(reply<T>)> done, Ts&&... xs) {
  self->request(hdl, timeout, std::forward<Ts>(xs)...)
    .then(
      [done](T& value) {
        reply<T> res;
        res.ok = true;
        res.value = std::move(value);
        done(std::move(res));
      },
      [self, done](caf::error& err) {
        done(failure<T>(self->system(), err));
      });
}

// Collects the counters of every actor; answers once all replied or failed.
void gather_metrics(caf::event_based_actor* self, const node& n,
                    caf::timespan timeout,
                    std::function<void(node_metrics)> done) {
  struct pending {
    node_metrics result;
    size_t open = 0;
    std::function<void(node_metrics)> done;
    void finish() {
      if (--open == 0)
        done(std::move(result));
    }
  };
  auto st = std::make_shared<pending>();
  st->done = std::move(done);
  st->open = n.registries.size() + 2;
  auto fail = [st](caf::error&) {
    st->result.complete = false;
    st->finish();
  };
  for (auto& shard : n.registries)
    self->request(shard, timeout, stats_atom::value)
      .then(
        [st](const registry_stats& x) {
          auto& r = st->result.registry;
          r.live += x.live;
          r.spawned += x.spawned;
          r.passivated += x.passivated;
          r.rejected += x.rejected;
          st->finish();
        },
        fail);
  self->request(n.store, timeout, stats_atom::value)
    .then(
      [st](persistence::store_stats& x) {
        st->result.store = std::move(x);
        st->finish();
      },
      fail);
  self->request(n.alarm, timeout, stats_atom::value)
    .then(
      [st](const alarm_stats& x) {
        st->result.alarm = x;
        st->finish();
      },
      fail);
}

caf::behavior gateway_impl(caf::event_based_actor* self) {
  return {
    [self](gateway_job& job) { job.run(self); },
  };
}

class gateway_service : public node_service {
public:
  gateway_service(caf::actor_system& sys, const node& n,
                  gateway_actor_options opts)
    : node_(n), opts_(opts) {
    for (size_t i = 0; i < std::max<size_t>(opts.actors, 1); ++i)
      actors_.push_back(sys.spawn(gateway_impl));
  }

  ~gateway_service() override {
    for (auto& hdl : actors_)
      caf::anon_send_exit(hdl, caf::exit_reason::user_shutdown);
  }

  void claim(claim_request req,
             std::function<void(reply<claim_result>)> done) override {
    post([this, req = std::move(req),
          done = std::move(done)](caf::event_based_actor* self) mutable {
      auto& shard = node_.shard_for(req.route, req.key);
      ask<claim_result>(self, shard, caf::infinite, std::move(done),
                        claim_atom::value, std::move(req));
    });
  }

  void update(record_update upd,
              std::function<void(reply<update_result>)> done) override {
    post([this, upd = std::move(upd),
          done = std::move(done)](caf::event_based_actor* self) mutable {
      auto& shard = node_.shard_for(upd.route, upd.key);
      ask<update_result>(self, shard, caf::infinite, std::move(done),
                         update_atom::value, std::move(upd));
    });
  }

  void lookup(std::string route, std::string key,
              std::function<void(reply<lookup_result>)> done) override {
    post([this, route = std::move(route), key = std::move(key),
          done = std::move(done)](caf::event_based_actor* self) mutable {
      auto& shard = node_.shard_for(route, key);
      ask<lookup_result>(self, shard, caf::infinite, std::move(done),
                         get_atom::value, std::move(route), std::move(key));
    });
  }

  void list(std::string route, record_state state, std::string after,
            uint32_t limit,
            std::function<void(reply<record_page>)> done) override {
    post([this, route = std::move(route), state, after = std::move(after),
          limit,
          done = std::move(done)](caf::event_based_actor* self) mutable {
      ask<record_page>(self, node_.store, caf::infinite, std::move(done),
                       list_atom::value, std::move(route), state,
                       std::move(after), limit);
    });
  }

  void metrics(std::function<void(node_metrics)> done) override {
    post([this, done = std::move(done)](caf::event_based_actor* self) {
      gather_metrics(self, node_, opts_.probe_timeout, done);
    });
  }

  void ready(std::function<void(bool, std::string)> done) override {
    post([this, done = std::move(done)](caf::event_based_actor* self) {
      self->request(node_.store, opts_.probe_timeout, next_atom::value)
        .then([done](int64_t) { done(true, {}); },
              [done](caf::error&) { done(false, "store not answering"); });
    });
  }

private:
  void post(std::function<void(caf::event_based_actor*)> fn) {
    auto i = next_.fetch_add(1, std::memory_order_relaxed) % actors_.size();
    caf::anon_send(actors_[i], gateway_job{std::move(fn)});
  }

  node node_;
  gateway_actor_options opts_;
  std::vector<caf::actor> actors_;
  std::atomic<size_t> next_{0};
};

} // namespace

std::unique_ptr<node_service>
make_gateway_service(caf::actor_system& sys, const node& n,
                     gateway_actor_options opts) {
  return std::make_unique<gateway_service>(sys, n, opts);
}

} // namespace oncegate::gateway
