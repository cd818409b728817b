#include "persistence/store_actor.hpp"

#include "common/mutant.hpp"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "common/errc.hpp"
#include "common/inline_execution.hpp"
#include "common/logging.hpp"
#include "common/stage_trace.hpp"
#include "persistence/command.hpp"
#include "persistence/sqlite_store.hpp"

namespace oncegate::persistence {

namespace {

using clock_type = std::chrono::steady_clock;

// Who waits for one queued command (the promise of its kind is used; a
// doubt queued by a purge has none: the purge answers for both).
struct waiter {
  command::kind type = command::kind::claim;
  caf::typed_response_promise<claim_result> claim_rp;
  caf::typed_response_promise<update_result> update_rp;
  caf::typed_response_promise<purge_result> purge_rp;
  caf::typed_response_promise<uint64_t> doubt_rp;
  caf::typed_response_promise<route_pauses> pause_rp;

  void fail(const caf::error& err) {
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
        if (doubt_rp.pending())
          doubt_rp.deliver(err);
        break;
      case command::kind::pause:
        pause_rp.deliver(err);
        break;
    }
  }
};

// A batch handed to an asynchronous sink, waiting for its outcome.
struct in_flight_batch {
  std::vector<waiter> waiting;
  clock_type::time_point started;
};

struct store_state {
  std::shared_ptr<commit_sink> sink;
  sink_traits traits;
  store_actor_options opts;
  /// Commands waiting for the next batch, and who waits for each.
  std::vector<command> pending;
  std::vector<waiter> waiters;
  /// Bytes of `pending` (as encoded).
  uint64_t pending_bytes = 0;
  /// Batches an asynchronous sink holds, by sequence number.
  std::unordered_map<uint64_t, in_flight_batch> in_flight;
  uint64_t next_seq = 1;
  bool flush_scheduled = false;
  /// The error of the last batch if it failed to commit (none: it did).
  caf::error commit_error;
  /// When the last readiness probe was sent.
  clock_type::time_point last_probe{};
  store_stats stats;
  /// Runs the key actor a batch of one wakes (`opts.answer_here`).
  std::unique_ptr<inline_exec::collecting_unit> here;

  static inline const char* name = "oncegate.store";

  // CAF destroys the state when the actor exits (before its attachables
  // run), however it exits: what is still queued then never reached the
  // sink (nothing happened), and what an asynchronous sink holds may still
  // commit (the outcome is unknown).
  ~store_state() {
    fail_pending(make_error(errc::store_unavailable, "store stopped"));
    for (auto& kvp : in_flight)
      for (auto& w : kvp.second.waiting)
        w.fail(make_error(errc::leadership_lost, "store stopped"));
  }

  // Answers the commands of one batch from its outcome.
  void settle(std::vector<waiter>& waiting, batch_outcome& out,
              clock_type::time_point started) {
    if (out && out->size() != waiting.size())
      out = make_error(errc::storage_failure,
                       "the sink answered " + std::to_string(out->size())
                         + " results for " + std::to_string(waiting.size())
                         + " commands");
    if (!out) {
      ++stats.failed_commits;
      // A write that failed here fails the next one too until the disk
      // has room again. Other failures (leadership moved, not the leader)
      // are no sign of the store's own, and the readiness probe of a node
      // that became a follower ends in one of them: they clear it.
      auto code = static_cast<errc>(out.error().code());
      bool own = out.error().category() == errc_category
                 && (code == errc::storage_failure
                     || code == errc::commit_failed);
      commit_error = own ? out.error() : caf::error{};
      for (auto& w : waiting)
        w.fail(out.error());
      return;
    }
    ++stats.commits;
    commit_error = caf::none;
    stats.commit_seconds.observe(
      std::chrono::duration<double>(clock_type::now() - started).count());
    stats.batch_size.observe(static_cast<double>(waiting.size()));
    stats.committed_ops += waiting.size();
    stats.max_batch = std::max<uint64_t>(stats.max_batch, waiting.size());
    for (size_t i = 0; i < waiting.size(); ++i) {
      auto& res = (*out)[i];
      auto& w = waiting[i];
      switch (w.type) {
        case command::kind::claim:
          w.claim_rp.deliver(std::move(res.claim));
          break;
        case command::kind::update:
          w.update_rp.deliver(std::move(res.update));
          break;
        case command::kind::purge: {
          stats.purged += res.purged;
          purge_result pr;
          pr.purged = res.purged;
          if (auto next = sink->reader().next_expiry())
            pr.next_due_ms = *next;
          w.purge_rp.deliver(pr);
          break;
        }
        case command::kind::doubt:
          if (w.doubt_rp.pending())
            w.doubt_rp.deliver(res.doubted);
          else if (res.doubted > 0)
            log::store()->warn("store.in_flight_doubted count={} reason="
                               "past_forward_deadline",
                               res.doubted);
          break;
        case command::kind::pause:
          w.pause_rp.deliver(std::move(res.pauses));
          break;
      }
    }
  }

