#pragma once

#include <cstdint>
#include <memory>

#include "persistence/commit_sink.hpp"

namespace oncegate::persistence {

/// A single node's sink: applies each batch with `apply_batch` on the
/// SQLite writer, in one transaction, before `commit` returns. Batches are
/// numbered like log entries, continuing where the file left off, so a
/// single node applies them exactly as a replica would.
class local_sink final : public commit_sink {
public:
  /// `db` is the writer; the store actor is its only user.
  explicit local_sink(std::shared_ptr<sqlite_store> db);

  sink_traits traits() const override;

  sqlite_store& reader() override;

  /// The request's own time: its node clock decides.
  int64_t stamp(int64_t requested_ms) override;

  /// Never refuses.
  caf::error refusal() override;

  /// Applies `batch` as the next index; answers after COMMIT returned.
  std::optional<batch_outcome> commit(std::vector<command>& batch,
                                      commit_callback done) override;

private:
  std::shared_ptr<sqlite_store> db_;
  uint64_t next_index_ = 1;
};

} // namespace oncegate::persistence
