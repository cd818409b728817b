#include "cluster/raft_fsm.hpp"

// libraft 0.15's headers lack extern "C" guards.
extern "C" {
#include <raft.h>
}

#include "common/errc.hpp"
#include "common/logging.hpp"

namespace oncegate::cluster {

raft_fsm_adapter::raft_fsm_adapter(persistence::sqlite_store& db)
  : db_(db), fsm_(std::make_unique<raft_fsm>()) {
  *fsm_ = raft_fsm{};
  fsm_->version = 1;
  fsm_->data = this;
  fsm_->apply = &raft_fsm_adapter::apply;
  fsm_->snapshot = &raft_fsm_adapter::snapshot;
  fsm_->restore = &raft_fsm_adapter::restore;
}

raft_fsm_adapter::~raft_fsm_adapter() {
  // nop
}

raft_fsm* raft_fsm_adapter::fsm() {
  return fsm_.get();
}

void raft_fsm_adapter::attach(::raft* r) {
  raft_ = r;
}

int raft_fsm_adapter::apply(::raft_fsm* fsm, const ::raft_buffer* buf,
                            void** result) {
  auto self = static_cast<raft_fsm_adapter*>(fsm->data);
  *result = nullptr;
  // Inside apply, the entry's index is the last applied one plus one.
  auto index = static_cast<uint64_t>(raft_last_applied(self->raft_)) + 1;
  std::string_view entry{static_cast<const char*>(buf->base), buf->len};
  auto batch = persistence::decode_batch(entry);
  if (!batch) {
    ++self->failures_;
    log::cluster()->error("fsm.bad_entry index={} error={}", index,
                          describe(batch.error()));
    return 0; // every replica skips the same bad entry
  }
  auto res = persistence::apply_batch(self->db_, index, *batch);
  if (!res) {
    ++self->failures_;
    log::cluster()->critical("fsm.apply_failed index={} error={}", index,
                             describe(res.error()));
    return RAFT_IOERR;
  }
  *result = new std::vector<persistence::command_result>(std::move(*res));
  return 0;
}

int raft_fsm_adapter::snapshot(::raft_fsm*, ::raft_buffer*[], unsigned*) {
  // Not yet: snapshots (the SQLite file via the backup API) come with the
  // cluster node; until then the log is kept whole (threshold set high).
  return RAFT_NOTFOUND;
}

int raft_fsm_adapter::restore(::raft_fsm*, ::raft_buffer* buf) {
  raft_free(buf->base);
  return RAFT_NOTFOUND;
}

} // namespace oncegate::cluster
