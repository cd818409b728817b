#pragma once

#include <functional>
#include <string>

#include "actors/node.hpp"
#include "routing/cluster_node.hpp"

namespace oncegate::gateway {

/// How `run_node` is embedded in an executable.
struct run_options {
  /// Printed by `--version`.
  std::string version = "unknown";
  /// Changes the node's options after the configuration was read (the
  /// cluster's too, when it runs one; null otherwise). The product passes
  /// none; fault-injection test builds use it.
  std::function<void(node_options&, cluster::cluster_options*)> tweak;
};

/// The whole life of one node: parses the command line and the config file,
/// starts the actors (and Raft, with `cluster.id`), serves HTTP (HTTPS with
/// `http.tls-*`, reloaded on SIGHUP) until SIGINT or SIGTERM, shuts down
/// cleanly. Returns the process exit code: 0, 1 when
/// the node could not start, 2 for a bad configuration.
int run_node(int argc, char** argv, const run_options& ro);

} // namespace oncegate::gateway
