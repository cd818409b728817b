#include "common/partition.hpp"

#include <string>

#include "common/sha256.hpp"

namespace oncegate {

uint16_t partition_of(std::string_view route, std::string_view key,
                      uint16_t partitions) {
  if (partitions <= 1)
    return 0;
  std::string bytes;
  bytes.reserve(4 + route.size() + key.size());
  auto len = static_cast<uint32_t>(route.size());
  for (int i = 0; i < 4; ++i)
    bytes.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  bytes.append(route);
  bytes.append(key);
  auto digest = sha256(bytes);
  uint64_t head = 0;
  for (int i = 0; i < 8; ++i)
    head = (head << 8) | static_cast<unsigned char>(digest[i]);
  return static_cast<uint16_t>(head % partitions);
}

uint32_t cap_share(uint32_t cap, uint16_t partitions, uint16_t group) {
  if (partitions <= 1)
    return cap;
  return cap / partitions + (group < cap % partitions ? 1 : 0);
}

} // namespace oncegate
