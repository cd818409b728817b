// claim_bench: claims through the real actors and SQLite store, in process.
//
// Measures what the HTTP layer cannot hide: registry -> key actor -> store
// (group commit, fsync) -> reply. Used to pick the CAF scheduler policy and
// thread count, and the registry shard count. Every run is bounded by
// --requests.
//
//   claim_bench --mode=unique --clients=64 --requests=50000
//   claim_bench --scheduler.policy='stealing' --mode=hot
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/messages.hpp"
#include "actors/node.hpp"
#include "common/sha256.hpp"

using namespace oncegate;
using clock_type = std::chrono::steady_clock;

namespace {

struct bench_config : caf::actor_system_config {
  std::string mode = "unique";
  size_t clients = 64;
  size_t requests = 50'000;
  size_t shards = 1;
  std::string dir = "/tmp/oncegate-bench";

  bench_config() {
    register_types(*this);
    set_scheduler_defaults(*this); // the node's; override on the CLI
    opt_group{custom_options_, "global"}
      .add(mode, "mode", "unique (every claim a new key) or hot (one key)")
      .add(clients, "clients", "requests kept outstanding")
      .add(requests, "requests", "claims in total")
      .add(shards, "shards", "registry shards")
      .add(dir, "dir", "scratch directory (wiped)");
  }
};

using done_atom = caf::atom_constant<caf::atom("done")>;

// One client: sends its share of claims one after another and records the
// latency of each.
caf::behavior client(caf::event_based_actor* self, const node* n,
                     std::string mode, size_t id, size_t count,
                     std::vector<double>* latencies, caf::actor parent) {
  auto next = std::make_shared<size_t>(0);
  auto fp = sha256("{}");
  auto send_one = std::make_shared<std::function<void()>>();
  *send_one = [=] {
    if (*next == count) {
      self->send(parent, done_atom::value);
      self->quit();
      return;
    }
    claim_request req;
    req.route = "bench";
    req.key = mode == "hot" ? std::string{"hot"}
                            : "k" + std::to_string(id) + "-"
                                + std::to_string(*next);
    req.fingerprint = fp;
    req.now_ms = wall_clock_ms();
    req.ttl_ms = 3'600'000;
    req.status = 200;
    req.response = R"({"status":"accepted"})";
    req.signal = "{}";
    ++*next;
    auto start = clock_type::now();
    auto& shard = n->shard_for(req.route, req.key);
    self->request(shard, std::chrono::seconds(30), claim_atom::value, req)
      .then(
        [=](const claim_result&) {
          latencies->push_back(
            std::chrono::duration<double, std::micro>(clock_type::now()
                                                      - start)
              .count());
          (*send_one)();
        },
        [=](caf::error& err) {
          std::cerr << "claim failed: " << to_string(err) << '\n';
          (*send_one)();
        });
  };
  (*send_one)();
  return {[](caf::unit_t) {}};
}

double percentile(std::vector<double>& xs, double p) {
  if (xs.empty())
    return 0;
  auto idx = static_cast<size_t>(p * (xs.size() - 1));
  std::nth_element(xs.begin(), xs.begin() + idx, xs.end());
  return xs[idx];
}

} // namespace

int main(int argc, char** argv) {
  bench_config cfg;
  if (auto err = cfg.parse(argc, argv)) {
    std::cerr << cfg.render(err) << '\n';
    return 2;
  }
  if (cfg.cli_helptext_printed)
    return 0;
  std::filesystem::remove_all(cfg.dir);
  caf::actor_system sys{cfg};
  node_options opts;
  opts.data_dir = cfg.dir;
  opts.registry_shards = static_cast<uint32_t>(cfg.shards);
  auto n = start_node(sys, opts);
  if (!n) {
    std::cerr << sys.render(n.error()) << '\n';
    return 1;
  }
  std::vector<std::vector<double>> latencies(cfg.clients);
  auto per_client = cfg.requests / cfg.clients;
  auto start = clock_type::now();
  {
    caf::scoped_actor self{sys};
    for (size_t i = 0; i < cfg.clients; ++i)
      sys.spawn(client, &*n, cfg.mode, i, per_client, &latencies[i],
                caf::actor{self});
    for (size_t i = 0; i < cfg.clients; ++i)
      self->receive([](done_atom) {});
  }
  auto secs = std::chrono::duration<double>(clock_type::now() - start).count();
  std::vector<double> all;
  for (auto& v : latencies)
    all.insert(all.end(), v.begin(), v.end());
  auto total = all.size();
  auto p50 = percentile(all, 0.50);
  auto p99 = percentile(all, 0.99);
  std::printf("mode=%s policy=%s threads=%zu shards=%zu clients=%zu "
              "claims=%zu seconds=%.2f rate=%.0f/s p50_us=%.0f p99_us=%.0f\n",
              cfg.mode.c_str(),
              to_string(caf::get_or(cfg, "scheduler.policy",
                                    caf::atom("stealing")))
                .c_str(),
              caf::get_or(cfg, "scheduler.max-threads", size_t{0}),
              cfg.shards, cfg.clients, total, secs, total / secs, p50, p99);
  n->shutdown();
  return 0;
}
