#include "persistence/local_sink.hpp"

#include <string>
#include <utility>

#include "common/errc.hpp"
#include "common/logging.hpp"
#include "persistence/sqlite_store.hpp"

namespace oncegate::persistence {

local_sink::local_sink(std::shared_ptr<sqlite_store> db) : db_(std::move(db)) {
  // Continue the numbering where the file left it.
  if (auto applied = db_->applied_index())
    next_index_ = *applied + 1;
}

sink_traits local_sink::traits() const {
  // One synchronous batch at a time, unbounded in bytes (nothing keeps it
  // in memory after COMMIT), and what is queued at exit still commits.
  return sink_traits{};
}

sqlite_store& local_sink::reader() {
  return *db_;
}

int64_t local_sink::stamp(int64_t requested_ms) {
  return requested_ms;
}

caf::error local_sink::refusal() {
  return {};
}

std::optional<batch_outcome> local_sink::commit(std::vector<command>& batch,
                                                commit_callback) {
  auto results = apply_batch(*db_, next_index_, batch);
  if (results && results->size() != batch.size())
    results = make_error(errc::storage_failure,
                         "batch " + std::to_string(next_index_)
                           + " was applied before");
  if (!results) {
    log::store()->error("store.commit_failed batch={} error={}", batch.size(),
                        describe(results.error()));
    return results;
  }
  ++next_index_;
  return results;
}

} // namespace oncegate::persistence
