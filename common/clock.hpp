#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

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

/// The node's clock: the wall clock read once, at construction, then
/// carried forward by the monotonic clock. A step of the system clock while
/// the node runs (an operator's `date -s`, a VM resumed with a stale clock,
/// a bad NTP server) moves neither the expiry nor the timestamps of new
/// records; NTP's gradual slewing is followed, since it slews the monotonic
/// clock too. What the clock reads at a start is trusted when it is ahead
/// of the store's clock; when it is behind, `raise` moves it forward to the
/// store's clock, from where it runs on (the store's clock,
/// `sqlite_store::clock_ms`, never moves backwards). Thread-safe.
class node_clock {
public:
  node_clock()
    : wall0_(wall_clock_ms()), mono0_(std::chrono::steady_clock::now()) {
    // nop
  }

  int64_t now() const {
    using namespace std::chrono;
    return wall0_.load(std::memory_order_relaxed)
           + duration_cast<milliseconds>(steady_clock::now() - mono0_).count();
  }

  /// Moves the clock forward to at least `floor_ms`; never backwards.
  void raise(int64_t floor_ms) {
    auto behind = floor_ms - now();
    if (behind > 0)
      wall0_.fetch_add(behind, std::memory_order_relaxed);
  }

private:
  std::atomic<int64_t> wall0_;
  std::chrono::steady_clock::time_point mono0_;
};

/// A `wall_clock_fn` reading `clock`.
inline wall_clock_fn read_clock(std::shared_ptr<const node_clock> clock) {
  return [clock = std::move(clock)] { return clock->now(); };
}

} // namespace oncegate
