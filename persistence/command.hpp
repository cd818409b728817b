#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

#include "common/record.hpp"

namespace oncegate::persistence {

/// One state change of the store, as it travels in a replicated log entry
/// (the cluster) or is applied directly (a single node).
struct command {
  enum class kind : uint8_t {
    claim = 1,
    update = 2,
    purge = 3,
    doubt = 4,
    pause = 5,
  };
  kind type = kind::claim;
  claim_request claim;
  record_update update;
  /// For pauses: the route and what to do (`pause_op::pause` or `resume`).
  std::string route;
  pause_op pause = pause_op::read;
  /// For purges and pauses: the proposer's wall clock (every replica purges
  /// the same records, and a pause is stamped alike); for purges the chunk
  /// size.
  int64_t now_ms = 0;
  uint32_t limit = 0;
  /// For doubts (`sqlite_store::doubt`): whose in-flight records turn
  /// in-doubt (0: any owner's), and only those first seen before
  /// `before_ms` (INT64_MAX: all).
  uint64_t owner = 0;
  int64_t before_ms = 0;
};

/// Encodes a batch of commands as one log entry: a magic word (naming the
/// format's version), the count, then each command's fields (integers
/// little-endian, strings as a 32-bit length and bytes), zero-padded to a
/// multiple of 8 bytes (libraft's entries must be; an unpadded entry
/// corrupts its on-disk log).
std::string encode_batch(const std::vector<command>& batch);

/// Bytes `cmd` takes in an encoded batch.
std::size_t encoded_size(const command& cmd);

/// Decodes what `encode_batch` wrote; fails with `errc::invalid_argument`
/// on anything else (wrong magic, truncation, unknown kinds, trailing bytes
/// other than padding).
caf::expected<std::vector<command>> decode_batch(std::string_view entry);

/// The leader's stamp a batch carries (`raft_sink::commit` stamps every
/// claim and purge of a batch with its clock): the latest, or 0 when the
/// batch holds neither.
int64_t leader_stamp(const std::vector<command>& batch);

class sqlite_store;

/// The outcome of one command (the field of its kind is set).
struct command_result {
  claim_result claim;
  update_result update;
  uint64_t purged = 0;
  /// For doubts: how many records turned in-doubt.
  uint64_t doubted = 0;
  /// For pauses: the paused routes afterwards.
  route_pauses pauses;
};

/// Applies log entry `index` (a batch) to `db` in one transaction that also
/// records the index: the replicated state machine's step. An entry at or
/// below the recorded applied index was applied before a restart and is
/// skipped (answered with no results). Every replica computes the same
/// results from the same entries: decisions depend only on the entries'
/// contents, never on the local clock. Time is the store's clock
/// (`sqlite_store::clock_ms`): the latest claim or purge timestamp applied
/// so far, so it never moves backwards; a claim is decided (and its record
/// stamped) at `max(clock, claim.now_ms)`, a purge deletes what had expired
/// at `max(clock, purge.now_ms)`.
caf::expected<std::vector<command_result>>
apply_batch(sqlite_store& db, uint64_t index,
            const std::vector<command>& batch);

/// One log entry: its index and its batch.
struct log_entry {
  uint64_t index = 0;
  std::vector<command> batch;
};

/// Applies several entries, in order, in one transaction: as `apply_batch`
/// would one after the other (each skipped if applied before, each
/// recording its index), but with one commit. On an error none of them is
/// applied. The results are each entry's.
caf::expected<std::vector<std::vector<command_result>>>
apply_entries(sqlite_store& db, const std::vector<log_entry>& entries);

} // namespace oncegate::persistence
