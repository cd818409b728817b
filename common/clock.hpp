#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace oncegate {

/// Wall-clock milliseconds since the Unix epoch. Record timestamps
/// (`first_seen`, `expires_at`) use this clock because they must mean the
/// same after a restart.
inline int64_t wall_clock_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
    .count();
}

/// A source of wall-clock time; tests inject a controllable one.
using wall_clock_fn = std::function<int64_t()>;

/// The node's clock: the wall clock read once, when this is called, then
/// carried forward by the monotonic clock. A step of the system clock while
/// the node runs (an operator's `date -s`, a VM resumed with a stale clock,
/// a bad NTP server) moves neither the expiry nor the timestamps of new
/// records; NTP's gradual slewing is followed, since it slews the monotonic
/// clock too. What the clock reads at a start is trusted; the store's clock
/// (`sqlite_store::clock_ms`) then keeps time from moving backwards across
/// restarts and leaders.
inline wall_clock_fn steady_wall_clock() {
  using namespace std::chrono;
  auto wall0 = wall_clock_ms();
  auto mono0 = steady_clock::now();
  return [wall0, mono0] {
    return wall0
           + duration_cast<milliseconds>(steady_clock::now() - mono0).count();
  };
}

} // namespace oncegate
