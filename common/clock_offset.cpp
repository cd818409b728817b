#include "common/clock_offset.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

namespace oncegate {

namespace {

// Stamps outside (1970, year 2255) are garbage, never a clock: they would
// only overflow the arithmetic below.
constexpr int64_t max_stamp_ms = int64_t{1} << 43;

} // namespace

int64_t steady_clock_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch())
    .count();
}

clock_offset_monitor::clock_offset_monitor(clock_offset_options opts,
                                           wall_clock_fn wall,
                                           steady_clock_fn steady)
  : opts_(opts), wall_(std::move(wall)), steady_(std::move(steady)) {
  // nop
}

void clock_offset_monitor::prune(int64_t steady_now) {
  while (!buckets_.empty()
         && steady_now - buckets_.front().second * 1000 > opts_.window_ms)
    buckets_.pop_front();
}

void clock_offset_monitor::observe(int64_t cluster_ms) {
  if (cluster_ms <= 0 || cluster_ms > max_stamp_ms)
    return;
  auto m = steady_();
  auto lead = cluster_ms - m;
  auto second = m / 1000;
  std::lock_guard<std::mutex> guard{mtx_};
  prune(m);
  if (!buckets_.empty() && buckets_.back().second == second)
    buckets_.back().lead_ms = std::max(buckets_.back().lead_ms, lead);
  else
    buckets_.push_back(bucket{second, lead});
}

void clock_offset_monitor::lead() {
  std::lock_guard<std::mutex> guard{mtx_};
  buckets_.clear();
}

clock_offset_reading clock_offset_monitor::read() const {
  auto steady_now = steady_();
  auto wall_now = wall_();
  clock_offset_reading res;
  std::lock_guard<std::mutex> guard{mtx_};
  const bucket* first = nullptr;
  const bucket* last = nullptr;
  int64_t best = 0;
  for (auto& b : buckets_) {
    if (steady_now - b.second * 1000 > opts_.window_ms)
      continue;
    if (first == nullptr || b.lead_ms > best)
      best = b.lead_ms;
    if (first == nullptr)
      first = &b;
    last = &b;
  }
  if (first == nullptr
      || (last->second - first->second) * 1000 < opts_.min_span_ms)
    return res;
  res.measured = true;
  res.offset_ms = (wall_now - steady_now) - best;
  res.exceeded = res.offset_ms > opts_.max_offset_ms
                 || res.offset_ms < -opts_.max_offset_ms;
  return res;
}

} // namespace oncegate