  // Fails every queued command (none of them reached the sink).
  void fail_pending(const caf::error& err) {
    for (auto& w : waiters)
      w.fail(err);
    pending.clear();
    waiters.clear();
    pending_bytes = 0;
  }

  // How many of the first pending commands form the next batch: at most
  // `max_batch`, and at most the sink's bytes (a first one always fits).
  std::pair<size_t, uint64_t> next_slice() const {
    size_t n = 0;
    uint64_t bytes = 0;
    while (n < pending.size() && n < opts.max_batch) {
      auto more = encoded_size(pending[n]);
      if (n > 0 && bytes + more > traits.max_batch_bytes)
        break;
      bytes += more;
      ++n;
    }
    return {n, bytes};
  }
};

using store_pointer = store_actor::stateful_pointer<store_state>;

// Answers the commands of one batch; one of a single command, with
// `answer_here`, from this thread (see store_actor_options).
void settle(store_pointer self, std::vector<waiter>& waiting,
            batch_outcome& out, clock_type::time_point started) {
  auto& st = self->state;
  // The store's own unit again however `settle` ends: its exit (an
  // exception ends the actor) must not reach a unit the state frees.
  struct restore {
    store_pointer self;
    caf::execution_unit* ctx;
    ~restore() {
      self->context(ctx);
    }
  };
  if (waiting.size() != 1 && st.traits.settle_where_learnt) {
    // Learnt on the sink's thread: the key actors of a batch go to the
    // workers, which answer them while that thread commits the next one.
    restore guard{self, self->context()};
    self->context(nullptr);
    st.settle(waiting, out, started);
    return;
  }
  if (!st.opts.answer_here || waiting.size() != 1) {
    st.settle(waiting, out, started);
    return;
  }
  if (!st.here)
    st.here = std::make_unique<inline_exec::collecting_unit>(self->system());
  {
    restore guard{self, self->context()};
    self->context(st.here.get());
    st.settle(waiting, out, started);
  }
  st.here->run();
}

#ifdef ONCEGATE_MUTANTS
// A claim decided from what is committed so far, not from its own commit:
// what the mutants below answer early (not compiled into the product).
claim_result provisional(sqlite_store& db,
                                          const claim_request& req) {
  claim_result res;
  auto cur = db.load(req.route, req.key);
  auto h = cur && cur->found ? std::optional<holder>{holder_of(cur->rec)}
                             : std::nullopt;
  res.outcome = decide(h ? &*h : nullptr, req.fingerprint, req.request_id,
                       req.owner, req.now_ms)
                  .value_or(decision::duplicate);
  if (res.outcome == decision::accepted || res.outcome == decision::renewed)
    res.rec = make_record(req);
  else
    res.rec = std::move(cur->rec);
  return res;
}
#endif

// Hands the pending commands to the sink as batches while it takes more:
// one batch per call for a synchronous sink (the next flush goes behind
// what arrived meanwhile), up to `max_in_flight` for an asynchronous one.
// Results are delivered only once the sink reported the batch committed.
void flush(store_pointer self) {
  auto& st = self->state;
  st.flush_scheduled = false;
  if (st.pending.empty())
    return;
  if (auto err = st.sink->refusal()) {
    st.fail_pending(err);
    return;
  }
  while (!st.pending.empty() && st.in_flight.size() < st.traits.max_in_flight) {
    auto [n, bytes] = st.next_slice();
    std::vector<command> batch(std::make_move_iterator(st.pending.begin()),
                               std::make_move_iterator(st.pending.begin() + n));
    std::vector<waiter> waiting(std::make_move_iterator(st.waiters.begin()),
                                std::make_move_iterator(st.waiters.begin()
                                                        + n));
    st.pending.erase(st.pending.begin(), st.pending.begin() + n);
    st.waiters.erase(st.waiters.begin(), st.waiters.begin() + n);
    st.pending_bytes -= std::min(st.pending_bytes, bytes);
    auto seq = st.next_seq++;
    auto started = clock_type::now();
    auto hdl = caf::actor_cast<store_actor>(self);
    // The outcome of a batch of one that is all the store has to do (no
    // load) is settled on the thread that learnt it where that thread runs
    // the actors it wakes (a cluster's Raft thread): the store, then the
    // key actor, without waking a worker for each. Under load a worker
    // settles it: that thread (with 8 partitions a node's busiest) goes
    // on with the log. (Judged when proposed: a burst that arrives before
    // the outcome is met by the drain's bounds, 8 actors of 16 messages.)
    // A sink with a thread of its own for nothing else settles every batch
    // there (`settle_where_learnt`).
    auto here = (n == 1 && st.pending.empty() && st.in_flight.empty())
                || st.traits.settle_where_learnt;
    auto out = st.sink->commit(batch, [hdl, seq, here](batch_outcome res) {
      hdl->enqueue(caf::make_mailbox_element(
                     nullptr, caf::make_message_id(), {},
                     commit_outcome{seq, std::move(res)}),
                   here ? inline_exec::here() : nullptr);
    });
    if (out) {
      settle(self, waiting, *out, started);
      return;
    }
#ifdef ONCEGATE_MUTANTS
    // Mutant answer-before-majority (BROKEN ON PURPOSE, common/mutant.hpp):
    // claims are answered once proposed, decided from what this node
    // applied so far (the later answer is dropped: a response promise
    // delivers once).
    if (ONCEGATE_MUTANT("answer-before-majority"))
      for (size_t k = 0; k < batch.size(); ++k)
        if (batch[k].type == command::kind::claim)
          waiting[k].claim_rp.deliver(
            provisional(st.sink->reader(), batch[k].claim));
#endif
    st.in_flight.emplace(seq, in_flight_batch{std::move(waiting), started});
  }
}

// Queues `cmd`; the flush message goes behind everything already in the
// mailbox, so all operations that arrived during the previous commit share
// the next batch.
void enqueue(store_pointer self, command&& cmd, waiter&& w) {
  auto& st = self->state;
  auto bytes = encoded_size(cmd);
  w.type = cmd.type;
  // The bounds refuse new work. A transition of a record already claimed
  // (an upstream's outcome, a release, an operator's settlement) is always
  // queued: refused, an executed order's outcome would be "in doubt". Its
  // bytes are bounded where it comes from (the requests in flight, each
  // holding at most `upstream-max-response`), and it counts against the
  // bounds for the claims after it.
  if (cmd.type != command::kind::update
      && (st.pending.size() >= st.opts.max_pending
          || (!st.pending.empty()
              && st.pending_bytes + bytes > st.opts.max_pending_bytes))) {
    w.fail(make_error(errc::overloaded, "store queue full"));
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
  auto res = provisional(self->state.sink->reader(), req);
  command cmd;
  cmd.type = command::kind::claim;
  cmd.claim = std::move(req);
  enqueue(self, std::move(cmd), waiter{});
  return res;
}
#endif

// Queues a write whose answer `rp` (of `waiter` member `slot`) promises.
template <class T>
caf::typed_response_promise<T>
enqueue_for(store_pointer self, command&& cmd,
            caf::typed_response_promise<T> waiter::*slot) {
  waiter w;
  w.*slot = self->make_response_promise<T>();
  auto rp = w.*slot;
  enqueue(self, std::move(cmd), std::move(w));
  return rp;
}

// The answer of a read: its value or its error.
template <class T>
caf::result<T> answer(caf::expected<T>&& res) {
  if (!res)
    return std::move(res.error());
  return std::move(*res);
}

store_actor::behavior_type store_impl(store_pointer self,
                                      std::shared_ptr<commit_sink> sink,
                                      store_actor_options opts) {
  auto& st = self->state;
  st.sink = std::move(sink);
  st.traits = st.sink->traits();
  st.traits.max_in_flight = std::max<uint32_t>(st.traits.max_in_flight, 1);
  st.opts = opts;
  st.opts.max_batch = std::max<uint32_t>(st.opts.max_batch, 1);
  // Commit what is queued before going away where the sink says so: those
  // requests were accepted, and their senders are still waiting for an
  // answer.
  self->set_exit_handler([self](const caf::exit_msg& msg) {
    auto& st = self->state;
    if (st.traits.commit_on_exit)
      while (!st.pending.empty() && st.in_flight.empty())
        flush(self);
    self->quit(msg.reason);
  });
  return {
    // Nothing malformed joins a batch: one bad command must not fail the
    // others of its batch, on this node or on any replica.
    [self](claim_atom, claim_request& req) -> caf::result<claim_result> {
      stage_trace::mark("store.claim");
      if (auto why = malformed(req))
        return make_error(errc::invalid_argument, why);
#ifdef ONCEGATE_MUTANTS
      if (ONCEGATE_MUTANT("ack-before-commit") || ONCEGATE_MUTANT("quiet-ack"))
        return unsafe_claim(self, std::move(req));
#endif
      command cmd;
      cmd.type = command::kind::claim;
      cmd.claim = std::move(req);
      return enqueue_for(self, std::move(cmd), &waiter::claim_rp);
    },
    [self](update_atom, record_update& upd) -> caf::result<update_result> {
      if (auto why = malformed(upd))
        return make_error(errc::invalid_argument, why);
      command cmd;
      cmd.type = command::kind::update;
      cmd.update = std::move(upd);
      return enqueue_for(self, std::move(cmd), &waiter::update_rp);
    },
    [self](list_atom, const std::string& route, record_state state,
           const std::string& after, uint32_t limit) {
      return answer(self->state.sink->reader().list(route, state, after,
                                                    limit));
    },
    [self](get_atom, const std::string& route, const std::string& key) {
      return answer(self->state.sink->reader().load(route, key));
    },
    [self](purge_atom, int64_t now_ms, uint32_t limit) {
      // Records in flight past their forward deadline turn in-doubt first
      // (no one waits for that answer), then the expired ones go.
      auto& st = self->state;
      if (st.opts.in_flight_deadline_ms > 0) {
        command doubt;
        doubt.type = command::kind::doubt;
        doubt.owner = 0;
        doubt.before_ms = st.sink->stamp(now_ms)
                          - st.opts.in_flight_deadline_ms;
        enqueue(self, std::move(doubt), waiter{});
      }
      command cmd;
      cmd.type = command::kind::purge;
      cmd.now_ms = now_ms;
      cmd.limit = limit;
      return enqueue_for(self, std::move(cmd), &waiter::purge_rp);
    },
    [self](doubt_atom, uint64_t owner, int64_t before_ms) {
      command cmd;
      cmd.type = command::kind::doubt;
      cmd.owner = owner;
      cmd.before_ms = before_ms;
      return enqueue_for(self, std::move(cmd), &waiter::doubt_rp);
    },
    [self](pause_atom, std::string& route, pause_op op,
           int64_t now_ms) -> caf::result<route_pauses> {
      if (op == pause_op::read)
        return answer(self->state.sink->reader().pauses());
      if (auto why = malformed_key(route, "-"))
        return make_error(errc::invalid_argument, why);
      // A new pause beyond the bound would not be applied (every replica
      // skips it): refused here, never answered as done.
      if (op == pause_op::pause) {
        auto paused = self->state.sink->reader().pauses();
        if (!paused)
          return std::move(paused.error());
        auto known = std::any_of(paused->begin(), paused->end(),
                                 [&](const route_pause& p) {
                                   return p.route == route;
                                 });
        if (!known && paused->size() >= max_pauses)
          return make_error(errc::invalid_argument,
                            "at most " + std::to_string(max_pauses)
                              + " routes are paused at once");
      }
      command cmd;
      cmd.type = command::kind::pause;
      cmd.route = std::move(route);
      cmd.pause = op;
      cmd.now_ms = self->state.sink->stamp(now_ms);
      return enqueue_for(self, std::move(cmd), &waiter::pause_rp);
    },
    [self](next_atom) { return answer(self->state.sink->reader().next_expiry()); },
    [self](ready_atom, caf::timespan bound) -> caf::result<bool> {
      auto& st = self->state;
      auto now = clock_type::now();
      // A sink that commits off this actor's thread (a single node's
      // commit thread, a cluster's Raft) leaves it free to answer while a
      // commit is stuck: what is not answered within the probe's bound is
      // not ready, as a store that did not answer the probe would be.
      for (auto& kvp : st.in_flight)
        if (now - kvp.second.started >= bound)
          return make_error(errc::store_unavailable,
                            "a commit has not returned for "
                              + std::to_string(std::chrono::duration_cast<
                                                 std::chrono::milliseconds>(
                                                 now - kvp.second.started)
                                                 .count())
                              + " ms");
      if (!st.commit_error)
        return true;
      if (now - st.last_probe >= std::chrono::milliseconds(500)) {
        st.last_probe = now;
        command probe;
        probe.type = command::kind::doubt;
        probe.owner = 0;
        probe.before_ms = 0; // no record was first seen before 1970
        enqueue(self, std::move(probe), waiter{});
      }
      return st.commit_error;
    },
    [self](due_atom, int64_t now_ms,
           uint32_t limit) -> caf::result<delivery_queue> {
      auto& db = self->state.sink->reader();
      auto due = db.due(now_ms, limit);
      if (!due)
        return std::move(due.error());
      auto next = db.next_delivery();
      if (!next)
        return std::move(next.error());
      return delivery_queue{std::move(*due), *next};
    },
    [self](stats_atom) {
      auto stats = self->state.stats;
      if (auto xs = self->state.sink->reader().unsettled())
        stats.unsettled = std::move(*xs);
      return stats;
    },
    [self](count_atom) { return answer(self->state.sink->reader().count()); },
    [self](flush_atom) {
      auto& st = self->state;
      flush(self);
      // More than one batch queued while the sink takes another: the next
      // goes behind what arrived meanwhile, as the first did. Every
      // operation waiting in the mailbox is in `pending` before a commit
      // starts, so `max_pending` bounds the whole queue (a commit that
      // stalls makes the mailbox grow, not the work: what does not fit is
      // refused at once).
      if (!st.pending.empty() && !st.flush_scheduled
          && st.in_flight.size() < st.traits.max_in_flight) {
        st.flush_scheduled = true;
        self->send(self, flush_atom::value);
      }
    },
    [self](commit_outcome& out) {
      auto& st = self->state;
      auto i = st.in_flight.find(out.seq);
      if (i == st.in_flight.end())
        return;
      auto batch = std::move(i->second);
      st.in_flight.erase(i);
      settle(self, batch.waiting, out.results, batch.started);
      // A slot is free: what waited for it goes now.
      flush(self);
    },
  };
}

} // namespace

store_actor spawn_store(caf::actor_system& sys,
                        std::shared_ptr<commit_sink> sink,
                        store_actor_options opts, bool detached) {
  opts.answer_here = opts.answer_here || detached;
  if (detached)
    return sys.spawn<caf::detached>(store_impl, std::move(sink), opts);
  return sys.spawn(store_impl, std::move(sink), opts);
}

} // namespace oncegate::persistence
