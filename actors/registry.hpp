#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/key_actor.hpp"
#include "common/atoms.hpp"
#include "common/record.hpp"
#include "persistence/store_actor.hpp"

namespace oncegate {

/// Counters of one registry shard.
struct registry_stats {
  uint64_t live = 0;
  uint64_t spawned = 0;
  uint64_t passivated = 0;
  uint64_t rejected = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, registry_stats& x) {
  return f(caf::meta::type_name("registry_stats"), x.live, x.spawned,
           x.passivated, x.rejected);
}

/// Routes `(route, key)` to its key actor: spawns one on a miss, lets idle
/// ones go, and forgets those that terminate.
///
/// Idleness is tracked here, not with a timer per key: live actors sit in a
/// list ordered by their last routed request (one splice per request), and
/// one sweep timer per shard takes those idle for `idle_timeout` off the
/// front. A swept actor is removed from the map and sent `idle` in the same
/// step, so the message queues behind every request routed to it: it answers
/// them all, then quits. A later request spawns a fresh actor, which reads
/// the store (cold start). Should that overlap with the old actor's last
/// store request, the store's serial, conditional claims still grant at most
/// one of them.
using registry_actor = caf::typed_actor<
  /// Routes a claim to the key's actor (delegated: the actor answers).
  caf::replies_to<claim_atom, claim_request>::with<claim_result>,
  /// Routes a state change to the key's actor.
  caf::replies_to<update_atom, record_update>::with<update_result>,
  /// Routes a lookup to the key's actor, or to the store when none is live.
  caf::replies_to<get_atom, std::string, std::string>::with<lookup_result>,
  /// The idle sweep (sent by the shard to itself).
  caf::reacts_to<idle_atom>,
  /// Lets every live key actor go (each answers what it holds, then quits):
  /// sent when this node's leadership changes, so no cached record outlives
  /// a term in which another node may have changed it.
  caf::reacts_to<reset_atom>,
  /// Answers the counters.
  caf::replies_to<stats_atom>::with<registry_stats>>;

/// Options of a registry shard.
struct registry_options {
  /// Live key actors at most in this shard; beyond, claims fail with
  /// `errc::overloaded` (503) until idle ones leave.
  uint64_t max_live_keys = 1'000'000;
  key_actor_options key;
};

/// Spawns a registry shard whose key actors use `store`.
registry_actor spawn_registry(caf::actor_system& sys,
                              persistence::store_actor store,
                              registry_options opts);

} // namespace oncegate
