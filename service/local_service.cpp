#include "service/local_service.hpp"

#include <string>
#include <utility>

#include "common/atoms.hpp"
#include "service/caller.hpp"

namespace oncegate::gateway {

namespace {

class local_service : public node_service {
public:
  local_service(caf::actor_system& sys, const node& n, service_options opts)
    : node_(n), opts_(opts), bridge_(sys, opts.actors),
      // A request sent alone from an HTTP thread runs the actors it wakes on
      // that thread (common/inline_execution.hpp): the registry, the key
      // actor, and a store on the scheduler with its commit
      // (`persistence::local_sink`).
      caller_(sys, true) {
  }

  void claim(claim_request req,
             std::function<void(reply<claim_result>)> done) override {
    to_shard<claim_result>(claim_atom::value, std::move(req), std::move(done));
  }

  void update(record_update upd,
              std::function<void(reply<update_result>)> done) override {
    to_shard<update_result>(update_atom::value, std::move(upd),
                            std::move(done));
  }

  void lookup(std::string route, std::string key,
              std::function<void(reply<lookup_result>)> done) override {
    auto& shard = node_.shard_for(route, key);
    caller_.ask<lookup_result>(shard, std::move(done), get_atom::value,
                               std::move(route), std::move(key));
  }

  void list(std::string route, record_state state, std::string after,
            uint32_t limit,
            std::function<void(reply<record_page>)> done) override {
    caller_.ask<record_page>(node_.store, std::move(done), list_atom::value,
                             std::move(route), state, std::move(after),
                             limit);
  }

  void pause(std::string route, pause_op op, int64_t now_ms,
             std::function<void(reply<route_pauses>)> done) override {
    caller_.ask<route_pauses>(node_.store, std::move(done), pause_atom::value,
                              std::move(route), op, now_ms);
  }

  delivery_turn delivery() const override {
    return {true, 0, 0};
  }

  void due(int64_t now_ms, uint32_t limit,
           std::function<void(reply<delivery_queue>)> done) override {
    bridge_.post([this, now_ms, limit,
                  done = std::move(done)](caf::event_based_actor* self) mutable {
      ask<delivery_queue>(self, node_.store, opts_.probe_timeout,
                          std::move(done), due_atom::value, now_ms, limit);
    });
  }

  void metrics(std::function<void(node_metrics)> done) override {
    bridge_.post([this, done = std::move(done)](caf::event_based_actor* self) {
      gather_metrics(self, {node_}, opts_.probe_timeout, std::move(done));
    });
  }

  void ready(std::function<void(bool, std::string)> done) override {
    bridge_.post([this, done = std::move(done)](caf::event_based_actor* self) {
      probe_store(self, {node_}, opts_.probe_timeout, std::move(done));
    });
  }

private:
  // Asks the registry shard of `msg`'s route and key, from the caller's
  // thread; the key actor's answer completes the call on its thread.
  template <class T, class Atom, class Msg>
  void to_shard(Atom atom, Msg msg, std::function<void(reply<T>)> done) {
    auto& shard = node_.shard_for(msg.route, msg.key);
    caller_.ask<T>(shard, std::move(done), atom, std::move(msg));
  }

  node node_;
  service_options opts_;
  actor_bridge bridge_;
  actor_caller caller_;
};

} // namespace

std::unique_ptr<node_service>
make_local_service(caf::actor_system& sys, const node& n,
                   service_options opts) {
  return std::make_unique<local_service>(sys, n, opts);
}

} // namespace oncegate::gateway
