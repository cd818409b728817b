#include "service/bridge.hpp"

#include "common/errc.hpp"

#include <algorithm>
#include <memory>

#include <caf/send.hpp>

namespace oncegate::gateway {

namespace {

caf::behavior bridge_impl(caf::event_based_actor* self) {
  return {
    [self](bridge_job& job) { job.run(self); },
  };
}

} // namespace

actor_bridge::actor_bridge(caf::actor_system& sys, std::size_t actors) {
  for (std::size_t i = 0; i < std::max<std::size_t>(actors, 1); ++i)
    actors_.push_back(sys.spawn(bridge_impl));
}

actor_bridge::~actor_bridge() {
  stop();
}

void actor_bridge::stop() {
  stopped_.store(true, std::memory_order_release);
  for (auto& hdl : actors_)
    caf::anon_send_exit(hdl, caf::exit_reason::user_shutdown);
}

void actor_bridge::post_later(caf::event_based_actor* self,
                              caf::timespan delay, job fn) {
  self->delayed_send(self, delay, bridge_job{std::move(fn)});
}

void actor_bridge::post(job fn) {
  auto i = next_.fetch_add(1, std::memory_order_relaxed) % actors_.size();
  caf::anon_send(actors_[i], bridge_job{std::move(fn)});
}

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

void probe_store(caf::event_based_actor* self, const node& n,
                 caf::timespan timeout,
                 std::function<void(bool, std::string)> done) {
  self->request(n.store, timeout, ready_atom::value)
    .then([done](bool) { done(true, {}); },
          [done](caf::error& err) {
            if (err == caf::sec::request_timeout)
              return done(false, "store not answering");
            done(false, "store commits failing: " + describe(err));
          });
}

} // namespace oncegate::gateway
