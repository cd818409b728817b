#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include "actors/alarm_actor.hpp"
#include "actors/registry.hpp"
#include "persistence/sqlite_store.hpp"
#include "persistence/store_actor.hpp"

namespace oncegate {

/// Everything a single node runs below the gateway.
struct node_options {
  /// Directory of the database file (`oncegate.db`); created if missing.
  std::string data_dir = "./data";
  persistence::store_options store;
  persistence::store_actor_options store_actor;
  registry_options registry;
  /// Registry shards; a key always maps to the same shard.
  uint32_t registry_shards = 1;
  alarm_options alarm;
  /// Spawn the store detached (`store.on-scheduler = false`; the node's
  /// configuration sets it). Tests with a deterministic scheduler set this
  /// to false and leave `commit_thread` off.
  bool detached_store = true;
  /// A single node's store on the scheduler commits on a thread of the
  /// sink's own, or on the HTTP thread that asks when it runs the actors
  /// it wakes (`persistence::local_sink` with a reader connection). Off:
  /// the store commits on its own turn (detached, or in tests with a
  /// deterministic scheduler).
  bool commit_thread = false;
  /// Told the store's clock (`sqlite_store::clock_ms`) once the database is
  /// open, before anything is decided: the node's clock moves forward to it
  /// when it is behind (a start with a clock that was set back), so that
  /// time keeps running from the last time the store saw instead of
  /// standing still until the clock catches up.
  std::function<void(int64_t)> on_store_clock;
};

/// Handles of one node's actors.
class node {
public:
  persistence::store_actor store;
  std::vector<registry_actor> registries;
  alarm_actor alarm;

  /// Returns the registry shard that owns `(route, key)`.
  const registry_actor& shard_for(const std::string& route,
                                  const std::string& key) const;

  /// Stops the alarm, the registries (and with them every key actor), then
  /// the store, which commits what it holds before it exits.
  void shutdown();
};

/// Creates `opts.data_dir` and fills in `opts.store.path` (its
/// `oncegate.db`) when unset.
caf::error prepare_data_dir(node_options& opts);

/// Spawns the actors above `store` (registry shards, alarm): shared by the
/// single node and the cluster node, whose store is replicated.
node spawn_node_actors(caf::actor_system& sys, persistence::store_actor store,
                       const node_options& opts, wall_clock_fn now);

/// Opens the database under `opts.data_dir` and spawns the node's actors.
/// Fails when the directory or the database cannot be opened.
caf::expected<node> start_node(caf::actor_system& sys, node_options opts,
                               wall_clock_fn now = wall_clock_ms);

} // namespace oncegate
