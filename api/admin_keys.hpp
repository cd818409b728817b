#pragma once

// The key admin endpoints: `GET /v1/keys?state=&route=&limit=&after=`
// (unsettled records), `GET|DELETE /v1/keys/KEY?route=` (read, release) and
// `POST /v1/keys/KEY/complete?route=` (an operator settles a key). Request
// parsing, the operator's record changes through the node service, and
// keeping the decision cache from answering from a changed record. Admin
// auth is checked before (`api/admin_auth.hpp`).

#include <functional>

#include "common/clock.hpp"
#include "common/record.hpp"
#include "api/decision_cache.hpp"
#include "api/payload.hpp"
#include "api/routes.hpp"
#include "http/http_types.hpp"
#include "service/node_service.hpp"

namespace oncegate::gateway {

/// Serves `/v1/keys` and `/v1/keys/...`.
class admin_keys {
public:
  /// Every reference must outlive this object.
  /// `now`: the node's clock (stamps an operator's redelivery).
  admin_keys(const route_table& routes, const payload_limits& limits,
             node_service& node, decision_cache& cache, wall_clock_fn now);

  /// Answers a request to `/v1/keys` or below it.
  void handle(http_request& req, responder& done);

private:
  void list(const http_request& req, responder& done);
  void redeliver(const http_request& req, const route_config& route,
                 const std::string& key, responder& done);
  void complete(const http_request& req, const route_config& route,
                const std::string& key, responder& done);
  void release(const http_request& req, const route_config& route,
               const std::string& key, responder& done);

  /// Applies an operator's change to a record and answers with `answer`.
  void update(record_update upd, responder done,
              std::function<http_response(const update_result&)> answer);

  const route_table& routes_;
  const payload_limits& limits_;
  node_service& node_;
  decision_cache& cache_;
  wall_clock_fn now_;
};

} // namespace oncegate::gateway
