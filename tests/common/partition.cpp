#define CAF_SUITE common.partition
#include "caf/test/unit_test.hpp"

// The key -> partition map is part of a cluster's data: it must never
// change. The expected values were computed independently of this code
// (Python's hashlib, from the formula in common/partition.hpp).

#include <array>
#include <string>
#include <vector>

#include "common/partition.hpp"

using namespace oncegate;

CAF_TEST(a key maps to the partition its documented hash says) {
  struct vec {
    const char* route;
    const char* key;
    std::array<uint16_t, 6> want; // for 1, 2, 3, 8, 32, 256 partitions
  };
  std::vector<vec> vecs{
    {"default", "k1", {0, 0, 2, 4, 20, 52}},
    {"orders", "BTCUSDT-buy-1733500000", {0, 0, 2, 6, 14, 14}},
    {"tv", "sha256:00", {0, 1, 0, 7, 31, 223}},
    {"", "", {0, 1, 2, 3, 27, 219}},
  };
  const uint16_t counts[] = {1, 2, 3, 8, 32, 256};
  for (auto& v : vecs)
    for (size_t i = 0; i < 6; ++i)
      CAF_CHECK_EQUAL(partition_of(v.route, v.key, counts[i]), v.want[i]);
}

CAF_TEST(the route and the key are never confused) {
  // Without the route's length first these two would hash the same bytes.
  auto a = partition_of("ab", "c", 256);
  auto b = partition_of("a", "bc", 256);
  CAF_CHECK_NOT_EQUAL(a, b);
}

CAF_TEST(keys spread evenly over the partitions) {
  std::array<int, 8> seen{};
  for (int i = 0; i < 80000; ++i)
    ++seen[partition_of("default", "key-" + std::to_string(i), 8)];
  // 10000 each on average; the same run in Python gives 9826..10157.
  for (auto n : seen) {
    CAF_CHECK_GREATER(n, 9500);
    CAF_CHECK_LESS(n, 10500);
  }
  CAF_CHECK_EQUAL(partition_of("default", "anything", 1), 0);
}
