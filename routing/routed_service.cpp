#include "routing/routed_service.hpp"

#include <mutex>
#include <algorithm>
#include <atomic>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/sec.hpp>

#include "common/logging.hpp"
#include "common/mutant.hpp"

namespace oncegate::gateway {

namespace {

// Where a cluster node sends requests: the local actors while it is the
// ready leader, the leader's front actor otherwise.
struct cluster_route {
  std::shared_ptr<cluster::raft_node> raft;
  caf::actor front;
  std::shared_ptr<cluster::peer_links> links;
  std::shared_ptr<std::atomic<uint64_t>> refused;
  caf::timespan remote_timeout;
  caf::timespan retry_interval;
};

// Whether another attempt may succeed where `err` failed, without any risk:
// nothing happened, or the outcome is unknown and the retry carries the same
// request id (a committed claim is then recognised as this request's own).
bool retryable(const caf::error& err) {
  if (err.category() == caf::atom("system"))
    return true; // timeouts, unreachable peers, actors gone at a reset
  auto code = errc_of(err);
  return code == errc::not_leader || code == errc::leadership_lost
         || code == errc::store_unavailable;
}

// Counts (with the refused peer messages) and logs, first and then every
// 1000th, an answer that did not come from the node asked.
void forged_answer(const std::shared_ptr<const cluster_route>& cr,
                   caf::event_based_actor* self) {
  auto n = cr->refused->fetch_add(1) + 1;
  if (n == 1 || n % 1000 == 0) {
    auto from = self->current_sender();
    log::cluster()->warn("cluster.answer_refused from={} (not the node "
                         "asked) refused_total={}",
                         from ? caf::to_string(from->node()) : "?", n);
  }
}

template <class T, class Local, class... Ts>
void forward(caf::event_based_actor* self,
             std::shared_ptr<const cluster_route> cr, Local local,
             std::chrono::steady_clock::time_point until,
             std::function<void(reply<T>)> done, std::tuple<Ts...> args,
             uint32_t attempt = 0) {
  auto again = [self, cr, local, until, done, args,
                attempt](const caf::error& err) mutable {
    if (std::chrono::steady_clock::now() >= until || !retryable(err)) {
      auto res = failure<T>(self->system(), err);
      if (retryable(err))
        res.error = errc::not_leader; // still no leader: fail closed
      done(std::move(res));
      return;
    }
    if constexpr (std::is_same_v<T, claim_result>)
      if (ONCEGATE_MUTANT("drop-request-id")) // mutant: a retry is a stranger
        std::get<1>(args).request_id += 0x9e3779b97f4a7c15ull;
    // Backs off (interval x 1, 2, 4, 8, then 8 again): a failover takes
    // hundreds of milliseconds, and many requests may be waiting for it.
    auto delay = cr->retry_interval * (1u << std::min(attempt, 3u));
    actor_bridge::post_later(
      self, delay,
      [cr, local, until, done, args, attempt](caf::event_based_actor* self) {
        forward<T>(self, cr, local, until, done, args, attempt + 1);
      });
  };
  auto status = cr->raft->brief();
  caf::actor target;
  uint64_t remote = 0;
  if (status.leader_ready) {
    target = local();
  } else if (status.leader_id != 0 && status.leader_id != cr->raft->id()) {
    remote = status.leader_id;
    target = cr->links->get(self, remote);
  }
  if (!target) {
    again(make_error(errc::not_leader, "no ready leader reachable"));
    return;
  }
  // Only a remote front gets a request timeout: a lost peer or a lost
  // message must not hold the claim forever. The local node always answers
  // (its store settles every command, a Raft leader that cannot commit
  // loses leadership and fails what it holds), and the HTTP response
  // timeout bounds what the sender waits; a timeout there would cost a
  // clock entry and a stale timeout message per claim (measured: 6.5 us of
  // the leader's CPU per decision, in its clock thread).
  auto timeout = remote != 0 ? caf::duration{cr->remote_timeout}
                             : caf::duration{caf::infinite};
  std::apply(
    [&](auto&... xs) {
      self->request(target, timeout, xs...)
        .then(
          [self, cr, done, remote, target, again](T& value) mutable {
            // CAF matches an answer to its request by message id alone: a
            // member could answer for the leader ("accepted" for a key the
            // leader decided). Only the asked front's answer counts; the
            // node ids on the CAF port are bound to the certificates
            // (routing/peer_basp.hpp). A forged one is an unknown outcome:
            // retried with the same request id.
            if (remote != 0 && !cluster::answered_by(self, target)) {
              forged_answer(cr, self);
              again(make_error(caf::sec::unexpected_response,
                               "an answer from another node than the one "
                               "asked"));
              return;
            }
            done(success(std::move(value)));
          },
          [self, cr, remote, target, again](caf::error& err) mutable {
            if (remote != 0 && err.category() == caf::atom("system"))
              cr->links->drop(remote);
            // A forged error is no answer either.
            if (remote != 0 && self->current_sender() != nullptr
                && !cluster::answered_by(self, target)) {
              forged_answer(cr, self);
              again(make_error(caf::sec::unexpected_response,
                               "an error from another node than the one "
                               "asked"));
              return;
            }
            again(err);
          });
    },
    args);
}

class routed_service : public node_service {
public:
  routed_service(caf::actor_system& sys, const node& n,
                 routed_service_options opts,
                 std::shared_ptr<const cluster_route> cluster)
    : node_(n), opts_(opts), cluster_(std::move(cluster)),
      bridge_(sys, opts.service.actors) {
  }

