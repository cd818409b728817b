// oncegate: one node of the webhook idempotency gateway.
#include <csignal>
#include <iostream>

#include <caf/actor_system.hpp>

#include "actors/node.hpp"
#include "common/logging.hpp"
#include "gateway/gateway_actor.hpp"
#include "gateway/http_server.hpp"
#include "gateway/node_config.hpp"
#include "gateway/webhook_handler.hpp"

#ifndef ONCEGATE_VERSION
#  define ONCEGATE_VERSION "unknown"
#endif

using namespace oncegate;

int main(int argc, char** argv) {
  // A peer that closes early must cost an error code, not the process.
  std::signal(SIGPIPE, SIG_IGN);
  gateway::node_config cfg;
  if (auto err = cfg.parse(argc, argv)) {
    std::cerr << "oncegate: bad configuration: " << cfg.render(err) << '\n';
    return 2;
  }
  if (cfg.cli_helptext_printed)
    return 0;
  if (cfg.version) {
    std::cout << "oncegate " << ONCEGATE_VERSION << '\n';
    return 0;
  }
  if (auto problem = cfg.validate(); !problem.empty()) {
    std::cerr << "oncegate: bad configuration: " << problem << '\n';
    return 2;
  }
  std::string error;
  auto web = cfg.webhook_opts(gateway::process_env, error);
  if (!web) {
    std::cerr << "oncegate: bad configuration: " << error << '\n';
    return 2;
  }
  log::init(cfg.log_level);
  caf::actor_system sys{cfg};
  auto n = start_node(sys, cfg.node_opts());
  if (!n) {
    log::store()->critical("node.start_failed error={}", sys.render(n.error()));
    return 1;
  }
  auto exit_code = 0;
  {
    auto service = gateway::make_gateway_service(sys, *n, cfg.gateway_opts());
    gateway::webhook_handler handler{std::move(*web), *service};
    auto server = gateway::http_server::listen(cfg.http_opts(), handler,
                                               error);
    if (!server) {
      log::gateway()->critical("node.listen_failed error={}", error);
      exit_code = 1;
    } else {
      log::gateway()->info("node.ready http={}:{} data_dir={}", cfg.http_host,
                           server->port(), cfg.data_dir);
      // One machine-readable line on stdout for scripts and tests.
      std::cout << "oncegate ready http=" << cfg.http_host << ':'
                << server->port() << std::endl;
      server->run(true);
    }
  }
  // Every HTTP request is answered; now stop the actors. The store commits
  // what it holds before it exits, and the actor system waits for it.
  n->shutdown();
  log::gateway()->info("node.stopped");
  return exit_code;
}
