#pragma once

// The upstream client's test fixture: a client and a bounded wait for the
// result of one forward.

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "caf/test/unit_test.hpp"

#include "http/upstream_client.hpp"

namespace oncegate::test {

/// Forwards `body` (default `{"order":"KEY"}`) with `key` as its
/// Idempotency-Key through `client` and waits (bounded, 10 s) for the
/// result.
inline gateway::upstream_result
forward_and_wait(gateway::upstream_client& client,
                 const gateway::upstream_target& target,
                 const std::string& key, std::string body = {}) {
  gateway::upstream_request req;
  req.body = body.empty() ? R"({"order":")" + key + R"("})"
                          : std::move(body);
  req.idempotency_key = key;
  auto done = std::make_shared<std::promise<gateway::upstream_result>>();
  auto res = done->get_future();
  client.send(target, std::move(req), [done](gateway::upstream_result r) {
    done->set_value(std::move(r));
  });
  if (res.wait_for(std::chrono::seconds{10}) != std::future_status::ready) {
    CAF_FAIL("no result within 10 s");
  }
  return res.get();
}

struct upstream_fixture {
  gateway::upstream_client client;

  /// Sends one request and waits (bounded) for its result.
  gateway::upstream_result send(const gateway::upstream_target& target,
                                const std::string& key,
                                std::string body = {}) {
    return forward_and_wait(client, target, key, std::move(body));
  }
};

} // namespace oncegate::test