  void claim(claim_request req,
             std::function<void(reply<claim_result>)> done) override {
    // Retries of this attempt (leader changes) carry the same id, so a
    // claim that committed although its answer was lost is found as ours.
    req.owner = cluster_->raft->id();
    req.request_id = next_request_id_.fetch_add(1, std::memory_order_relaxed);
    post([this, req = std::move(req),
          done = std::move(done)](caf::event_based_actor* self) mutable {
      auto& shard = node_.shard_for(req.route, req.key);
      auto hdl = caf::actor_cast<caf::actor>(shard);
      // Giving up does not undo a claim that may still commit (its
      // leader lost leadership with the entry in flight): release it,
      // should it have committed, so that the sender's retry executes.
      auto undo = release_of(req);
      auto undo_for = std::chrono::milliseconds(
        std::clamp<int64_t>(req.ttl_ms, 1000, 86'400'000));
      auto on_reply = [this, done = std::move(done), hdl, undo,
                       undo_for](reply<claim_result> rep) mutable {
        if (!rep.ok) // cheap when nothing committed: one log entry
          release_abandoned(hdl, std::move(undo), undo_for);
        done(std::move(rep));
      };
      forward<claim_result>(self, cluster_, [hdl] { return hdl; },
                            deadline(), std::move(on_reply),
                            std::make_tuple(claim_atom::value,
                                            std::move(req)));
    });
  }

  void update(record_update upd,
              std::function<void(reply<update_result>)> done) override {
    post([this, upd = std::move(upd),
          done = std::move(done)](caf::event_based_actor* self) mutable {
      auto& shard = node_.shard_for(upd.route, upd.key);
      auto hdl = caf::actor_cast<caf::actor>(shard);
      // A transition that cannot reach a leader in time (a partition)
      // must still land: the upstream's outcome is known here only.
      // Keep trying in the background; the update names its record
      // instance, so a late one cannot touch a successor.
      auto on_reply = [this, done = std::move(done), hdl,
                       again = upd](reply<update_result> rep) mutable {
        if (!rep.ok && rep.error == errc::not_leader)
          retry_update(hdl, std::move(again), std::chrono::hours(24));
        done(std::move(rep));
      };
      forward<update_result>(self, cluster_, [hdl] { return hdl; },
                             deadline(), std::move(on_reply),
                             std::make_tuple(update_atom::value,
                                             std::move(upd)));
    });
  }

  void lookup(std::string route, std::string key,
              std::function<void(reply<lookup_result>)> done) override {
    post([this, route = std::move(route), key = std::move(key),
          done = std::move(done)](caf::event_based_actor* self) mutable {
      auto& shard = node_.shard_for(route, key);
      auto hdl = caf::actor_cast<caf::actor>(shard);
      forward<lookup_result>(self, cluster_, [hdl] { return hdl; },
                             deadline(), std::move(done),
                             std::make_tuple(get_atom::value,
                                             std::move(route),
                                             std::move(key)));
    });
  }

  void list(std::string route, record_state state, std::string after,
            uint32_t limit,
            std::function<void(reply<record_page>)> done) override {
    post([this, route = std::move(route), state, after = std::move(after),
          limit,
          done = std::move(done)](caf::event_based_actor* self) mutable {
      auto hdl = caf::actor_cast<caf::actor>(node_.store);
      forward<record_page>(self, cluster_, [hdl] { return hdl; },
                           deadline(), std::move(done),
                           std::make_tuple(list_atom::value,
                                           std::move(route), state,
                                           std::move(after), limit));
    });
  }

