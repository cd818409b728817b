#include "replication/leader_balance.hpp"

#include <algorithm>
#include <map>

namespace oncegate::cluster {

std::optional<leader_move>
next_leader_move(uint64_t self, const std::vector<uint64_t>& leaders,
                 const std::vector<uint64_t>& voters,
                 const std::function<bool(uint16_t, uint64_t)>& eligible) {
  if (std::find(voters.begin(), voters.end(), self) == voters.end())
    return std::nullopt;
  std::map<uint64_t, size_t> led; // ordered: ties go to the lowest id
  for (auto v : voters)
    led[v] = 0;
  for (auto l : leaders) {
    if (l == 0)
      return std::nullopt;
    if (auto i = led.find(l); i != led.end())
      ++i->second;
  }
  auto most = led.begin();
  auto fewest = led.begin();
  for (auto i = led.begin(); i != led.end(); ++i) {
    if (i->second > most->second)
      most = i;
    if (i->second < fewest->second)
      fewest = i;
  }
  if (most->first != self || most->second < fewest->second + 2)
    return std::nullopt;
  for (size_t g = 0; g < leaders.size(); ++g)
    if (leaders[g] == self
        && (!eligible || eligible(static_cast<uint16_t>(g), fewest->first)))
      return leader_move{static_cast<uint16_t>(g), fewest->first};
  return std::nullopt;
}

} // namespace oncegate::cluster
