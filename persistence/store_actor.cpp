#include "persistence/store_actor.hpp"

#include "common/mutant.hpp"

#include <chrono>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "common/errc.hpp"
#include "common/logging.hpp"
#include "persistence/command.hpp"
#include "persistence/sqlite_store.hpp"

namespace oncegate::persistence {

namespace {

// Who waits for one queued command (the promise of its kind is used).
struct waiter {
  caf::typed_response_promise<claim_result> claim_rp;
  caf::typed_response_promise<update_result> update_rp;
  caf::typed_response_promise<purge_result> purge_rp;

  void fail(command::kind type, const caf::error& err) {
    switch (type) {
      case command::kind::claim:
        claim_rp.deliver(err);
        break;
      case command::kind::update:
        update_rp.deliver(err);
        break;
      case command::kind::purge:
        purge_rp.deliver(err);
        break;
      case command::kind::doubt:
        break; // queued by a purge, which answers for both
    }
  }
};

struct store_state {
  std::shared_ptr<sqlite_store> db;
  store_actor_options opts;
  /// Commands waiting for the next transaction, and who waits for each.
  std::vector<command> pending;
  std::vector<waiter> waiters;
  /// Bytes of `pending` (as encoded).
  uint64_t pending_bytes = 0;
  /// Index of the next batch: a single node numbers its transactions like
  /// log entries, so that it applies them exactly as a replica would.
  uint64_t next_index = 1;
  bool flush_scheduled = false;
  store_stats stats;

  static inline const char* name = "oncegate.store";

