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

} // namespace oncegate
