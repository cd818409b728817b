// A hash map that grows without stopping the world. std::unordered_map
// rehashes every element in one insert when it outgrows its buckets: with
// a key actor per live key, the registry's map of 100k-500k entries took
// 57-209 ms in one claim (perf, purge benchmark, 2026-12-02), and every
// claim queued behind it waited as long. Here the insert that would
// rehash moves the table aside instead and starts a table with room for
// twice its size; each later insert moves `step` elements across, so the
// old table is empty before the new one could need more room. The one
// O(n) step left is zeroing the new bucket array (8 bytes per bucket).
//
// Elements are moved between the tables as nodes (C++17 extract/insert):
// an element's address never changes while it is in the map, so callers
// may keep pointers to elements (the registry's idle list does).
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <unordered_map>
#include <utility>

namespace oncegate {

template <class Key, class T, class Hash = std::hash<Key>,
          class Equal = std::equal_to<Key>>
class incremental_map {
public:
  using map_type = std::unordered_map<Key, T, Hash, Equal>;
  using value_type = typename map_type::value_type;

  /// `step`: elements moved to the new table per insert while an old one
  /// remains (at least 1: with room for twice the old size, the old table
  /// is empty after size / step inserts, before the new one fills).
  explicit incremental_map(size_t step = 4) : step_(std::max<size_t>(step, 1)) {
    cur_.reserve(initial_size);
  }

  /// The element of `key`, or null.
  value_type* find(const Key& key) {
    if (auto i = cur_.find(key); i != cur_.end())
      return &*i;
    if (!old_.empty())
      if (auto i = old_.find(key); i != old_.end())
        return &*i;
    return nullptr;
  }

  /// Inserts `(key, value)` unless `key` is present; returns the element
  /// and whether it was inserted.
  std::pair<value_type*, bool> emplace(Key key, T value) {
    if (auto x = find(key))
      return {x, false};
    make_room();
    auto res = cur_.emplace(std::move(key), std::move(value));
    return {&*res.first, true};
  }

  /// Removes the element of `key` (which may be that element's own key);
  /// false when there was none.
  bool erase(const Key& key) {
    for (auto* m : {&cur_, &old_})
      if (auto i = m->find(key); i != m->end()) {
        m->erase(i);
        return true;
      }
    return false;
  }

  size_t size() const noexcept {
    return cur_.size() + old_.size();
  }

  bool empty() const noexcept {
    return cur_.empty() && old_.empty();
  }

  /// Empties the map and gives its buckets back.
  void clear() {
    map_type fresh;
    fresh.reserve(initial_size);
    cur_.swap(fresh);
    map_type().swap(old_);
  }

  /// Calls `f(value_type&)` for every element (no inserts or erases meanwhile).
  template <class F>
  void for_each(F&& f) {
    for (auto& x : cur_)
      f(x);
    for (auto& x : old_)
      f(x);
  }

  /// Elements still waiting in the old table (0 outside a move; the old
  /// table's emptied bucket array is kept until the next move or clear).
  size_t moving() const noexcept {
    return old_.size();
  }

  /// The current table's bucket count (tests: it changes only when the
  /// table is moved aside, never in an insert that rehashes).
  size_t bucket_count() const noexcept {
    return cur_.bucket_count();
  }

  /// How many times a full table was moved aside.
  size_t moves() const noexcept {
    return moves_;
  }

private:
  static constexpr size_t initial_size = 16;

  // Before an insert into `cur_`: moves `step_` elements across, or, when
  // the insert would make `cur_` rehash, moves `cur_` aside.
  void make_room() {
    migrate(step_);
    if (static_cast<double>(cur_.size() + 1)
        <= static_cast<double>(cur_.bucket_count()) * cur_.max_load_factor())
      return;
    // Only small tables get here with an old one left (the bound above
    // holds from a few elements on): finishing it is cheap.
    migrate(old_.size());
    auto n = cur_.size();
    old_.swap(cur_);
    map_type fresh;
    fresh.max_load_factor(old_.max_load_factor());
    fresh.reserve(std::max<size_t>(2 * n, initial_size));
    cur_.swap(fresh);
    ++moves_;
  }

  void migrate(size_t n) {
    while (n-- > 0 && !old_.empty())
      cur_.insert(old_.extract(old_.begin()));
  }

  size_t step_;
  size_t moves_ = 0;
  map_type cur_;
  map_type old_;
};

} // namespace oncegate
