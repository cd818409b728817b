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

void gather_metrics(caf::event_based_actor* self,
                    const std::vector<node>& nodes, caf::timespan timeout,
                    std::function<void(node_metrics)> done) {
  struct pending {
    node_metrics result;
    size_t open = 0;
    bool first_store = true;
    std::function<void(node_metrics)> done;
    void finish() {
      if (--open == 0)
        done(std::move(result));
    }
  };
  auto st = std::make_shared<pending>();
  st->done = std::move(done);
  st->open = 1;
  auto fail = [st](caf::error&) {
    st->result.complete = false;
    st->finish();
  };
  // Every partition holds every pause: the first one's replica says them.
  if (!nodes.empty()) {
    ++st->open;
    self->request(nodes.front().store, timeout, pause_atom::value,
                  std::string{}, pause_op::read, int64_t{0})
      .then(
        [st](route_pauses& x) {
          st->result.paused = std::move(x);
          st->finish();
        },
        fail);
  }
  for (auto& n : nodes) {
    st->open += n.registries.size() + 2;
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
          auto& s = st->result.store;
          if (st->first_store) {
            st->first_store = false;
            s = std::move(x);
          } else {
            s.commits += x.commits;
            s.failed_commits += x.failed_commits;
            s.committed_ops += x.committed_ops;
            s.purged += x.purged;
            s.max_batch = std::max(s.max_batch, x.max_batch);
            s.commit_seconds.merge(x.commit_seconds);
            s.batch_size.merge(x.batch_size);
            for (auto& u : x.unsettled) {
              auto same = std::find_if(s.unsettled.begin(), s.unsettled.end(),
                                       [&u](const unsettled_count& v) {
                                         return v.route == u.route
                                                && v.state == u.state;
                                       });
              if (same != s.unsettled.end())
                same->count += u.count;
              else
                s.unsettled.push_back(std::move(u));
            }
          }
          st->finish();
        },
        fail);
    self->request(n.alarm, timeout, stats_atom::value)
      .then(
        [st](const alarm_stats& x) {
          auto& a = st->result.alarm;
          a.runs += x.runs;
          a.purged += x.purged;
          if (x.next_due_ms >= 0
              && (a.next_due_ms < 0 || x.next_due_ms < a.next_due_ms))
            a.next_due_ms = x.next_due_ms;
          st->finish();
        },
        fail);
  }
  st->finish();
}

void probe_store(caf::event_based_actor* self, const std::vector<node>& nodes,
                 caf::timespan timeout,
                 std::function<void(bool, std::string)> done) {
  // The first failure answers; all answered well: ready.
  struct pending {
    size_t open = 1;
    bool answered = false;
    std::function<void(bool, std::string)> done;
    void finish(bool ok, std::string why) {
      if (answered)
        return;
      if (!ok || --open == 0) {
        answered = true;
        done(ok, std::move(why));
      }
    }
  };
  auto st = std::make_shared<pending>();
  st->done = std::move(done);
  st->open = nodes.size() + 1;
  for (auto& n : nodes)
    self->request(n.store, timeout, ready_atom::value, timeout)
      .then([st](bool) { st->finish(true, {}); },
            [st](caf::error& err) {
              // Silent, or answering while a commit has not returned.
              if (err == caf::sec::request_timeout
                  || errc_of(err) == errc::store_unavailable)
                return st->finish(false, "store not answering");
              st->finish(false, "store commits failing: " + describe(err));
            });
  st->finish(true, {});
}

} // namespace oncegate::gateway
