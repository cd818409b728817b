#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "persistence/command.hpp"
#include "persistence/sqlite_store.hpp"

struct raft;
struct raft_buffer;
struct raft_fsm;

namespace oncegate::cluster {

/// The replicated state machine: libraft's FSM callbacks over one node's
/// SQLite store. Each committed log entry is a batch of commands
/// (`persistence::encode_batch`), applied with `persistence::apply_batch` in
/// one transaction together with its index, so a restart replays only what
/// the file has not seen. The results reach the proposer through libraft's
/// apply callback (`raft_apply_cb`'s `result`: a heap-allocated
/// `std::vector<command_result>` the callback takes ownership of; null when
/// the entry failed to apply).
///
/// All calls happen on the raft loop thread.
class raft_fsm_adapter {
public:
  explicit raft_fsm_adapter(persistence::sqlite_store& db);
  ~raft_fsm_adapter();

  raft_fsm_adapter(const raft_fsm_adapter&) = delete;
  raft_fsm_adapter& operator=(const raft_fsm_adapter&) = delete;

  /// The libraft FSM (version 1: apply, snapshot, restore).
  raft_fsm* fsm();

  /// Points the adapter at the raft instance whose `raft_last_applied`
  /// numbers the entries (set once, after `raft_init`).
  void attach(::raft* r);

  /// Entries that failed to apply (decode or SQLite errors).
  uint64_t failures() const {
    return failures_;
  }

private:
  static int apply(::raft_fsm* fsm, const ::raft_buffer* buf, void** result);
  static int snapshot(::raft_fsm* fsm, ::raft_buffer* bufs[], unsigned* n);
  static int restore(::raft_fsm* fsm, ::raft_buffer* buf);

  persistence::sqlite_store& db_;
  ::raft* raft_ = nullptr;
  std::unique_ptr<raft_fsm> fsm_;
  uint64_t failures_ = 0;
};

} // namespace oncegate::cluster
