#include "actors/registry.hpp"

#include <unordered_map>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "common/errc.hpp"
#include "common/logging.hpp"

namespace oncegate {

std::string routing_key(const std::string& route, const std::string& key) {
  // Route names never contain NUL, so the pair maps to one string only.
  std::string result;
  result.reserve(route.size() + key.size() + 1);
  result += route;
  result += '\0';
  result += key;
  return result;
}

namespace {

struct child {
  key_actor hdl;
  /// Requests routed to `hdl`; compared with its own count on passivation.
  uint64_t routed = 0;
};

struct registry_state {
  persistence::store_actor store;
  registry_options opts;
  std::unordered_map<std::string, child> children;
  /// Which routing key a live actor serves, to forget it when it goes down.
  std::unordered_map<caf::actor_addr, std::string> by_addr;
  registry_stats stats;

  static inline const char* name = "oncegate.registry";
};

using registry_pointer = registry_actor::stateful_pointer<registry_state>;

// Returns the live actor of `(route, key)`, spawning it on a miss; null when
// the shard is at its limit.
child* find_or_spawn(registry_pointer self, const std::string& route,
                     const std::string& key) {
  auto& st = self->state;
  auto routing = routing_key(route, key);
  auto i = st.children.find(routing);
  if (i != st.children.end())
    return &i->second;
  if (st.children.size() >= st.opts.max_live_keys) {
    ++st.stats.rejected;
    return nullptr;
  }
  key_parent parent = caf::actor_cast<key_parent>(self);
  auto hdl = spawn_key_actor(self, std::move(parent), st.store, route, key,
                             routing, st.opts.key);
  st.by_addr.emplace(hdl.address(), routing);
  ++st.stats.spawned;
  return &st.children.emplace(std::move(routing), child{std::move(hdl), 0})
            .first->second;
}

registry_actor::behavior_type
registry_impl(registry_pointer self, persistence::store_actor store,
              registry_options opts) {
  self->state.store = std::move(store);
  self->state.opts = opts;
  // Key actors are monitored, not linked (links cost O(children) per exit):
  // stop them explicitly when the registry goes.
  self->set_exit_handler([self](const caf::exit_msg& msg) {
    for (auto& kv : self->state.children)
      self->send_exit(kv.second.hdl, msg.reason);
    self->quit(msg.reason);
  });
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& st = self->state;
    auto i = st.by_addr.find(msg.source);
    if (i == st.by_addr.end())
      return;
    auto j = st.children.find(i->second);
    // A crashed actor leaves here; one that passivated was removed already.
    if (j != st.children.end() && j->second.hdl.address() == msg.source)
      st.children.erase(j);
    st.by_addr.erase(i);
  });
  return {
    [self](claim_atom, claim_request& req)
      -> caf::delegated<claim_result> {
      auto c = find_or_spawn(self, req.route, req.key);
      if (!c) {
        auto rp = self->make_response_promise<claim_result>();
        rp.deliver(make_error(errc::overloaded, "too many live keys"));
        return {};
      }
      ++c->routed;
      return self->delegate(c->hdl, claim_atom::value, std::move(req));
    },
    [self](get_atom, const std::string& route,
           const std::string& key) -> caf::delegated<lookup_result> {
      auto& st = self->state;
      auto i = st.children.find(routing_key(route, key));
      if (i == st.children.end()) {
        // No live actor: all its writes committed, the store is current.
        return self->delegate(st.store, get_atom::value, route, key);
      }
      ++i->second.routed;
      return self->delegate(i->second.hdl, get_atom::value);
    },
    [self](idle_atom, const std::string& routing, uint64_t handled) {
      auto& st = self->state;
      auto i = st.children.find(routing);
      if (i == st.children.end()
          || i->second.hdl.address() != self->current_sender())
        return true; // not the live child: nothing routes to it any more
      if (i->second.routed != handled)
        return false; // requests are queued in its mailbox
      st.children.erase(i);
      ++st.stats.passivated;
      return true;
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
