#define CAF_SUITE common.incremental_map
#include "caf/test/unit_test.hpp"

#include <string>
#include <unordered_map>
#include <vector>

#include "common/incremental_map.hpp"

using namespace oncegate;

namespace {

using map = incremental_map<std::string, int>;

std::string key_of(int i) {
  return "route\x1fkey-" + std::to_string(i);
}

} // namespace

CAF_TEST(no insert rehashes the table in place) {
  // The stop-the-world rehash is what this map exists to avoid: the
  // current table's bucket count changes only when it is moved aside.
  map m;
  auto buckets = m.bucket_count();
  auto moves = m.moves();
  size_t in_place = 0;
  for (int i = 0; i < 300000; ++i) {
    m.emplace(key_of(i), i);
    if (m.moves() == moves && m.bucket_count() != buckets)
      ++in_place;
    buckets = m.bucket_count();
    moves = m.moves();
  }
  CAF_CHECK_EQUAL(in_place, 0u);
  CAF_CHECK_EQUAL(m.size(), 300000u);
  CAF_CHECK_GREATER(m.moves(), 10u);
}

CAF_TEST(the old table drains by step elements per insert) {
  map m{4};
  size_t worst = 0;
  bool drained_every_time = true;
  for (int i = 0; i < 200000; ++i) {
    auto before = m.moving();
    auto moves = m.moves();
    m.emplace(key_of(i), i);
    if (m.moves() != moves) {
      // A move starts with the whole table aside, and the previous one
      // was finished before it (from a few elements on).
      if (before != 0 && m.size() > 64)
        drained_every_time = false;
      continue;
    }
    if (before > m.moving())
      worst = std::max(worst, before - m.moving());
  }
  CAF_CHECK(drained_every_time);
  CAF_CHECK_EQUAL(worst, 4u);
}

CAF_TEST(elements keep their address and are found while tables move) {
  map m{2};
  std::vector<map::value_type*> where;
  for (int i = 0; i < 100000; ++i) {
    auto [x, inserted] = m.emplace(key_of(i), i);
    CAF_REQUIRE(inserted);
    where.push_back(x);
  }
  size_t lost = 0;
  for (int i = 0; i < 100000; ++i)
    if (m.find(key_of(i)) != where[i] || where[i]->second != i)
      ++lost;
  CAF_CHECK_EQUAL(lost, 0u);
  // A second insert of a key finds the first.
  auto again = m.emplace(key_of(7), -1);
  CAF_CHECK(!again.second);
  CAF_CHECK_EQUAL(again.first, where[7]);
  CAF_CHECK_EQUAL(again.first->second, 7);
  CAF_CHECK(m.find("absent") == nullptr);
}

CAF_TEST(erases and inserts interleaved match a reference map) {
  map m{3};
  std::unordered_map<std::string, int> ref;
  uint64_t x = 88172645463325252ull; // xorshift: a fixed, varied sequence
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  size_t mismatches = 0;
  for (int round = 0; round < 400000; ++round) {
    auto k = key_of(static_cast<int>(next() % 50000));
    if (next() % 3 == 0) {
      // Erase through the element's own key, as the registry does.
      auto e = m.find(k);
      bool had = ref.erase(k) > 0;
      if ((e != nullptr) != had || (e && !m.erase(e->first)))
        ++mismatches;
    } else {
      auto v = static_cast<int>(round);
      auto res = m.emplace(k, v);
      auto ref_res = ref.emplace(k, v);
      if (res.second != ref_res.second
          || res.first->second != ref_res.first->second)
        ++mismatches;
    }
    if (m.size() != ref.size())
      ++mismatches;
  }
  CAF_CHECK_EQUAL(mismatches, 0u);
  size_t visited = 0;
  size_t wrong = 0;
  m.for_each([&](map::value_type& kv) {
    ++visited;
    auto i = ref.find(kv.first);
    if (i == ref.end() || i->second != kv.second)
      ++wrong;
  });
  CAF_CHECK_EQUAL(visited, ref.size());
  CAF_CHECK_EQUAL(wrong, 0u);
  m.clear();
  CAF_CHECK(m.empty());
  CAF_CHECK_EQUAL(m.size(), 0u);
  CAF_CHECK(m.find(key_of(1)) == nullptr);
  CAF_CHECK(m.emplace(key_of(1), 1).second);
}
