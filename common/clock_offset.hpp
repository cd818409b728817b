#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

#include "common/clock.hpp"

namespace oncegate {

/// Milliseconds of a monotonic clock (any origin); tests inject their own.
using steady_clock_fn = std::function<int64_t()>;

/// `std::chrono::steady_clock` in milliseconds.
int64_t steady_clock_ms();

/// Limits of the clock-offset measurement (`cluster.max-clock-offset`).
struct clock_offset_options {
  /// An offset beyond this, either way, is reported (`exceeded`). The
  /// estimate is an upper bound that includes the least delay an entry
  /// took to apply, which reaches a second on a loaded 2-core machine
  /// (862 ms seen with the test suite running twice over): the default
  /// stays well above that, and well below the 5 minutes a signature's
  /// timestamp may be off, which is what an offset breaks here.
  int64_t max_offset_ms = 10'000;
  /// Samples are kept this long (local monotonic time); with none left the
  /// offset is unknown.
  int64_t window_ms = 180'000;
  /// The samples in the window must span this much local time before they
  /// say anything: the entries a node replays after a restart all arrive at
  /// once, however old their stamps, and would read as a clock far ahead.
  int64_t min_span_ms = 2'000;
};

/// What a node knows of its clock's offset from the cluster's.
struct clock_offset_reading {
  /// Whether there is an estimate (a follower with samples spanning
  /// `min_span_ms`); false on the leader and on a single node.
  bool measured = false;
  /// This node's wall clock minus the cluster's, estimated (ms): positive
  /// ahead, negative behind.
  int64_t offset_ms = 0;
  /// `measured` and `|offset_ms| > max_offset_ms`.
  bool exceeded = false;
};

/// Measures a cluster node's wall clock against the cluster's clock: the
/// leader's time, which the leader stamps on the claims and purges of every
/// log entry (`raft_sink::stamp`; an idle leader still purges at least
/// every `alarm.max-interval`). A follower applying such an entry learns
/// that the cluster's clock read at least `stamp` at that moment, later by
/// the delay the entry took. So, with `m` the local monotonic time of each
/// application, the cluster's clock now is at least `steady_now + max(stamp
/// - m)` over the samples, and the offset estimate
///
///     offset = (wall_now - steady_now) - max(stamp - m)
///
/// is an upper bound of the true offset plus the least delay seen (the
/// delays of a live cluster are milliseconds). Reading the wall clock at
/// answer time, not at sample time, makes a step of the local clock (a
/// correction included) count at once, in either direction.
///
/// The leader does not measure: its clock is the cluster's (`lead`).
/// Thread-safe: `observe` and `lead` run on the Raft thread, `read` on HTTP
/// threads.
class clock_offset_monitor {
public:
  explicit clock_offset_monitor(clock_offset_options opts,
                                wall_clock_fn wall = wall_clock_ms,
                                steady_clock_fn steady = steady_clock_ms);

  /// A follower applied an entry the leader stamped `cluster_ms`.
  void observe(int64_t cluster_ms);

  /// This node leads: its clock is the cluster's; earlier samples go.
  void lead();

  /// The estimate now.
  clock_offset_reading read() const;

  const clock_offset_options& options() const {
    return opts_;
  }

private:
  /// Samples of one second of local monotonic time: the largest `stamp -
  /// m` seen in it, which is the tightest.
  struct bucket {
    int64_t second = 0;
    int64_t lead_ms = 0;
  };

  void prune(int64_t steady_now);

  clock_offset_options opts_;
  wall_clock_fn wall_;
  steady_clock_fn steady_;
  mutable std::mutex mtx_;
  std::deque<bucket> buckets_;
};

} // namespace oncegate
