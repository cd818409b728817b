#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace oncegate {

/// A fixed-bucket histogram in the Prometheus sense: `counts[i]` counts
/// observations <= `bounds[i]` (not cumulative; the last slot counts those
/// above every bound). Single-owner: actors keep one in their state and
/// send copies.
struct histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;

  histogram() = default;

  explicit histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {
    // nop
  }

  void observe(double x) {
    size_t i = 0;
    while (i < bounds.size() && x > bounds[i])
      ++i;
    ++counts[i];
    sum += x;
    ++count;
  }

  /// Adds `other`'s observations (the same bounds; otherwise only its sum
  /// and count, in the last slot).
  void merge(const histogram& other) {
    if (other.bounds == bounds && other.counts.size() == counts.size()) {
      for (size_t i = 0; i < counts.size(); ++i)
        counts[i] += other.counts[i];
    } else if (!counts.empty()) {
      counts.back() += other.count;
    }
    sum += other.sum;
    count += other.count;
  }

  /// Latency buckets in seconds, 50 us to 10 s.
  static std::vector<double> latency_bounds() {
    return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
            0.01,    0.025,  0.05,    0.1,    0.25,  0.5,    1,
            2.5,     5,      10};
  }

  /// Request-duration buckets in seconds: `latency_bounds()` and more
  /// between 100 us and 10 ms, where an unloaded node's answers fall, so
  /// that its own p50 and a p99 near 1 ms read to within 25 % (0.75, 1,
  /// 1.25 ms). A superset of `latency_bounds()`: queries of those bounds
  /// keep working.
  static std::vector<double> request_bounds() {
    return {0.00005, 0.0001, 0.00015, 0.0002, 0.00025, 0.0003, 0.0004,
            0.0005,  0.00075, 0.001,  0.00125, 0.0015, 0.002,  0.0025,
            0.003,   0.004,  0.005,   0.0075, 0.01,    0.025,  0.05,
            0.1,     0.25,   0.5,     1,      2.5,     5,      10};
  }

  /// Batch-size buckets.
  static std::vector<double> size_bounds() {
    return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, histogram& x) {
  return f(caf::meta::type_name("histogram"), x.bounds, x.counts, x.sum,
           x.count);
}

} // namespace oncegate
