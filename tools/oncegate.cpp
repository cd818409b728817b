// oncegate: one node of the webhook idempotency gateway.
#include "app/node_main.hpp"

#ifndef ONCEGATE_VERSION
#  define ONCEGATE_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  oncegate::gateway::run_options ro;
  ro.version = ONCEGATE_VERSION;
  return oncegate::gateway::run_node(argc, argv, ro);
}
