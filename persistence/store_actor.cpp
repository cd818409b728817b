#include "persistence/store_actor.hpp"

#include <chrono>
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
#include "persistence/sqlite_store.hpp"

namespace oncegate::persistence {

namespace {

// One operation waiting for the next transaction.
struct pending_op {
  enum class kind { claim, update, purge };
  kind type = kind::claim;
  claim_request claim;
  record_update update;
  int64_t now_ms = 0;
  uint32_t limit = 0;
  caf::typed_response_promise<claim_result> claim_rp;
  caf::typed_response_promise<update_result> update_rp;
  caf::typed_response_promise<purge_result> purge_rp;

  void fail(const caf::error& err) {
    switch (type) {
      case kind::claim:
        claim_rp.deliver(err);
        break;
      case kind::update:
        update_rp.deliver(err);
        break;
      case kind::purge:
        purge_rp.deliver(err);
        break;
    }
  }
};

struct store_state {
  std::shared_ptr<sqlite_store> db;
  store_actor_options opts;
  std::vector<pending_op> pending;
  bool flush_scheduled = false;
  store_stats stats;

  static inline const char* name = "oncegate.store";

  // Runs one transaction over the first `max_batch` pending operations and
  // answers them. Results are computed inside the transaction but delivered
  // only after COMMIT returned.
  void flush() {
    flush_scheduled = false;
    if (pending.empty())
      return;
    auto n = std::min<size_t>(pending.size(), opts.max_batch);
    std::vector<pending_op> batch;
    batch.reserve(n);
    std::move(pending.begin(), pending.begin() + n, std::back_inserter(batch));
    pending.erase(pending.begin(), pending.begin() + n);
    std::vector<claim_result> claims(batch.size());
    std::vector<update_result> updates(batch.size());
    std::vector<uint64_t> purged(batch.size(), 0);
    auto started = std::chrono::steady_clock::now();
    auto err = db->begin();
    for (size_t i = 0; !err && i < batch.size(); ++i) {
      auto& op = batch[i];
      switch (op.type) {
        case pending_op::kind::claim:
          if (auto res = db->claim(op.claim))
            claims[i] = std::move(*res);
          else
            err = std::move(res.error());
          break;
        case pending_op::kind::update:
          if (auto res = db->update(op.update))
            updates[i] = std::move(*res);
          else
            err = std::move(res.error());
          break;
        case pending_op::kind::purge:
          if (auto res = db->purge(op.now_ms, op.limit))
            purged[i] = *res;
          else
            err = std::move(res.error());
          break;
      }
    }
    if (err)
      db->rollback();
    else
      err = db->commit();
    if (err) {
      ++stats.failed_commits;
      log::store()->error("store.commit_failed batch={} error={}",
                          batch.size(),
                          caf::actor_system_config::render(err));
      for (auto& op : batch)
        op.fail(err);
      return;
    }
    ++stats.commits;
    stats.commit_seconds.observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
        .count());
    stats.batch_size.observe(static_cast<double>(batch.size()));
    stats.committed_ops += batch.size();
    stats.max_batch = std::max<uint64_t>(stats.max_batch, batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      auto& op = batch[i];
      switch (op.type) {
        case pending_op::kind::claim:
          op.claim_rp.deliver(std::move(claims[i]));
          break;
        case pending_op::kind::update:
          op.update_rp.deliver(std::move(updates[i]));
          break;
        case pending_op::kind::purge: {
          stats.purged += purged[i];
          purge_result res;
          res.purged = purged[i];
          if (auto next = db->next_expiry())
            res.next_due_ms = *next;
          op.purge_rp.deliver(res);
          break;
        }
      }
    }
  }
};

using store_pointer = store_actor::stateful_pointer<store_state>;

// Queues `op`; the flush message goes behind everything already in the
// mailbox, so all operations that arrived during the previous commit share
// the next transaction.
void enqueue(store_pointer self, pending_op&& op) {
  auto& st = self->state;
  if (st.pending.size() >= st.opts.max_pending) {
    op.fail(make_error(errc::overloaded, "store queue full"));
    return;
  }
  st.pending.emplace_back(std::move(op));
  if (st.pending.size() >= st.opts.max_batch) {
    st.flush();
  } else if (!st.flush_scheduled) {
    st.flush_scheduled = true;
    self->send(self, flush_atom::value);
  }
}

store_actor::behavior_type store_impl(store_pointer self,
                                      std::shared_ptr<sqlite_store> db,
                                      store_actor_options opts) {
  self->state.db = std::move(db);
  self->state.opts = opts;
  // Commit what is queued before going away: those requests were accepted,
  // and their senders are still waiting for an answer.
  self->set_exit_handler([self](const caf::exit_msg& msg) {
    while (!self->state.pending.empty())
      self->state.flush();
    self->quit(msg.reason);
  });
  return {
    [self](claim_atom, claim_request& req) {
      pending_op op;
      op.type = pending_op::kind::claim;
      op.claim = std::move(req);
      op.claim_rp = self->make_response_promise<claim_result>();
      auto rp = op.claim_rp;
      enqueue(self, std::move(op));
      return rp;
    },
    [self](update_atom, record_update& upd) {
      pending_op op;
      op.type = pending_op::kind::update;
      op.update = std::move(upd);
      op.update_rp = self->make_response_promise<update_result>();
      auto rp = op.update_rp;
      enqueue(self, std::move(op));
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
      pending_op op;
      op.type = pending_op::kind::purge;
      op.now_ms = now_ms;
      op.limit = limit;
      op.purge_rp = self->make_response_promise<purge_result>();
      auto rp = op.purge_rp;
      enqueue(self, std::move(op));
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
    [self](stats_atom) { return self->state.stats; },
    [self](count_atom) -> caf::result<uint64_t> {
      auto res = self->state.db->count();
      if (!res)
        return std::move(res.error());
      return *res;
    },
    [self](flush_atom) { self->state.flush(); },
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
