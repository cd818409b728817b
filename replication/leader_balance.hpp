#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace oncegate::cluster {

/// One leadership transfer: hand group `group` to node `to`.
struct leader_move {
  uint16_t group = 0;
  uint64_t to = 0;
};

/// What node `self` should do so that every voter leads floor(P/N) or
/// ceil(P/N) of the P groups. `leaders[g]` is group g's leader as `self`
/// knows it (0: none); `voters` are the nodes a group may be handed to
/// (members with a vote that `self` reaches now); `eligible(g, to)` says
/// whether `to` may take group g now (a voter of that group, caught up).
///
/// One move at a time in the whole cluster, so that nodes deciding from
/// the same view never pile onto one target: only the node of the lowest
/// id among those that lead the most moves, and only when it leads at
/// least two more than the voter of the lowest id among those that lead
/// the fewest (the target); it hands that voter its lowest group the
/// target is eligible for. Every move narrows the spread, so no group goes
/// back and forth, and a balanced cluster moves nothing. Nothing while any
/// group has no leader (a failover is under way) or `self` is not among
/// `voters`. Pure.
std::optional<leader_move>
next_leader_move(uint64_t self, const std::vector<uint64_t>& leaders,
                 const std::vector<uint64_t>& voters,
                 const std::function<bool(uint16_t, uint64_t)>& eligible
                 = nullptr);

} // namespace oncegate::cluster
