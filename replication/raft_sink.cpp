#include "replication/raft_sink.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

extern "C" {
#include <raft.h>
}

#include "common/errc.hpp"
#include "common/logging.hpp"
#include "common/stage_trace.hpp"
#include "persistence/command.hpp"

namespace oncegate::cluster {

namespace {

using persistence::command;

caf::error proposal_error(int status) {
  switch (status) {
    case RAFT_NOTLEADER:
      return make_error(errc::not_leader, "not the raft leader");
    case RAFT_LEADERSHIPLOST:
      return make_error(errc::leadership_lost,
                        "leadership lost; the entry may still commit");
    case RAFT_BUSY: // never proposed (see `raft_node::propose`)
      return make_error(errc::overloaded,
                        "raft log at its byte bound or proposal queue full; "
                        "not proposed");
    default:
      return make_error(errc::commit_failed,
                        std::string{"raft: "} + raft_strerror(status));
  }
}

} // namespace

raft_sink::raft_sink(std::shared_ptr<raft_node> raft,
                     std::shared_ptr<persistence::sqlite_store> reader,
                     const replicated_store_options& opts, wall_clock_fn now)
  : raft_(std::move(raft)),
    reader_(std::move(reader)),
    group_(opts.group),
    clock_(std::move(now)) {
  traits_.max_in_flight = std::max<uint32_t>(opts.max_outstanding, 1);
  // Bounded by bytes as well as by count: libraft keeps each entry in
  // memory until a snapshot covers it (see
  // `raft_node_options::max_log_bytes`, whose back-pressure holds these
  // entries or refuses them as `overloaded`).
  traits_.max_batch_bytes = opts.max_entry_bytes;
  traits_.commit_on_exit = false;
}

persistence::sink_traits raft_sink::traits() const {
  return traits_;
}

persistence::sqlite_store& raft_sink::reader() {
  return *reader_;
}

int64_t raft_sink::stamp(int64_t) {
  auto log_clock = reader_->clock_ms();
  return clock_.stamp(log_clock ? *log_clock : 0);
}

caf::error raft_sink::refusal() {
  if (raft_->brief(group_).role != raft_role::leader)
    return make_error(errc::not_leader, "not the raft leader");
  return {};
}

std::optional<persistence::batch_outcome>
raft_sink::commit(std::vector<command>& batch,
                  persistence::commit_callback done) {
  auto t = stamp(0);
  for (auto& cmd : batch) {
    if (cmd.type == command::kind::claim)
      cmd.claim.now_ms = t;
    else if (cmd.type == command::kind::purge
             || cmd.type == command::kind::pause)
      cmd.now_ms = t;
  }
  auto n = batch.size();
  stage_trace::mark("sink.propose", n);
  raft_->propose(persistence::encode_batch(batch),
                 [n, done = std::move(done)](
                   int status, std::vector<persistence::command_result> res) {
                   stage_trace::mark("sink.done", n);
                   if (status == 0 && res.size() != n)
                     status = RAFT_IOERR; // skipped as applied before: cannot
                                          // happen
                   if (status == 0) {
                     done(std::move(res));
                     return;
                   }
                   auto err = proposal_error(status);
                   log::store()->warn("store.proposal_failed commands={} "
                                      "error={}",
                                      n, describe(err));
                   done(std::move(err));
                 },
                 group_);
  return std::nullopt;
}

persistence::store_actor
spawn_replicated_store(caf::actor_system& sys, std::shared_ptr<raft_node> raft,
                       std::shared_ptr<persistence::sqlite_store> reader,
                       replicated_store_options opts, wall_clock_fn now) {
  auto sink = std::make_shared<raft_sink>(std::move(raft), std::move(reader),
                                          opts, std::move(now));
  return persistence::spawn_store(sys, std::move(sink), opts, opts.detached);
}

} // namespace oncegate::cluster
