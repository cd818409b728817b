// oncegate: one node of the webhook idempotency gateway.
#include <csignal>
#include <iostream>

#include <memory>
#include <mutex>
#include <optional>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>

#include "actors/node.hpp"
#include "cluster/cluster_node.hpp"
#include "common/logging.hpp"
#include "gateway/gateway_actor.hpp"
#include "gateway/http_server.hpp"
#include "gateway/node_config.hpp"
#include "gateway/webhook_handler.hpp"

#ifndef ONCEGATE_VERSION
#  define ONCEGATE_VERSION "unknown"
#endif

using namespace oncegate;

namespace {

// Where replicated releases drop cached decisions: the handler, once it
// exists (the Raft thread starts applying before it does).
struct release_sink {
  std::mutex mtx;
  gateway::webhook_handler* handler = nullptr;

  void apply(const std::vector<persistence::command>& cmds) {
    std::lock_guard<std::mutex> guard{mtx};
    if (handler == nullptr)
      return;
    for (auto& cmd : cmds)
      if (cmd.type == persistence::command::kind::update
          && cmd.update.op == transition::release)
        handler->forget_cached(cmd.update.route, cmd.update.key);
  }

  void attach(gateway::webhook_handler* h) {
    std::lock_guard<std::mutex> guard{mtx};
    handler = h;
  }
};

} // namespace

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
  std::optional<cluster::cluster_options> copts;
  if (cfg.clustered()) {
    copts = cfg.cluster_opts(error);
    if (!copts) {
      std::cerr << "oncegate: bad configuration: " << error << '\n';
      return 2;
    }
    cfg.load<caf::io::middleman>();
    // A hung peer (SIGSTOP, a frozen VM) is detected only with heartbeats.
    cfg.set("middleman.heartbeat-interval",
            caf::timespan{std::chrono::milliseconds(200)});
    cfg.set("middleman.connection-timeout",
            caf::timespan{std::chrono::seconds(1)});
  }
  log::init(cfg.log_level);
  caf::actor_system sys{cfg};
  auto sink = std::make_shared<release_sink>();
  std::optional<node> single;
  std::unique_ptr<cluster::cluster_node> clustered;
  std::unique_ptr<gateway::node_service> service;
  if (copts) {
    cluster::cluster_hooks hooks;
    hooks.on_applied = [sink](const std::vector<persistence::command>& cmds,
                              const std::vector<persistence::command_result>&) {
      sink->apply(cmds);
    };
    auto n = cluster::start_cluster_node(sys, cfg.node_opts(), *copts,
                                         std::move(hooks));
    if (!n) {
      log::store()->critical("node.start_failed error={}",
                             sys.render(n.error()));
      return 1;
    }
    clustered = std::move(*n);
    service = gateway::make_cluster_gateway_service(sys, *clustered,
                                                    cfg.gateway_opts());
  } else {
    auto n = start_node(sys, cfg.node_opts());
    if (!n) {
      log::store()->critical("node.start_failed error={}",
                             sys.render(n.error()));
      return 1;
    }
    single = std::move(*n);
    service = gateway::make_gateway_service(sys, *single, cfg.gateway_opts());
  }
  auto exit_code = 0;
  {
    gateway::webhook_handler handler{std::move(*web), *service};
    sink->attach(&handler);
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
    sink->attach(nullptr);
  }
  // Every HTTP request is answered; now stop the actors. The store commits
  // what it holds before it exits, and the actor system waits for it.
  service.reset();
  if (single)
    single->shutdown();
  if (clustered)
    clustered->shutdown();
  log::gateway()->info("node.stopped");
  return exit_code;
}
