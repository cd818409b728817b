#define CAF_SUITE replication.leader_balance
#include "caf/test/unit_test.hpp"

// Which group a node hands to whom so that leaderships spread: every case
// of the rule in replication/leader_balance.hpp, and that following the
// rule from any start ends balanced without a move back.

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "replication/leader_balance.hpp"

using namespace oncegate::cluster;

namespace {

using leaders = std::vector<uint64_t>;

std::optional<std::pair<uint16_t, uint64_t>>
move_of(uint64_t self, const leaders& l, const std::vector<uint64_t>& voters) {
  auto m = next_leader_move(self, l, voters);
  if (!m)
    return std::nullopt;
  return std::make_pair(m->group, m->to);
}

} // namespace

CAF_TEST(one node moves one group to a voter that leads two fewer) {
  std::vector<uint64_t> v{1, 2, 3};
  using mv = std::optional<std::pair<uint16_t, uint64_t>>;
  // 8 groups over 3 nodes: 3/3/2 is balanced; nothing moves.
  CAF_CHECK(move_of(1, {1, 1, 1, 2, 2, 2, 3, 3}, v) == mv{});
  CAF_CHECK(move_of(2, {1, 1, 1, 2, 2, 2, 3, 3}, v) == mv{});
  // 4/2/2: node 1 hands its lowest group to node 2 (the lowest id of the
  // fewest).
  CAF_CHECK(move_of(1, {2, 1, 1, 1, 2, 3, 1, 3}, v) == (mv{{1, 2}}));
  // Only the node that leads too many moves anything.
  CAF_CHECK(move_of(2, {2, 1, 1, 1, 2, 3, 1, 3}, v) == mv{});
  // Two lead the most: only the lower id moves (one move at a time).
  CAF_CHECK(move_of(1, {1, 1, 1, 2, 2, 2}, {1, 2, 3}) == (mv{{0, 3}}));
  CAF_CHECK(move_of(2, {1, 1, 1, 2, 2, 2}, {1, 2, 3}) == mv{});
  // All on one node: it starts handing them to the lowest others.
  CAF_CHECK(move_of(3, {3, 3, 3, 3}, v) == (mv{{0, 1}}));
  // One group over three nodes: 1/0/0 is balanced.
  CAF_CHECK(move_of(1, {1}, v) == mv{});
  // A group without a leader (a failover under way): wait.
  CAF_CHECK(move_of(1, {1, 1, 1, 0}, v) == mv{});
  // Only to a voter this node reaches; not at all if it is no voter.
  CAF_CHECK(move_of(1, {1, 1, 1, 1}, {1, 3}) == (mv{{0, 3}}));
  CAF_CHECK(move_of(1, {1, 1, 1, 1}, {2, 3}) == mv{});
  // A leader that is no voter any more (removed) counts for nobody.
  CAF_CHECK(move_of(1, {1, 1, 1, 4}, v) == (mv{{0, 2}}));
  // The lowest group the target may take (a voter of it, caught up).
  auto not_group_0 = [](uint16_t g, uint64_t) { return g != 0; };
  CAF_CHECK(next_leader_move(3, {3, 3, 3, 3}, v, not_group_0)->group == 1);
  CAF_CHECK(!next_leader_move(3, {3, 3, 3, 3}, v,
                              [](uint16_t, uint64_t) { return false; }));
}

CAF_TEST(nodes deciding from the same view never pile onto one target) {
  // Five nodes, eight groups, node 5 just rejoined (it leads none): every
  // node decides from the same view before any move lands.
  std::vector<uint64_t> v{1, 2, 3, 4, 5};
  leaders l{1, 1, 2, 2, 3, 3, 4, 4};
  size_t moves = 0;
  for (auto self : v)
    moves += next_leader_move(self, l, v).has_value();
  CAF_CHECK_EQUAL(moves, 1u);
}

CAF_TEST(following the rule from any start ends balanced and never moves back) {
  for (size_t nodes = 1; nodes <= 5; ++nodes)
    for (size_t groups = 1; groups <= 32; groups += 3)
      for (uint64_t start = 1; start <= nodes; ++start) {
        std::vector<uint64_t> v;
        for (uint64_t i = 1; i <= nodes; ++i)
          v.push_back(i);
        leaders l(groups, start); // everything on one node
        std::map<uint16_t, uint64_t> last_from;
        size_t moves = 0;
        for (bool moved = true; moved && moves < 1000;) {
          // Every node decides from the same view, then the moves land.
          std::vector<leader_move> round;
          for (auto self : v)
            if (auto m = next_leader_move(self, l, v))
              round.push_back(*m);
          CAF_CHECK_LESS_OR_EQUAL(round.size(), 1u);
          moved = !round.empty();
          for (auto& m : round) {
            // A group never goes back to the node that just gave it.
            auto back = last_from.find(m.group);
            CAF_CHECK(back == last_from.end() || back->second != m.to);
            last_from[m.group] = l[m.group];
            l[m.group] = m.to;
            ++moves;
          }
        }
        std::map<uint64_t, size_t> led;
        for (auto x : l)
          ++led[x];
        auto lo = groups / nodes, hi = (groups + nodes - 1) / nodes;
        for (auto self : v) {
          CAF_CHECK_GREATER_OR_EQUAL(led[self], lo);
          CAF_CHECK_LESS_OR_EQUAL(led[self], hi);
        }
        // As few moves as a perfect plan: what the start node has too many.
        CAF_CHECK_LESS_OR_EQUAL(moves, groups - lo);
      }
}
