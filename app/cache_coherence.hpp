// The one place that knows what makes a cached decision stale above the
// store, and drops it: a release applied from the log (on every node, also
// one an operator made through another node), and a snapshot that replaced
// the whole database (its releases were never applied as entries here).
// The key actors' caches are reset by the cluster node itself on the same
// two events plus a change of leadership (routing/cluster_node.cpp); the
// HTTP side drops its own entry before it acknowledges an operator's
// release (api/admin_keys.cpp). Raft calls in on its own thread: nothing
// here blocks beyond one cache lock.
#pragma once

#include <mutex>
#include <vector>

#include "api/webhook_handler.hpp"
#include "persistence/command.hpp"

namespace oncegate::gateway {

class cache_coherence {
public:
  /// The HTTP handler whose decision cache to keep true (null: none yet,
  /// or gone at shutdown).
  void attach(webhook_handler* h);

  /// After an applied log entry: forgets every key it released.
  void applied(const std::vector<persistence::command>& cmds);

  /// After a snapshot replaced the database: forgets everything.
  void restored();

private:
  std::mutex mtx_;
  webhook_handler* handler_ = nullptr;
};

} // namespace oncegate::gateway
