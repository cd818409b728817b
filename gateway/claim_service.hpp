#pragma once

#include <functional>
#include <string>

#include "common/errc.hpp"
#include "common/record.hpp"

namespace oncegate::gateway {

/// The answer to a claim: a durable decision, or why there is none.
struct claim_reply {
  bool ok = false;
  claim_result result;
  /// When `!ok`: the reason (`timeout`, `overloaded`, storage errors).
  errc error = errc::none;
  std::string detail;
};

/// Asks the node for a durable decision on a claim. Implemented on top of
/// the actors (see `gateway_actor.hpp`); the HTTP side sees only this.
class claim_service {
public:
  virtual ~claim_service() = default;

  /// Submits `req`; `done` runs exactly once, on an arbitrary thread.
  /// Never blocks.
  virtual void claim(claim_request req,
                     std::function<void(claim_reply)> done) = 0;
};

} // namespace oncegate::gateway
