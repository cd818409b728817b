#include "replication/replicated_store.hpp"

#include <chrono>
#include <iterator>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

extern "C" {
#include <raft.h>
}

#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/event_based_actor.hpp>

#include "common/errc.hpp"
#include "common/mutant.hpp"
#include "common/logging.hpp"
#include "persistence/batch_clock.hpp"
#include "persistence/command.hpp"

namespace oncegate::cluster {

namespace {

// The outcome of one proposed entry, sent by the Raft thread.
struct proposal_outcome {
  uint64_t seq = 0;
  int status = 0;
  std::vector<persistence::command_result> results;
};

} // namespace

} // namespace oncegate::cluster

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(oncegate::cluster::proposal_outcome)

namespace oncegate::cluster {

namespace {

using persistence::command;
using persistence::store_actor;

// Who waits for one queued command (the promise of its kind is used).
struct waiter {
  command::kind type = command::kind::claim;
  caf::response_promise rp;

  void fail(const caf::error& err) {
    rp.deliver(err);
  }
};

caf::error proposal_error(int status) {
  switch (status) {
    case RAFT_NOTLEADER:
      return make_error(errc::not_leader, "not the raft leader");
    case RAFT_LEADERSHIPLOST:
      return make_error(errc::leadership_lost,
                        "leadership lost; the entry may still commit");
    case RAFT_BUSY:
      return make_error(errc::overloaded, "raft proposal queue full");
    default:
      return make_error(errc::commit_failed,
                        std::string{"raft: "} + raft_strerror(status));
  }
}

struct replicated_state {
  std::shared_ptr<raft_node> raft;
  std::shared_ptr<persistence::sqlite_store> reader;
  replicated_store_options opts;
  /// The leader's clock: stamps every claim and purge it proposes, so that
  /// one clock (the log's, see `apply_batch`) decides, whichever node
  /// received the request; carried forward from the log's time when this
  /// node's clock is behind it (see `batch_clock`).
  persistence::batch_clock clock{wall_clock_ms};

  int64_t stamp() {
    auto log_clock = reader->clock_ms();
    return clock.stamp(log_clock ? *log_clock : 0);
  }
  std::vector<command> pending;
  std::vector<waiter> waiters;
  /// Bytes of `pending` (as encoded).
  uint64_t pending_bytes = 0;
  // Entries in flight, by sequence number.
  std::unordered_map<uint64_t, std::vector<waiter>> outstanding;
  uint64_t next_seq = 1;
  bool flush_scheduled = false;
  persistence::store_stats stats;
  std::unordered_map<uint64_t, std::chrono::steady_clock::time_point> started;

