#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace oncegate::cluster {

/// One leadership transfer: hand group `group` to node `to`.
struct leader_move {
  uint16_t group = 0;
  uint64_t to = 0;
};

/// What node `self` should do so that every voter leads floor(P/N) or
/// ceil(P/N) of the P groups: hand one group it leads to the voter that
/// leads the fewest, when that voter leads at least two fewer than `self`
/// (so a move always narrows the spread: no two nodes hand the same group
/// back and forth, and a balanced cluster moves nothing). `leaders[g]` is
/// group g's leader as `self` knows it (0: none); `voters` are the nodes a
/// group may be handed to (members with a vote that `self` reaches now).
/// Nothing while any group has no leader (a failover is under way) or
/// `self` is not among `voters`. Ties: the lowest group `self` leads, to
/// the lowest id among the voters with the fewest. Pure.
std::optional<leader_move> next_leader_move(uint64_t self,
                                            const std::vector<uint64_t>& leaders,
                                            const std::vector<uint64_t>& voters);

} // namespace oncegate::cluster
