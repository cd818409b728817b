#pragma once

// The node service the endpoint tests run against (api.webhook_handler,
// api.admin_access): it answers claims like a store that knows nothing but
// what it was told, applies every update, knows no record, and records what
// reached it, so that a test can tell that a refused request changed
// nothing. The real actors are tested in actors.*, the whole node over HTTP
// in process.*; this isolates the HTTP side.

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "service/node_service.hpp"

namespace oncegate::test {

class fake_node : public gateway::node_service {
public:
  /// The claims that reached it, in order.
  std::vector<claim_request> seen;
  /// Set: the answer to every claim (else each is accepted).
  std::optional<gateway::reply<claim_result>> next;
  /// Set: claims are not answered until `answer_held`.
  bool hold = false;
  std::vector<std::function<void(gateway::reply<claim_result>)>> held;
  int updates = 0;
  int lookups = 0;
  int cluster_changes = 0;

  /// Requests that would have changed something besides a claim.
  int changes() const {
    return updates + cluster_changes;
  }

  /// Accepts the held claims, in order.
  void answer_held() {
    auto waiting = std::move(held);
    held.clear();
    for (size_t i = 0; i < waiting.size(); ++i)
      waiting[i](accepted(seen[seen.size() - waiting.size() + i]));
  }

  void claim(claim_request req,
             std::function<void(gateway::reply<claim_result>)> done) override {
    seen.push_back(req);
    if (hold) {
      held.push_back(std::move(done));
      return;
    }
    done(next ? *next : accepted(req));
  }

  void update(record_update,
              std::function<void(gateway::reply<update_result>)> done)
    override {
    ++updates;
    gateway::reply<update_result> res;
    res.ok = true;
    done(res);
  }

  void lookup(std::string, std::string,
              std::function<void(gateway::reply<lookup_result>)> done)
    override {
    ++lookups;
    gateway::reply<lookup_result> res;
    res.ok = true;
    done(res);
  }

  void list(std::string, record_state, std::string, uint32_t,
            std::function<void(gateway::reply<record_page>)> done) override {
    gateway::reply<record_page> res;
    res.ok = true;
    done(res);
  }

  void metrics(std::function<void(gateway::node_metrics)> done) override {
    done({});
  }

  void ready(std::function<void(bool, std::string)> done) override {
    done(true, {});
  }

  void change_cluster(gateway::cluster_op, uint64_t, uint16_t,
                      std::function<void(gateway::reply<uint64_t>)> done)
    override {
    ++cluster_changes;
    done({});
  }

private:
  static gateway::reply<claim_result> accepted(const claim_request& req) {
    gateway::reply<claim_result> res;
    res.ok = true;
    res.value.outcome = decision::accepted;
    res.value.rec = make_record(req);
    return res;
  }
};

} // namespace oncegate::test
