#include "api/decision_cache.hpp"

#include <algorithm>
#include <functional>
#include <tuple>

namespace oncegate::gateway {

namespace {

constexpr std::size_t shard_count = 64;

} // namespace

// What an entry costs beyond its key and stored answer: the map node (with
// the fingerprint and the order links), its bucket, the allocators'
// headers.
constexpr std::size_t entry_overhead = 160;

void decision_cache::shard::link(node& n) {
  n.second.older = newest;
  n.second.newer = nullptr;
  if (newest != nullptr)
    newest->second.newer = &n;
  else
    oldest = &n;
  newest = &n;
}

void decision_cache::shard::erase(
  std::unordered_map<std::string, entry>::iterator i) {
  auto& e = i->second;
  (e.older != nullptr ? e.older->second.newer : oldest) = e.newer;
  (e.newer != nullptr ? e.newer->second.older : newest) = e.older;
  bytes -= e.cost;
  map.erase(i);
}

void decision_cache::shard::clear() {
  map.clear();
  oldest = newest = nullptr;
  bytes = 0;
}

decision_cache::decision_cache(std::size_t capacity, std::size_t max_bytes)
  : capacity_(capacity),
    per_shard_(capacity == 0 ? 0 : std::max<std::size_t>(capacity / shard_count, 1)),
    per_shard_bytes_(max_bytes == 0
                       ? SIZE_MAX
                       : std::max<std::size_t>(max_bytes / shard_count, 1024)),
    shards_(capacity == 0 ? 0 : shard_count) {
  // Buckets for every entry up front: a growing table rehashes every node
  // (measured: 1.3 % of a unique-key run's CPU while the cache filled).
  for (auto& sh : shards_)
    sh.map.reserve(std::min<std::size_t>(per_shard_, 1u << 20));
}

decision_cache::shard& decision_cache::shard_for(std::string_view routing) const {
  return shards_[std::hash<std::string_view>{}(routing) % shards_.size()];
}

uint64_t decision_cache::epoch(std::string_view routing) const {
  if (!enabled())
    return 0;
  return shard_for(routing).epoch.load(std::memory_order_acquire);
}

std::optional<cache_hit> decision_cache::lookup(std::string_view routing,
                                                std::string_view fingerprint,
                                                int64_t now_ms,
                                                bool with_body) const {
  if (!enabled())
    return std::nullopt;
  auto& sh = shard_for(routing);
  // C++17's unordered_map cannot look up by string_view; reuse one buffer
  // per thread instead of allocating a key per lookup.
  thread_local std::string probe;
  probe.assign(routing.data(), routing.size());
  std::lock_guard<std::mutex> guard{sh.mtx};
  auto i = sh.map.find(probe);
  if (i == sh.map.end())
    return std::nullopt;
  auto& e = i->second;
  // The one rule (common/record.hpp); only completed records are cached
  // (see `remember`), and only what it answers duplicate or mismatch is a
  // hit: anything else goes to the node.
  holder h{record_state::completed, e.expires_at_ms,
           std::string_view{e.fingerprint.data(), e.fingerprint_size}};
  auto d = decide(&h, fingerprint, 0, 0, now_ms);
  if (!cache_may_answer(d))
    return std::nullopt;
  if (with_body && !e.has_body)
    return std::nullopt;
  cache_hit hit;
  hit.outcome = *d;
  hit.first_seen_ms = e.first_seen_ms;
  hit.status = e.status;
  if (with_body) {
    hit.headers = e.headers;
    hit.response = e.response;
  }
  return hit;
}

void decision_cache::remember(const std::string& routing, const record& rec,
                              uint64_t epoch_seen, bool with_body) {
  if (!enabled() || rec.state != record_state::completed
      || rec.fingerprint.size() > std::tuple_size<decltype(entry::fingerprint)>::value)
    return;
  auto base = entry_overhead + routing.size();
  auto body = rec.headers.size() + rec.response.size();
  with_body = with_body && base + body <= per_shard_bytes_ / 16;
  auto& sh = shard_for(routing);
  std::lock_guard<std::mutex> guard{sh.mtx};
  if (sh.epoch.load(std::memory_order_relaxed) != epoch_seen)
    return; // released since the claim was submitted
  auto [i, added] = sh.map.try_emplace(routing);
  auto& e = i->second;
  if (!added && e.first_seen_ms > rec.first_seen_ms)
    return; // a newer record of the key is already here
  sh.bytes -= e.cost;
  std::copy(rec.fingerprint.begin(), rec.fingerprint.end(),
            e.fingerprint.begin());
  e.fingerprint_size = static_cast<uint8_t>(rec.fingerprint.size());
  e.first_seen_ms = rec.first_seen_ms;
  e.expires_at_ms = rec.expires_at_ms;
  e.status = rec.status;
  e.has_body = with_body;
  if (with_body) {
    e.headers = rec.headers;
    e.response = rec.response;
  } else {
    std::string{}.swap(e.headers);
    std::string{}.swap(e.response);
  }
  e.cost = base + (with_body ? body : 0);
  sh.bytes += e.cost;
  if (added)
    sh.link(*i);
  // Oldest first, never the entry just made.
  while ((sh.map.size() > per_shard_ || sh.bytes > per_shard_bytes_)
         && sh.oldest != nullptr && sh.oldest != &*i)
    sh.erase(sh.map.find(sh.oldest->first));
}

void decision_cache::forget(std::string_view routing) {
  if (!enabled())
    return;
  auto& sh = shard_for(routing);
  std::lock_guard<std::mutex> guard{sh.mtx};
  sh.epoch.fetch_add(1, std::memory_order_acq_rel);
  if (auto i = sh.map.find(std::string{routing}); i != sh.map.end())
    sh.erase(i);
}

void decision_cache::forget_all() {
  for (auto& sh : shards_) {
    std::lock_guard<std::mutex> guard{sh.mtx};
    sh.epoch.fetch_add(1, std::memory_order_acq_rel);
    sh.clear();
  }
}

std::size_t decision_cache::bytes() const {
  std::size_t n = 0;
  for (auto& sh : shards_) {
    std::lock_guard<std::mutex> guard{sh.mtx};
    n += sh.bytes;
  }
  return n;
}

std::size_t decision_cache::size() const {
  std::size_t n = 0;
  for (auto& sh : shards_) {
    std::lock_guard<std::mutex> guard{sh.mtx};
    n += sh.map.size();
  }
  return n;
}

} // namespace oncegate::gateway