  static inline const char* name = "oncegate.replicated_store";
};

// Dynamically typed (it also handles the Raft thread's outcomes) and handed
// out as a `store_actor`, whose messages it answers with the same types.
using store_pointer = caf::stateful_actor<replicated_state>*;

// Proposes the pending commands as log entries while fewer than
// `max_outstanding` are in flight.
void flush(store_pointer self) {
  auto& st = self->state;
  st.flush_scheduled = false;
  // A follower proposes nothing (libraft would refuse it anyway).
  if (!st.pending.empty() && st.raft->brief().role != raft_role::leader) {
    auto err = make_error(errc::not_leader, "not the raft leader");
    for (auto& w : st.waiters)
      w.fail(err);
    st.pending.clear();
    st.waiters.clear();
    st.pending_bytes = 0;
    return;
  }
  while (!st.pending.empty()
         && st.outstanding.size() < st.opts.max_outstanding) {
    // Bounded by count and by bytes: libraft keeps each entry in memory
    // until a snapshot covers it (see `raft_options::max_log_bytes`).
    size_t n = 0;
    size_t bytes = 0;
    while (n < st.pending.size() && n < st.opts.max_batch) {
      auto more = persistence::encoded_size(st.pending[n]);
      if (n > 0 && bytes + more > st.opts.max_entry_bytes)
        break;
      bytes += more;
      ++n;
    }
    std::vector<command> batch(
      std::make_move_iterator(st.pending.begin()),
      std::make_move_iterator(st.pending.begin() + n));
    std::vector<waiter> waiting(
      std::make_move_iterator(st.waiters.begin()),
      std::make_move_iterator(st.waiters.begin() + n));
    st.pending.erase(st.pending.begin(), st.pending.begin() + n);
    st.waiters.erase(st.waiters.begin(), st.waiters.begin() + n);
    st.pending_bytes -= std::min(st.pending_bytes, bytes);
    auto t = st.stamp();
    for (auto& cmd : batch) {
      if (cmd.type == command::kind::claim)
        cmd.claim.now_ms = t;
      else if (cmd.type == command::kind::purge)
        cmd.now_ms = t;
    }
#ifdef ONCEGATE_MUTANTS
    // Mutant answer-before-majority: claims are answered when proposed,
    // decided from what this node applied so far (the later answer is
    // dropped: a response promise delivers once).
    if (ONCEGATE_MUTANT("answer-before-majority"))
      for (size_t k = 0; k < batch.size(); ++k) {
        if (batch[k].type != command::kind::claim)
          continue;
        auto& req = batch[k].claim;
        claim_result res;
        auto cur = st.reader->load(req.route, req.key);
        auto h = cur && cur->found ? std::optional<holder>{holder_of(cur->rec)}
                                   : std::nullopt;
        res.outcome = decide(h ? &*h : nullptr, req.fingerprint, req.request_id,
                             req.owner, req.now_ms)
                        .value_or(decision::duplicate);
        if (res.outcome == decision::accepted || res.outcome == decision::renewed)
          res.rec = make_record(req);
        else
          res.rec = std::move(cur->rec);
        waiting[k].rp.deliver(std::move(res));
      }
#endif
    auto seq = st.next_seq++;
    st.outstanding.emplace(seq, std::move(waiting));
    st.started.emplace(seq, std::chrono::steady_clock::now());
    caf::actor hdl = caf::actor_cast<caf::actor>(self);
    st.raft->propose(persistence::encode_batch(batch),
                     [hdl, seq](int status,
                                std::vector<persistence::command_result> res) {
                       caf::anon_send(hdl, proposal_outcome{seq, status,
                                                            std::move(res)});
                     });
  }
}

void settle(store_pointer self, proposal_outcome& out) {
  auto& st = self->state;
  auto i = st.outstanding.find(out.seq);
  if (i == st.outstanding.end())
    return;
  auto waiting = std::move(i->second);
  st.outstanding.erase(i);
  auto t = st.started.find(out.seq);
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - t->second)
                .count();
  st.started.erase(t);
  if (out.status == 0 && out.results.size() != waiting.size())
    out.status = RAFT_IOERR; // skipped as applied before: cannot happen
  if (out.status != 0) {
    ++st.stats.failed_commits;
    auto err = proposal_error(out.status);
    log::store()->warn("store.proposal_failed commands={} error={}",
                       waiting.size(), describe(err));
    for (auto& w : waiting)
      w.fail(err);
  } else {
    ++st.stats.commits;
    st.stats.commit_seconds.observe(secs);
    st.stats.batch_size.observe(static_cast<double>(waiting.size()));
    st.stats.committed_ops += waiting.size();
    st.stats.max_batch = std::max<uint64_t>(st.stats.max_batch,
                                            waiting.size());
    for (size_t k = 0; k < waiting.size(); ++k) {
      auto& res = out.results[k];
      auto& w = waiting[k];
      switch (w.type) {
        case command::kind::claim:
          w.rp.deliver(std::move(res.claim));
          break;
        case command::kind::update:
          w.rp.deliver(std::move(res.update));
          break;
        case command::kind::doubt:
          w.rp.deliver(res.doubted);
          break;
        default: {
          st.stats.purged += res.purged;
          purge_result pr;
          pr.purged = res.purged;
          if (auto next = st.reader->next_expiry())
            pr.next_due_ms = *next;
          w.rp.deliver(pr);
          break;
        }
      }
    }
  }
  flush(self);
}

void enqueue(store_pointer self, command&& cmd, waiter&& w) {
  auto& st = self->state;
  auto bytes = persistence::encoded_size(cmd);
  if (st.pending.size() >= st.opts.max_pending
      || (!st.pending.empty()
          && st.pending_bytes + bytes > st.opts.max_pending_bytes)) {
    w.fail(make_error(errc::overloaded, "store queue full"));
    return;
  }
  st.pending_bytes += bytes;
  w.type = cmd.type;
  st.pending.emplace_back(std::move(cmd));
  st.waiters.emplace_back(std::move(w));
  if (!st.flush_scheduled) {
    st.flush_scheduled = true;
    self->send(self, flush_atom::value);
  }
}

caf::behavior
replicated_impl(store_pointer self, std::shared_ptr<raft_node> raft,
                std::shared_ptr<persistence::sqlite_store> reader,
                replicated_store_options opts, wall_clock_fn now) {
  auto& st = self->state;
  st.clock = persistence::batch_clock{std::move(now)};
  st.raft = std::move(raft);
  st.reader = std::move(reader);
  st.opts = opts;
  st.opts.max_outstanding = std::max<uint32_t>(st.opts.max_outstanding, 1);
  st.opts.max_batch = std::max<uint32_t>(st.opts.max_batch, 1);
  // Whatever is still queued at exit was never proposed: nothing happened.
  self->attach_functor([self] {
    auto err = make_error(errc::store_unavailable, "store stopped");
    for (auto& w : self->state.waiters)
      w.fail(err);
    for (auto& kvp : self->state.outstanding)
      for (auto& w : kvp.second)
        w.fail(make_error(errc::leadership_lost, "store stopped"));
  });
  return {
    [self](claim_atom, claim_request& req) {
      command cmd;
      cmd.type = command::kind::claim;
      cmd.claim = std::move(req);
      waiter w;
      w.rp = self->make_response_promise();
      auto rp = w.rp;
      enqueue(self, std::move(cmd), std::move(w));
      return rp;
    },
    [self](update_atom, record_update& upd) {
      command cmd;
      cmd.type = command::kind::update;
      cmd.update = std::move(upd);
      waiter w;
      w.rp = self->make_response_promise();
      auto rp = w.rp;
      enqueue(self, std::move(cmd), std::move(w));
      return rp;
    },
    [self](purge_atom, int64_t now_ms, uint32_t limit) {
      // Records in flight past their forward deadline turn in-doubt first
      // (no one waits for that answer), then the expired ones go.
      if (self->state.opts.in_flight_deadline_ms > 0) {
        command doubt;
        doubt.type = command::kind::doubt;
        doubt.owner = 0;
        doubt.before_ms = self->state.stamp()
                          - self->state.opts.in_flight_deadline_ms;
        enqueue(self, std::move(doubt), waiter{});
      }
      command cmd;
      cmd.type = command::kind::purge;
      cmd.now_ms = now_ms;
      cmd.limit = limit;
      waiter w;
      w.rp = self->make_response_promise();
      auto rp = w.rp;
      enqueue(self, std::move(cmd), std::move(w));
      return rp;
    },
    // Not part of `store_actor`: the cluster's front sends it (as a
    // dynamically typed message) to doubt a node's earlier in-flight records.
    [self](doubt_atom, uint64_t owner, int64_t before_ms) {
      command cmd;
      cmd.type = command::kind::doubt;
      cmd.owner = owner;
      cmd.before_ms = before_ms;
      waiter w;
      w.rp = self->make_response_promise();
      auto rp = w.rp;
      enqueue(self, std::move(cmd), std::move(w));
      return rp;
    },
    [self](get_atom, const std::string& route,
           const std::string& key) -> caf::result<lookup_result> {
      auto res = self->state.reader->load(route, key);
      if (!res)
        return std::move(res.error());
      return std::move(*res);
    },
    [self](list_atom, const std::string& route, record_state state,
           const std::string& after,
           uint32_t limit) -> caf::result<record_page> {
      auto res = self->state.reader->list(route, state, after, limit);
      if (!res)
        return std::move(res.error());
      return std::move(*res);
    },
    [self](next_atom) -> caf::result<int64_t> {
      auto res = self->state.reader->next_expiry();
      if (!res)
        return std::move(res.error());
      return *res;
    },
    [self](stats_atom) {
      auto stats = self->state.stats;
      if (auto xs = self->state.reader->unsettled())
        stats.unsettled = std::move(*xs);
      return stats;
    },
    [self](count_atom) -> caf::result<uint64_t> {
      auto res = self->state.reader->count();
      if (!res)
        return std::move(res.error());
      return *res;
    },
    [self](flush_atom) { flush(self); },
    [self](proposal_outcome& out) { settle(self, out); },
  };
}

} // namespace

store_actor spawn_replicated_store(caf::actor_system& sys,
                                   std::shared_ptr<raft_node> raft,
                                   std::shared_ptr<persistence::sqlite_store>
                                     reader,
                                   replicated_store_options opts,
                                   wall_clock_fn now) {
  auto hdl = sys.spawn<caf::detached>(replicated_impl, std::move(raft),
                                      std::move(reader), opts,
                                      std::move(now));
  return caf::actor_cast<store_actor>(hdl);
}

} // namespace oncegate::cluster
