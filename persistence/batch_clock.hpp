#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>

#include "common/clock.hpp"

namespace oncegate::persistence {

/// The time a store actor stamps on the claims and purges of a batch: the
/// node's clock, but never behind the store's clock (`sqlite_store::clock_ms`,
/// the latest time applied), which it carries forward by the monotonic
/// clock from the moment it last saw it ahead.
///
/// Without the carrying, a node (or new leader) whose clock is behind the
/// store's would stamp every record with the store's clock, frozen until
/// its own clock caught up: those records would be stamped hours early and,
/// should the clock then be corrected, expire early by as much. With it,
/// time keeps running at the real rate from the last time the log carried.
class batch_clock {
public:
  explicit batch_clock(wall_clock_fn now) : now_(std::move(now)) {
    // nop
  }

  /// The stamp for the next batch, given the store's clock now.
  int64_t stamp(int64_t store_clock_ms) {
    auto mono = std::chrono::steady_clock::now();
    auto carried = anchor_ms_
                   + std::chrono::duration_cast<std::chrono::milliseconds>(
                       mono - anchor_at_)
                       .count();
    if (store_clock_ms > carried) {
      anchor_ms_ = store_clock_ms;
      anchor_at_ = mono;
      carried = store_clock_ms;
    }
    return std::max(now_(), carried);
  }

private:
  wall_clock_fn now_;
  int64_t anchor_ms_ = 0;
  std::chrono::steady_clock::time_point anchor_at_ = std::chrono::steady_clock::now();
};

} // namespace oncegate::persistence
