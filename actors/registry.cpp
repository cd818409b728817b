#include "actors/registry.hpp"

#include <list>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "common/errc.hpp"
#include "common/incremental_map.hpp"
#include "common/logging.hpp"
#include "common/stage_trace.hpp"

namespace oncegate {

namespace {

struct child;
/// Grows without a stop-the-world rehash (a claim waited 57-209 ms behind
/// std::unordered_map's at 100k-500k live keys).
using child_map = incremental_map<std::string, child>;
/// Elements never move, so the list can point at them.
using lru_list = std::list<child_map::value_type*>;

struct child {
  key_actor hdl;
  /// Position in the idle list; the back is the most recently routed.
  lru_list::iterator pos;
  caf::actor_clock::time_point last_routed;
};

struct registry_state {
  persistence::store_actor store;
  registry_options opts;
  child_map children;
  lru_list lru;
  /// Which entry a live actor is, to forget it when it goes down (by actor
  /// id: no second copy of the key per live actor).
  incremental_map<caf::actor_id, child_map::value_type*> by_id;
  bool sweep_armed = false;
  registry_stats stats;

  static inline const char* name = "oncegate.registry";

  void forget(child_map::value_type* entry) {
    by_id.erase(entry->second.hdl.id());
    lru.erase(entry->second.pos);
    children.erase(entry->first);
  }
};

using registry_pointer = registry_actor::stateful_pointer<registry_state>;

// The sweep runs every quarter idle timeout while actors are live (an actor
// leaves between 1 and 1.25 idle timeouts after its last request), and not
// at all when none are.
void arm_sweep(registry_pointer self) {
  auto& st = self->state;
  if (st.sweep_armed || st.children.empty())
    return;
  st.sweep_armed = true;
  self->delayed_send(self, st.opts.key.idle_timeout / 4, idle_atom::value);
}

void sweep(registry_pointer self) {
  auto& st = self->state;
  st.sweep_armed = false;
  auto now = self->clock().now();
  while (!st.lru.empty()) {
    auto entry = st.lru.front();
    if (now - entry->second.last_routed < st.opts.key.idle_timeout)
      break;
    self->send(entry->second.hdl, idle_atom::value);
    ++st.stats.passivated;
    st.forget(entry);
  }
  arm_sweep(self);
}

// Returns the live actor of `(route, key)`, spawning it on a miss, and marks
// it as just used; null when the shard is at its limit.
child* route_to(registry_pointer self, const std::string& route,
                const std::string& key) {
  auto& st = self->state;
  auto now = self->clock().now();
  auto routing = routing_key(route, key);
  if (auto i = st.children.find(routing)) {
    auto& c = i->second;
    st.lru.splice(st.lru.end(), st.lru, c.pos);
    c.last_routed = now;
    return &c;
  }
  if (st.children.size() >= st.opts.max_live_keys) {
    ++st.stats.rejected;
    return nullptr;
  }
  auto hdl = spawn_key_actor(self, st.store, route, key, st.opts.key);
  ++st.stats.spawned;
  auto id = hdl.id();
  auto& entry = *st.children.emplace(std::move(routing),
                                     child{std::move(hdl), {}, now})
                   .first;
  entry.second.pos = st.lru.insert(st.lru.end(), &entry);
  st.by_id.emplace(id, &entry);
  arm_sweep(self);
  return &entry.second;
}

// Hands `msg` (a claim or an update) to the actor of its key, spawned on a
// miss; refuses it when no actor may be spawned.
template <class Result, class Atom, class Msg>
caf::delegated<Result> to_key(registry_pointer self, Atom atom, Msg& msg) {
  auto c = route_to(self, msg.route, msg.key);
  if (!c) {
    auto rp = self->make_response_promise<Result>();
    rp.deliver(make_error(errc::overloaded, "too many live keys"));
    return {};
  }
  return self->delegate(c->hdl, atom, std::move(msg));
}

registry_actor::behavior_type
registry_impl(registry_pointer self, persistence::store_actor store,
              registry_options opts) {
  self->state.store = std::move(store);
  self->state.opts = opts;
  // Key actors are monitored, not linked (links cost O(children) per exit):
  // stop them explicitly when the registry goes.
  self->set_exit_handler([self](const caf::exit_msg& msg) {
    self->state.children.for_each(
      [&](auto& kv) { self->send_exit(kv.second.hdl, msg.reason); });
    self->quit(msg.reason);
  });
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& st = self->state;
    // A crashed actor leaves here; one that was swept is gone already (and a
    // successor under the same key has another id).
    auto i = st.by_id.find(msg.source.id());
    if (!i)
      return;
    log::actors()->warn("registry.child_down reason={}",
                        self->system().render(msg.reason));
    st.forget(i->second);
  });
  return {
    [self](claim_atom atom, claim_request& req) {
      stage_trace::mark("registry.claim");
      return to_key<claim_result>(self, atom, req);
    },
    [self](update_atom atom, record_update& upd) {
      return to_key<update_result>(self, atom, upd);
    },
    [self](get_atom, const std::string& route,
           const std::string& key) -> caf::delegated<lookup_result> {
      auto& st = self->state;
      auto i = st.children.find(routing_key(route, key));
      if (!i) {
        // No live actor: its writes all committed, the store is current.
        return self->delegate(st.store, get_atom::value, route, key);
      }
      return self->delegate(i->second.hdl, get_atom::value);
    },
    [self](idle_atom) { sweep(self); },
    [self](reset_atom) {
      auto& st = self->state;
      st.children.for_each(
        [&](auto& kv) { self->send(kv.second.hdl, idle_atom::value); });
      st.stats.passivated += st.children.size();
      st.children.clear();
      st.lru.clear();
      st.by_id.clear();
    },
    [self](stats_atom) {
      auto res = self->state.stats;
      res.live = self->state.children.size();
      return res;
    },
  };
}

} // namespace

registry_actor spawn_registry(caf::actor_system& sys,
                              persistence::store_actor store,
                              registry_options opts) {
  return sys.spawn(registry_impl, std::move(store), opts);
}

} // namespace oncegate
