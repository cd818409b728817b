#pragma once

#include <cstdint>
#include <string_view>

namespace oncegate {

/// The partition (Raft group) of a key among `partitions` (> 0): the first
/// 8 bytes of SHA-256(u32le(|route|) . route . key), read big-endian,
/// modulo `partitions`. The same on every node, build and platform for the
/// life of a cluster (its partition count is fixed when it is created), and
/// documented so that an operator can compute it (docs/cluster.md,
/// "Partitions"). The route's length goes first, so that no two (route,
/// key) pairs hash the same bytes.
uint16_t partition_of(std::string_view route, std::string_view key,
                      uint16_t partitions);

/// Partition `group`'s share of a route's cap of `cap` new executions per
/// minute (`max-new-per-minute`) among `partitions`: each partition's
/// leader enforces its share, and the shares sum to `cap` (the first
/// `cap % partitions` get one more), so the route never exceeds it. At
/// least one each when `cap >= partitions`; 0 for a cap of 0 (none).
uint32_t cap_share(uint32_t cap, uint16_t partitions, uint16_t group);

} // namespace oncegate