  delivery_turn delivery() const override {
    auto st = cluster_->raft->status();
    auto id = cluster_->raft->id();
    // The ready leader delivers: it has applied everything committed, so
    // its queue is the cluster's. A deposed leader's attempts that were
    // started (durably) still finish; none starts anywhere else.
    return {st.leader_id == id && st.leader_ready, st.term, id};
  }

  void due(int64_t now_ms, uint32_t limit,
           std::function<void(reply<delivery_queue>)> done) override {
    post([this, now_ms, limit,
          done = std::move(done)](caf::event_based_actor* self) mutable {
      ask<delivery_queue>(self, node_.store, opts_.service.probe_timeout,
                          std::move(done), due_atom::value, now_ms, limit);
    });
  }

  void metrics(std::function<void(node_metrics)> done) override {
    post([this, done = std::move(done)](caf::event_based_actor* self) {
      auto info = cluster();
      gather_metrics(self, node_, opts_.service.probe_timeout,
                     [done, info](node_metrics m) {
                       m.cluster = info;
                       done(std::move(m));
                     });
    });
  }

  cluster_info cluster() const override {
    cluster_info res;
    auto st = cluster_->raft->status();
    static_cast<raft_progress&>(res) = st;
    res.enabled = true;
    res.id = cluster_->raft->id();
    res.role = to_string(st.role);
    {
      std::lock_guard<std::mutex> guard{background_mtx_};
      res.background_retries = background_;
      res.background_bytes = background_bytes_;
      res.background_dropped = background_dropped_;
    }
    res.peer_messages_refused = cluster_->refused->load();
    for (auto& [m, role] : st.members)
      res.members.push_back({m.id, m.address, cluster::raft_role_name(role)});
    return res;
  }

  void change_cluster(cluster_op op, uint64_t id,
                      std::function<void(reply<uint64_t>)> done) override {
    auto front = cluster_->front;
    auto local = [front] { return front; };
    if (op == cluster_op::transfer) {
      post([this, id, local, done = std::move(done)](
             caf::event_based_actor* self) mutable {
        forward<uint64_t>(self, cluster_, local, deadline(), std::move(done),
                          std::make_tuple(transfer_atom::value, id));
      });
      return;
    }
    auto as_reply = [done = std::move(done)](reply<int32_t> rep) {
      reply<uint64_t> res;
      res.ok = rep.ok && rep.value == 0;
      res.error = rep.error;
      res.detail = rep.detail;
      if (rep.ok && rep.value != 0) {
        res.error = errc::invalid_argument;
        res.detail = cluster::raft_error_text(rep.value);
      }
      done(std::move(res));
    };
    if (op == cluster_op::remove) {
      post([this, id, local, as_reply](caf::event_based_actor* self) mutable {
        forward<int32_t>(self, cluster_, local, deadline(),
                         std::move(as_reply),
                         std::make_tuple(remove_atom::value, id));
      });
      return;
    }
    auto p = cluster_->links->find(id);
    if (p == nullptr) {
      reply<int32_t> rep;
      rep.error = errc::invalid_argument;
      rep.detail = "node " + std::to_string(id) + " is not in cluster.peers";
      as_reply(std::move(rep));
      return;
    }
    auto address = p->raft_address;
    post([this, id, address, local,
          as_reply](caf::event_based_actor* self) mutable {
      forward<int32_t>(self, cluster_, local, deadline(), std::move(as_reply),
                       std::make_tuple(add_atom::value, id, address));
    });
  }

  void ready(std::function<void(bool, std::string)> done) override {
    post([this, done = std::move(done)](caf::event_based_actor* self) {
      // Ready: the ready leader, or a follower that reaches the leader's
      // front and has applied everything it knows to be committed.
      auto st = cluster_->raft->status();
      if (st.leader_id == 0) {
        done(false, "no raft leader");
        return;
      }
      if (!st.leader_ready && st.leader_id == cluster_->raft->id()) {
        done(false, "leader not ready (catching up)");
        return;
      }
      if (st.applied_index < st.commit_index) {
        done(false, "applying the committed log");
        return;
      }
      if (!st.leader_ready && !cluster_->links->get(self, st.leader_id)) {
        done(false, "connecting to the leader");
        return;
      }
      probe_store(self, node_, opts_.service.probe_timeout, std::move(done));
    });
  }

private:
  // Applies `upd` through a ready leader, retrying until one applied it or
  // `keep_trying` passed.
  void retry_update(caf::actor shard, record_update upd,
                    caf::timespan keep_trying) {
    retry_in_background(shard, std::move(upd), keep_trying,
                        [](const std::string& key,
                           const reply<update_result>& rep) {
                          if (rep.ok)
                            log::gateway()->warn("update.applied_late key={}",
                                                 key);
                          else
                            log::gateway()->error(
                              "update.unresolved key={} error={}", key,
                              rep.detail);
                        });
  }

