// oncegate: one node of the webhook idempotency gateway, or, with `keys`,
// `cluster` or `help` first, the admin CLI that talks to a running node
// (cli/admin_cli.hpp, docs/cli.md).
#include "app/node_main.hpp"
#include "cli/admin_cli.hpp"

#ifndef ONCEGATE_VERSION
#  define ONCEGATE_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  if (oncegate::cli::wants_admin_cli(argc, argv))
    return oncegate::cli::run_admin_cli(argc, argv, ONCEGATE_VERSION);
  oncegate::gateway::run_options ro;
  ro.version = ONCEGATE_VERSION;
  return oncegate::gateway::run_node(argc, argv, ro);
}
