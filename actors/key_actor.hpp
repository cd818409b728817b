#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "common/atoms.hpp"
#include "common/record.hpp"
#include "persistence/store_actor.hpp"

namespace oncegate {

/// One key's actor (a "durable object"): serialises every request for one
/// `(route, key)`, caches the key's committed record, and asks the store for
/// a durable decision whenever the cache cannot answer.
///
/// ~~~
///   spawned (cache unknown)
///      │ claim: store decides (await) ──> cache = committed record
///      v
///   ready ── claim, live cached record ──> duplicate / mismatch, no I/O
///      │ idle (from the registry, behind every request it routed here)
///      v
///   quit
/// ~~~
///
/// Key actors hold no timers: idleness is tracked by the registry, which
/// costs one list splice per request instead of one clock entry per actor
/// (a pending delayed message also pins its target's memory until it fires).
using key_actor = caf::typed_actor<
  /// Claims the key; answered once the decision is durable.
  caf::replies_to<claim_atom, claim_request>::with<claim_result>,
  /// Changes the key's record; answered once the change is durable.
  caf::replies_to<update_atom, record_update>::with<update_result>,
  /// Reads the key's record.
  caf::replies_to<get_atom>::with<lookup_result>,
  /// Leave memory: the registry routes nothing here any more.
  caf::reacts_to<idle_atom>>;

/// Options of key actors.
struct key_actor_options {
  /// A key actor with no request for this long leaves memory. Read by the
  /// registry (its sweep passivates idle actors); the key actor itself never
  /// times out.
  caf::timespan idle_timeout = std::chrono::seconds(30);
  /// A stored answer (headers and body) up to this many bytes is kept in
  /// the actor's memory; a larger one is not, and a duplicate that needs it
  /// asks the store. Bounds a live key's memory whatever the upstream
  /// answered.
  std::size_t max_cached_answer = 4096;
};

/// Spawns the actor of `(route, key)` as a monitored child of `parent`.
key_actor spawn_key_actor(caf::local_actor* parent,
                          persistence::store_actor store, std::string route,
                          std::string key, const key_actor_options& opts);

} // namespace oncegate