  // Releases the record of an abandoned claim attempt if it committed
  // (`request_id` must match), retrying until a ready leader applied it or
  // `keep_trying` passed. Once a new leader's barrier committed, a claim
  // entry it does not have can never commit, so a release it applies
  // settles the question for good.
  void release_abandoned(caf::actor shard, record_update undo,
                         caf::timespan keep_trying) {
    retry_in_background(
      shard, std::move(undo), keep_trying,
      [](const std::string& key, const reply<update_result>& rep) {
        if (rep.ok && rep.value.applied)
          log::gateway()->warn("claim.abandoned_released key={}", key);
        else if (!rep.ok)
          log::gateway()->error("claim.abandoned_unresolved key={} error={}",
                                key, rep.detail);
      });
  }

  // The one background retry: takes a place within the bounds, forwards
  // `upd` to a ready leader until it answered or `keep_trying` passed, and
  // hands the last answer to `report`.
  template <class Report>
  void retry_in_background(caf::actor shard, record_update upd,
                           caf::timespan keep_trying, Report report) {
    auto cost = background_cost(upd);
    if (!admit_background(cost, upd))
      return;
    post([this, shard, upd = std::move(upd), keep_trying, cost,
          report](caf::event_based_actor* self) mutable {
      auto done = [this, key = upd.key, cost,
                   report](reply<update_result> rep) {
        settle_background(cost);
        report(key, rep);
      };
      forward<update_result>(self, cluster_, [shard] { return shard; },
                             std::chrono::steady_clock::now() + keep_trying,
                             std::move(done),
                             std::make_tuple(update_atom::value,
                                             std::move(upd)));
    });
  }

  static std::size_t background_cost(const record_update& upd) {
    return 256 + upd.route.size() + upd.key.size() + upd.headers.size()
           + upd.response.size();
  }

  // Takes a place for a background retry, or drops it (see
  // `routed_service_options::max_background`).
  bool admit_background(std::size_t cost, const record_update& upd) {
    std::lock_guard<std::mutex> guard{background_mtx_};
    if (background_ + 1 > opts_.max_background
        || background_bytes_ + cost > opts_.max_background_bytes) {
      ++background_dropped_;
      log::gateway()->error("update.background_dropped route={} key={} "
                            "op={} retries={} bytes={} (the record turns "
                            "in_doubt at its deadline)",
                            upd.route, upd.key, to_string(upd.op),
                            background_, background_bytes_);
      return false;
    }
    ++background_;
    background_bytes_ += cost;
    return true;
  }

  void settle_background(std::size_t cost) {
    std::lock_guard<std::mutex> guard{background_mtx_};
    --background_;
    background_bytes_ -= cost;
  }

  std::chrono::steady_clock::time_point deadline() const {
    return std::chrono::steady_clock::now() + opts_.leader_wait;
  }

  void post(actor_bridge::job fn) {
    bridge_.post(std::move(fn));
  }

  node node_;
  routed_service_options opts_;
  mutable std::mutex background_mtx_;
  std::size_t background_ = 0;
  std::size_t background_bytes_ = 0;
  uint64_t background_dropped_ = 0;
  std::shared_ptr<const cluster_route> cluster_;
  /// Request ids: a random start (unique across restarts) counting up.
  std::atomic<uint64_t> next_request_id_{random_start()};

  static uint64_t random_start() {
    std::random_device rd;
    auto x = (uint64_t{rd()} << 32) ^ rd();
    return x == 0 ? 1 : x;
  }
  actor_bridge bridge_;
};

} // namespace

std::unique_ptr<node_service>
make_routed_service(caf::actor_system& sys, const cluster::cluster_node& n,
                    routed_service_options opts) {
  auto cr = std::make_shared<cluster_route>();
  cr->raft = n.raft;
  cr->front = n.front;
  cr->links = n.links;
  cr->refused = n.refused_messages;
  cr->remote_timeout = n.opts.remote_timeout;
  cr->retry_interval = opts.retry_interval;
  return std::make_unique<routed_service>(sys, n.local, opts, std::move(cr));
}

} // namespace oncegate::gateway
