#include "actors/key_actor.hpp"

#include <optional>
#include <utility>

#include <caf/event_based_actor.hpp>
#include <caf/local_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "common/errc.hpp"

namespace oncegate {

namespace {

struct key_state {
  key_parent registry;
  persistence::store_actor store;
  std::string route;
  std::string key;
  std::string routing;
  key_actor_options opts;
  /// The committed record, when known. Empty: ask the store.
  std::optional<record> cached;
  /// Requests handled that the registry routed here (claims and gets).
  uint64_t handled = 0;
  /// Time of the last request, on the actor clock.
  caf::actor_clock::time_point last_active;
  /// Generation of the armed idle timer; 0 = none armed. Timers cannot be
  /// cancelled in CAF 0.17, so a stale one is recognised by its number.
  uint64_t timer_gen = 0;
  uint64_t next_gen = 1;

  static inline const char* name = "oncegate.key";
};

using key_pointer = key_actor::stateful_pointer<key_state>;

// Keeps at most one idle timer pending: a pending delayed message pins the
// actor's memory until it fires, so re-arming per request would keep every
// passivated actor alive for the whole idle timeout of its last request.
void touch(key_pointer self) {
  auto& st = self->state;
  st.last_active = self->clock().now();
  if (st.timer_gen == 0) {
    st.timer_gen = st.next_gen++;
    self->delayed_send(self, st.opts.idle_timeout, idle_atom::value,
                       st.timer_gen);
  }
}

// Answers a claim from the cached record, when it is live at the claim's
// own timestamp.
std::optional<claim_result> decide_cached(const key_state& st,
                                          const claim_request& req) {
  if (!st.cached || !live(*st.cached, req.now_ms))
    return std::nullopt;
  claim_result res;
  res.outcome = st.cached->fingerprint == req.fingerprint ? decision::duplicate
                                                          : decision::mismatch;
  res.rec = *st.cached;
  return res;
}

key_actor::behavior_type key_impl(key_pointer self, key_parent registry,
                                  persistence::store_actor store,
                                  std::string route, std::string key,
                                  std::string routing,
                                  key_actor_options opts) {
  auto& st = self->state;
  st.registry = std::move(registry);
  st.store = std::move(store);
  st.route = std::move(route);
  st.key = std::move(key);
  st.routing = std::move(routing);
  st.opts = opts;
  return {
    [self](claim_atom, claim_request& req) -> caf::result<claim_result> {
      auto& st = self->state;
      ++st.handled;
      touch(self);
      if (auto res = decide_cached(st, req))
        return std::move(*res);
      // `await` keeps every later request of this key in the mailbox until
      // the store answered: one decision at a time per key.
      auto rp = self->make_response_promise<claim_result>();
      self->request(st.store, st.opts.store_timeout, claim_atom::value,
                    std::move(req))
        .await(
          [self, rp](claim_result& res) mutable {
            self->state.cached = res.rec;
            rp.deliver(std::move(res));
          },
          [self, rp](caf::error& err) mutable {
            // Unknown outcome (the store may still commit after a timeout):
            // forget the cache so the next claim asks the store again.
            self->state.cached.reset();
            rp.deliver(std::move(err));
          });
      return rp;
    },
    [self](get_atom) -> caf::result<lookup_result> {
      auto& st = self->state;
      ++st.handled;
      touch(self);
      if (st.cached)
        return lookup_result{true, *st.cached};
      auto rp = self->make_response_promise<lookup_result>();
      self->request(st.store, st.opts.store_timeout, get_atom::value, st.route,
                    st.key)
        .await(
          [self, rp](lookup_result& res) mutable {
            if (res.found)
              self->state.cached = res.rec;
            rp.deliver(std::move(res));
          },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [self](idle_atom, uint64_t gen) {
      auto& st = self->state;
      if (gen != st.timer_gen)
        return; // stale timer
      st.timer_gen = 0;
      auto idle_for = self->clock().now() - st.last_active;
      if (idle_for < st.opts.idle_timeout) {
        st.timer_gen = st.next_gen++;
        self->delayed_send(self, st.opts.idle_timeout - idle_for,
                           idle_atom::value, st.timer_gen);
        return;
      }
      self->request(st.registry, caf::infinite, idle_atom::value, st.routing,
                    st.handled)
        .await(
          [self](bool approved) {
            if (approved) {
              self->quit();
              return;
            }
            touch(self); // requests are on their way: stay
          },
          [self](caf::error&) {
            self->quit(); // the registry is gone
          });
    },
  };
}

} // namespace

key_actor spawn_key_actor(caf::local_actor* parent, key_parent registry,
                          persistence::store_actor store, std::string route,
                          std::string key, std::string routing,
                          const key_actor_options& opts) {
  return parent->spawn<caf::monitored>(key_impl, std::move(registry),
                                       std::move(store), std::move(route),
                                       std::move(key), std::move(routing),
                                       opts);
}

} // namespace oncegate
