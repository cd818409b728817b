#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/record.hpp"

namespace oncegate::gateway {

/// What a cache hit says about a duplicate.
struct cache_hit {
  /// `duplicate` (same payload as the stored record) or `mismatch` (the
  /// key reused with another payload), as the one rule decided.
  decision outcome = decision::duplicate;
  int64_t first_seen_ms = 0;
  uint16_t status = 0;
  /// Filled only when asked for (replay).
  std::string headers;
  std::string response;
};

/// Completed, committed decisions that HTTP threads may answer duplicates
/// from without a round trip through the actors.
///
/// Only records in state `completed` are kept: they never change until they
/// expire (checked on every lookup against the request's time) or an
/// operator releases them. A release calls `forget` before it is
/// acknowledged; `remember` carries the shard epoch read before the claim was
/// submitted and is dropped when a release happened in between, so a
/// decision that was current when it was made cannot outlive a release.
/// Anything else (in flight, in doubt, unknown) is a miss and goes to the
/// key's actor. Thread-safe; sharded mutexes.
class decision_cache {
public:
  /// `capacity` entries and `max_bytes` bytes (keys, fingerprints, stored
  /// answers and bookkeeping; 0: no byte bound) at most, oldest inserted
  /// evicted first; a capacity of 0 disables the cache. An answer too large
  /// for a sixteenth of a shard's bytes is kept without its body (replays
  /// of it miss and go to the key's actor).
  explicit decision_cache(std::size_t capacity,
                          std::size_t max_bytes = default_max_bytes);

  /// 64 MiB.
  static constexpr std::size_t default_max_bytes = 64 * 1024 * 1024;

  bool enabled() const {
    return capacity_ > 0;
  }

  /// The release epoch of the shard holding `routing`.
  uint64_t epoch(std::string_view routing) const;

  /// Looks up a live completed record for `routing` at `now_ms`; with
  /// `with_body`, only an entry that kept its answer's body is a hit.
  std::optional<cache_hit> lookup(std::string_view routing,
                                  std::string_view fingerprint, int64_t now_ms,
                                  bool with_body) const;

  /// Keeps `rec` if it is completed and no release happened in its shard
  /// since `epoch_seen`; a newer record of the key wins over an older one.
  /// `with_body`: keep the answer's headers and body (routes that replay
  /// duplicates); otherwise only what a 409 needs.
  void remember(const std::string& routing, const record& rec,
                uint64_t epoch_seen, bool with_body = true);

  /// Drops `routing` and advances its shard's epoch.
  void forget(std::string_view routing);

  /// Drops everything and advances every shard's epoch (the database was
  /// replaced: a snapshot installed). A decision in flight while this runs
  /// is not remembered after it.
  void forget_all();

  /// Entries held (tests, metrics).
  std::size_t size() const;

  /// Bytes held, as counted against `max_bytes` (tests, metrics).
  std::size_t bytes() const;

private:
  struct entry {
    /// The payload's fingerprint (SHA-256: 32 bytes; longer ones are not
    /// kept), without a heap block of its own.
    std::array<char, 32> fingerprint{};
    uint8_t fingerprint_size = 0;
    int64_t first_seen_ms = 0;
    int64_t expires_at_ms = 0;
    uint16_t status = 0;
    bool has_body = false;
    std::string headers;
    std::string response;
    std::size_t cost = 0;
    /// Insertion order (oldest evicted first), linked through the map's
    /// nodes, which never move: no second copy of the key, no lookup to
    /// find the oldest.
    std::pair<const std::string, entry>* older = nullptr;
    std::pair<const std::string, entry>* newer = nullptr;
  };
  using node = std::pair<const std::string, entry>;

  struct shard {
    mutable std::mutex mtx;
    std::unordered_map<std::string, entry> map;
    node* oldest = nullptr;
    node* newest = nullptr;
    std::atomic<uint64_t> epoch{0};
    std::size_t bytes = 0;

    void link(node& n);
    void erase(std::unordered_map<std::string, entry>::iterator i);
    void clear();
  };

  shard& shard_for(std::string_view routing) const;

  std::size_t capacity_;
  std::size_t per_shard_;
  /// Per shard; SIZE_MAX: unbounded.
  std::size_t per_shard_bytes_;
  mutable std::vector<shard> shards_;
};

} // namespace oncegate::gateway
