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
/// Passivation is a hand-shake so that no request is lost and no second
/// actor for a key can read the store before the first one's writes
/// committed: the registry counts requests it routed to each actor, the
/// actor reports how many it handled, and the registry lets it go only when
/// both numbers match (nothing is in its mailbox), removing it from the map
/// in the same step.
using registry_actor = caf::typed_actor<
  /// Routes a claim to the key's actor (delegated: the actor answers).
  caf::replies_to<claim_atom, claim_request>::with<claim_result>,
  /// Routes a lookup to the key's actor, or to the store when none is live.
  caf::replies_to<get_atom, std::string, std::string>::with<lookup_result>,
  /// A key actor asks to leave: `(routing key, requests handled)`.
  caf::replies_to<idle_atom, std::string, uint64_t>::with<bool>,
  /// Answers the counters.
  caf::replies_to<stats_atom>::with<registry_stats>>;

/// Options of a registry shard.
struct registry_options {
  /// Live key actors at most in this shard; beyond, claims fail with
  /// `errc::overloaded` (503) until idle ones leave.
  uint64_t max_live_keys = 1'000'000;
  key_actor_options key;
};

/// Returns the string a registry indexes `(route, key)` by.
std::string routing_key(const std::string& route, const std::string& key);

/// Spawns a registry shard whose key actors use `store`.
registry_actor spawn_registry(caf::actor_system& sys,
                              persistence::store_actor store,
                              registry_options opts);

} // namespace oncegate