  // Applies the first `max_batch` pending commands as one batch (one
  // transaction, see `apply_batch`) and answers them. Results are computed
  // inside the transaction but delivered only after COMMIT returned.
  void flush() {
    flush_scheduled = false;
    if (pending.empty())
      return;
    auto n = std::min<size_t>(pending.size(), opts.max_batch);
    std::vector<command> batch(std::make_move_iterator(pending.begin()),
                               std::make_move_iterator(pending.begin() + n));
    std::vector<waiter> waiting(std::make_move_iterator(waiters.begin()),
                                std::make_move_iterator(waiters.begin() + n));
    pending.erase(pending.begin(), pending.begin() + n);
    for (auto& cmd : batch)
      pending_bytes -= std::min<uint64_t>(pending_bytes, encoded_size(cmd));
    waiters.erase(waiters.begin(), waiters.begin() + n);
    auto started = std::chrono::steady_clock::now();
    auto results = apply_batch(*db, next_index, batch);
    if (results && results->size() != batch.size())
      results = make_error(errc::storage_failure,
                           "batch " + std::to_string(next_index)
                             + " was applied before");
    if (!results) {
      ++stats.failed_commits;
      log::store()->error("store.commit_failed batch={} error={}",
                          batch.size(),
                          describe(results.error()));
      for (size_t i = 0; i < batch.size(); ++i)
        waiting[i].fail(batch[i].type, results.error());
      return;
    }
    ++next_index;
    ++stats.commits;
    stats.commit_seconds.observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
        .count());
    stats.batch_size.observe(static_cast<double>(batch.size()));
    stats.committed_ops += batch.size();
    stats.max_batch = std::max<uint64_t>(stats.max_batch, batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      auto& res = (*results)[i];
      switch (batch[i].type) {
        case command::kind::claim:
          waiting[i].claim_rp.deliver(std::move(res.claim));
          break;
        case command::kind::update:
          waiting[i].update_rp.deliver(std::move(res.update));
          break;
        case command::kind::purge: {
          stats.purged += res.purged;
          purge_result pr;
          pr.purged = res.purged;
          if (auto next = db->next_expiry())
            pr.next_due_ms = *next;
          waiting[i].purge_rp.deliver(pr);
          break;
        }
        case command::kind::doubt:
          if (res.doubted > 0)
            log::store()->warn("store.in_flight_doubted count={} reason="
                               "past_forward_deadline",
                               res.doubted);
          break; // queued by a purge (see `waiter::fail`)
      }
    }
  }
};

using store_pointer = store_actor::stateful_pointer<store_state>;

// Queues `op`; the flush message goes behind everything already in the
// mailbox, so all operations that arrived during the previous commit share
// the next transaction.
void enqueue(store_pointer self, command&& cmd, waiter&& w) {
  auto& st = self->state;
  auto bytes = encoded_size(cmd);
  if (st.pending.size() >= st.opts.max_pending
      || (!st.pending.empty()
          && st.pending_bytes + bytes > st.opts.max_pending_bytes)) {
    w.fail(cmd.type, make_error(errc::overloaded, "store queue full"));
    return;
  }
  st.pending_bytes += bytes;
  st.pending.emplace_back(std::move(cmd));
  st.waiters.emplace_back(std::move(w));
#ifdef ONCEGATE_MUTANTS
  // Mutant ack-before-commit: claims were answered already (see
  // `unsafe_claim`), batches commit 100 ms later.
  if (ONCEGATE_MUTANT("ack-before-commit")) {
    if (!st.flush_scheduled) {
      st.flush_scheduled = true;
      self->delayed_send(self, std::chrono::milliseconds(100),
                         flush_atom::value);
    }
    return;
  }
#endif
  if (!st.flush_scheduled) {
    st.flush_scheduled = true;
    self->send(self, flush_atom::value);
  }
}

#ifdef ONCEGATE_MUTANTS
// Mutants ack-before-commit and quiet-ack (BROKEN ON PURPOSE, common/
// mutant.hpp): decides from what is committed so far and answers at once;
// the write commits later (100 ms later, or on the next flush like any
// write: then only the fsync window separates the answer from the commit).
claim_result unsafe_claim(store_pointer self, claim_request&& req) {
  claim_result res;
  auto cur = self->state.db->load(req.route, req.key);
  auto h = cur && cur->found ? std::optional<holder>{holder_of(cur->rec)}
                             : std::nullopt;
  res.outcome = decide(h ? &*h : nullptr, req.fingerprint, req.request_id,
                       req.owner, req.now_ms)
                  .value_or(decision::duplicate);
  if (res.outcome == decision::accepted || res.outcome == decision::renewed)
    res.rec = make_record(req);
  else
    res.rec = std::move(cur->rec);
  command cmd;
  cmd.type = command::kind::claim;
  cmd.claim = std::move(req);
  enqueue(self, std::move(cmd), waiter{});
  return res;
}
#endif

store_actor::behavior_type store_impl(store_pointer self,
                                      std::shared_ptr<sqlite_store> db,
                                      store_actor_options opts) {
  self->state.db = std::move(db);
  self->state.opts = opts;
  // Continue the numbering where the file left it.
  if (auto applied = self->state.db->applied_index())
    self->state.next_index = *applied + 1;
  // Commit what is queued before going away: those requests were accepted,
  // and their senders are still waiting for an answer.
  self->set_exit_handler([self](const caf::exit_msg& msg) {
    while (!self->state.pending.empty())
      self->state.flush();
    self->quit(msg.reason);
  });
  return {
    [self](claim_atom, claim_request& req) -> caf::result<claim_result> {
#ifdef ONCEGATE_MUTANTS
      if (ONCEGATE_MUTANT("ack-before-commit") || ONCEGATE_MUTANT("quiet-ack"))
        return unsafe_claim(self, std::move(req));
#endif
      command cmd;
      cmd.type = command::kind::claim;
      cmd.claim = std::move(req);
      waiter w;
      w.claim_rp = self->make_response_promise<claim_result>();
      auto rp = w.claim_rp;
      enqueue(self, std::move(cmd), std::move(w));
      return rp;
    },
    [self](update_atom, record_update& upd) {
      command cmd;
      cmd.type = command::kind::update;
      cmd.update = std::move(upd);
      waiter w;
      w.update_rp = self->make_response_promise<update_result>();
      auto rp = w.update_rp;
      enqueue(self, std::move(cmd), std::move(w));
      return rp;
    },
    [self](get_atom, const std::string& route,
           const std::string& key) -> caf::result<lookup_result> {
      auto res = self->state.db->load(route, key);
      if (!res)
        return std::move(res.error());
      return std::move(*res);
    },
    [self](purge_atom, int64_t now_ms, uint32_t limit) {
      // Records in flight past their forward deadline turn in-doubt first
      // (no one waits for that answer), then the expired ones go.
      if (self->state.opts.in_flight_deadline_ms > 0) {
        command doubt;
        doubt.type = command::kind::doubt;
        doubt.owner = 0;
        doubt.before_ms = now_ms - self->state.opts.in_flight_deadline_ms;
        enqueue(self, std::move(doubt), waiter{});
      }
      command cmd;
      cmd.type = command::kind::purge;
      cmd.now_ms = now_ms;
      cmd.limit = limit;
      waiter w;
      w.purge_rp = self->make_response_promise<purge_result>();
      auto rp = w.purge_rp;
      enqueue(self, std::move(cmd), std::move(w));
      return rp;
    },
    [self](list_atom, const std::string& route, record_state state,
           const std::string& after,
           uint32_t limit) -> caf::result<record_page> {
      auto res = self->state.db->list(route, state, after, limit);
      if (!res)
        return std::move(res.error());
      return std::move(*res);
    },
    [self](next_atom) -> caf::result<int64_t> {
      auto res = self->state.db->next_expiry();
      if (!res)
        return std::move(res.error());
      return *res;
    },
    [self](stats_atom) {
      auto stats = self->state.stats;
      if (auto xs = self->state.db->unsettled())
        stats.unsettled = std::move(*xs);
      return stats;
    },
    [self](count_atom) -> caf::result<uint64_t> {
      auto res = self->state.db->count();
      if (!res)
        return std::move(res.error());
      return *res;
    },
    [self](flush_atom) {
      auto& st = self->state;
      st.flush();
      // More than one batch queued: the next goes behind what arrived
      // meanwhile, as the first did. Every operation waiting in the mailbox
      // is in `pending` before a commit starts, so `max_pending` bounds the
      // whole queue (a commit that stalls makes the mailbox grow, not the
      // work: what does not fit is refused at once).
      if (!st.pending.empty() && !st.flush_scheduled) {
        st.flush_scheduled = true;
        self->send(self, flush_atom::value);
      }
    },
  };
}

} // namespace

store_actor spawn_store(caf::actor_system& sys,
                        std::shared_ptr<sqlite_store> db,
                        store_actor_options opts, bool detached) {
  if (detached)
    return sys.spawn<caf::detached>(store_impl, std::move(db), opts);
  return sys.spawn(store_impl, std::move(db), opts);
}

} // namespace oncegate::persistence
