// oncegate_unsafe: the node built BROKEN ON PURPOSE, for tests only. Its
// store answers claims before they are committed (see
// `store_actor_options::unsafe_ack_before_commit`). The drill suite runs it
// to prove that it catches a gateway that loses acknowledged decisions.
// Never installed, never shipped.
#include "gateway/node_main.hpp"

int main(int argc, char** argv) {
  oncegate::gateway::run_options ro;
  ro.version = "unsafe-test-build";
  ro.tweak = [](oncegate::node_options& n, oncegate::cluster::cluster_options*) {
    n.store_actor.unsafe_ack_before_commit = true;
  };
  return oncegate::gateway::run_node(argc, argv, ro);
}
