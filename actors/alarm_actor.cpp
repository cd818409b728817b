#include "actors/alarm_actor.hpp"

#include <algorithm>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "common/errc.hpp"
#include "common/logging.hpp"

namespace oncegate {

namespace {

struct alarm_state {
  persistence::store_actor store;
  alarm_options opts;
  wall_clock_fn now;
  uint64_t gen = 0;
  alarm_stats stats;

  static inline const char* name = "oncegate.alarm";
};

using alarm_pointer = alarm_actor::stateful_pointer<alarm_state>;

void arm(alarm_pointer self, caf::timespan delay) {
  auto& st = self->state;
  auto gen = ++st.gen;
  if (delay <= caf::timespan::zero())
    self->send(self, tick_atom::value, gen);
  else
    self->delayed_send(self, delay, tick_atom::value, gen);
}

void run_purge(alarm_pointer self) {
  auto& st = self->state;
  ++st.stats.runs;
  self
    ->request(st.store, st.opts.store_timeout, purge_atom::value, st.now(),
              st.opts.chunk)
    .then(
      [self](const purge_result& res) {
        auto& st = self->state;
        st.stats.purged += res.purged;
        st.stats.next_due_ms = res.next_due_ms;
        if (res.purged > 0)
          log::actors()->debug("alarm.purged count={} next_due_ms={}",
                               res.purged, res.next_due_ms);
        if (res.purged >= st.opts.chunk) {
          arm(self, st.opts.chunk_pause); // more are due: next chunk
          return;
        }
        auto delay = st.opts.max_interval;
        if (res.next_due_ms >= 0) {
          // +1 ms: the purge takes records with expires_at <= now.
          auto due_in = std::chrono::milliseconds(res.next_due_ms - st.now()
                                                  + 1);
          delay = std::clamp<caf::timespan>(due_in, caf::timespan::zero(),
                                            st.opts.max_interval);
        }
        arm(self, delay);
      },
      [self](caf::error& err) {
        // Only a cluster's leader purges (through its log): followers' alarms
        // keep trying quietly, so they take over when elected.
        if (errc_of(err) == errc::not_leader)
          log::actors()->debug("alarm.purge_skipped reason=not_leader");
        else
          log::actors()->warn("alarm.purge_failed error={}",
                              self->system().render(err));
        arm(self, self->state.opts.retry);
      });
}

alarm_actor::behavior_type alarm_impl(alarm_pointer self,
                                      persistence::store_actor store,
                                      alarm_options opts, wall_clock_fn now) {
  auto& st = self->state;
  st.store = std::move(store);
  st.opts = opts;
  st.now = std::move(now);
  arm(self, caf::timespan::zero());
  return {
    [self](tick_atom, uint64_t gen) {
      if (gen == self->state.gen)
        run_purge(self);
    },
    [self](stats_atom) { return self->state.stats; },
  };
}

} // namespace

alarm_actor spawn_alarm(caf::actor_system& sys, persistence::store_actor store,
                        alarm_options opts, wall_clock_fn now) {
  return sys.spawn(alarm_impl, std::move(store), opts, std::move(now));
}

} // namespace oncegate
