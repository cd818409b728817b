#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "actors/alarm_actor.hpp"
#include "actors/registry.hpp"
#include "common/errc.hpp"
#include "common/record.hpp"
#include "persistence/store_actor.hpp"

namespace oncegate::gateway {

/// An answer from the node: a value, or why there is none.
template <class T>
struct reply {
  bool ok = false;
  T value;
  /// When `!ok`: the reason (`timeout`, `overloaded`, storage errors).
  errc error = errc::none;
  std::string detail;
};

/// Counters gathered from the node's actors for `/metrics`.
struct node_metrics {
  /// False when some actor did not answer in time (the rest is partial).
  bool complete = true;
  registry_stats registry;
  persistence::store_stats store;
  alarm_stats alarm;
};

/// What the HTTP side needs of the node. Implemented on top of the actors
/// (`gateway_actor.hpp`); every call returns at once and calls its
/// completion exactly once, on an arbitrary thread.
class node_service {
public:
  virtual ~node_service() = default;

  /// Asks for a durable decision on a claim.
  virtual void claim(claim_request req,
                     std::function<void(reply<claim_result>)> done) = 0;

  /// Applies a record transition (complete, release, in doubt).
  virtual void update(record_update upd,
                      std::function<void(reply<update_result>)> done) = 0;

  /// Reads a record.
  virtual void lookup(std::string route, std::string key,
                      std::function<void(reply<lookup_result>)> done) = 0;

  /// Lists committed records of `route` in `state` after key `after`.
  virtual void list(std::string route, record_state state, std::string after,
                    uint32_t limit,
                    std::function<void(reply<record_page>)> done) = 0;

  /// Gathers counters from every actor.
  virtual void metrics(std::function<void(node_metrics)> done) = 0;

  /// Checks that the store answers; `reason` is set when not ready.
  virtual void ready(std::function<void(bool ok, std::string reason)> done)
    = 0;
};

} // namespace oncegate::gateway
