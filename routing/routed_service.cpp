#include "routing/routed_service.hpp"

#include <mutex>
#include <algorithm>
#include <atomic>
#include <exception>
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

// Where a cluster node sends requests: its own actors while it is the ready
// leader (`cluster::call_locally`), the leader over the node link otherwise.
struct cluster_route {
  std::shared_ptr<cluster::raft_node> raft;
  std::shared_ptr<cluster::cluster_context> context;
  std::shared_ptr<actor_bridge> bridge;
  std::vector<cluster::peer> peers;
  std::chrono::milliseconds remote_timeout;
  caf::timespan retry_interval;
};

// Whether another attempt may succeed where `code` failed, without any
// risk: nothing happened, or the outcome is unknown and the retry carries
// the same request id (a committed claim is then recognised as this
// request's own).
bool retryable(errc code) {
  return code == errc::not_leader || code == errc::leadership_lost
         || code == errc::store_unavailable || code == errc::timeout;
}

template <class T>
reply<T> reply_of(link::answer& ans);

template <class T>
reply<T> failed_reply(link::answer& ans) {
  reply<T> res;
  res.error = ans.error;
  res.detail = std::move(ans.detail);
  return res;
}

template <>
reply<claim_result> reply_of(link::answer& ans) {
  return ans.error != errc::none ? failed_reply<claim_result>(ans)
                                 : success(std::move(ans.claim));
}

template <>
reply<update_result> reply_of(link::answer& ans) {
  return ans.error != errc::none ? failed_reply<update_result>(ans)
                                 : success(std::move(ans.update));
}

template <>
reply<lookup_result> reply_of(link::answer& ans) {
  return ans.error != errc::none ? failed_reply<lookup_result>(ans)
                                 : success(std::move(ans.lookup));
}

template <>
reply<record_page> reply_of(link::answer& ans) {
  return ans.error != errc::none ? failed_reply<record_page>(ans)
                                 : success(std::move(ans.page));
}

// Membership changes: libraft's status (add, remove) or the new leader
// (transfer).
template <>
reply<uint64_t> reply_of(link::answer& ans) {
  if (ans.error != errc::none)
    return failed_reply<uint64_t>(ans);
  if (ans.status != 0) {
    reply<uint64_t> res;
    res.error = errc::invalid_argument;
    res.detail = cluster::raft_error_text(ans.status);
    return res;
  }
  return success(ans.value);
}

// One request on its way to the ready leader, tried again (with the same
// request id) while there is none or the one asked lost leadership.
template <class T>
struct routed_call {
  std::shared_ptr<const cluster_route> cr;
  link::request req;
  std::chrono::steady_clock::time_point until;
  std::function<void(reply<T>)> done;
  uint32_t attempt = 0;
};

template <class T>
void forward(std::shared_ptr<routed_call<T>> c);

// The answer of one attempt, on any thread: this node's actor that
// answered (a bridge actor for membership changes), the Raft thread (the
// leader's answer came on the link) or the caller's (nothing was sent). A
// final answer completes the call there (`node_service` completions may
// run on any thread and never block); a retry waits in a bridge actor.
template <class T>
void settle(std::shared_ptr<routed_call<T>> c, link::answer ans) {
  auto& cr = *c->cr;
  if (ans.error == errc::none || !retryable(ans.error)) {
    c->done(reply_of<T>(ans));
    return;
  }
  if (std::chrono::steady_clock::now() >= c->until) {
    auto res = reply_of<T>(ans);
    res.error = errc::not_leader; // still no leader: fail closed
    c->done(std::move(res));
    return;
  }
  if (c->req.kind == link::op::claim && ONCEGATE_MUTANT("drop-request-id"))
    c->req.claim.request_id += 0x9e3779b97f4a7c15ull; // a retry is a stranger
  // Backs off (interval x 1, 2, 4, 8, then 8 again): a failover takes
  // hundreds of milliseconds, and many requests may be waiting for it.
  auto delay = cr.retry_interval * (1u << std::min(c->attempt, 3u));
  ++c->attempt;
  cr.bridge->post([c, delay](caf::event_based_actor* self) {
    actor_bridge::post_later(self, delay,
                             [c](caf::event_based_actor*) { forward<T>(c); });
  });
}

// One attempt, from any thread, with no hand-over: this node's own actors
// are asked from this thread and complete the call on theirs; a remote
// leader is asked over the link (the Raft thread sends it and completes the
// call with the answer).
template <class T>
void forward(std::shared_ptr<routed_call<T>> c) {
  auto& cr = *c->cr;
  auto status = cr.raft->brief();
  if (status.leader_ready) {
    // The same path as another node's request at this node.
    cluster::call_locally(cr.context, c->req, [c](link::answer ans) {
      settle<T>(c, std::move(ans));
    });
    return;
  }
  if (status.leader_id == 0 || status.leader_id == cr.raft->id()) {
    link::answer none;
    none.kind = c->req.kind;
    none.error = errc::not_leader;
    none.detail = "no ready leader";
    settle<T>(std::move(c), std::move(none));
    return;
  }
  // Only a remote leader gets a request timeout: a lost peer or a lost
  // message must not hold the request forever. Once this node's bridge
  // stopped (the node shuts down), answers are dropped as a bridge would.
  auto bridge = cr.bridge;
  cr.raft->ask(status.leader_id, c->req, cr.remote_timeout,
               [bridge, c](link::answer ans) {
                 if (bridge->stopped())
                   return;
                 // On the Raft thread: nothing may escape into libuv.
                 try {
                   settle<T>(c, std::move(ans));
                 } catch (const std::exception& e) {
                   log::gateway()->error("cluster.answer_failed kind={} "
                                         "error={}",
                                         link::to_string(c->req.kind),
                                         e.what());
                 }
               });
}

template <class T>
void route(std::shared_ptr<const cluster_route> cr, link::request req,
           std::chrono::steady_clock::time_point until,
           std::function<void(reply<T>)> done) {
  auto c = std::make_shared<routed_call<T>>();
  c->cr = std::move(cr);
  c->req = std::move(req);
  c->until = until;
  c->done = std::move(done);
  forward<T>(std::move(c));
}

link::request update_request(record_update upd) {
  link::request req;
  req.kind = link::op::update;
  req.update = std::move(upd);
  return req;
}

class routed_service : public node_service {
public:
  routed_service(const node& n, routed_service_options opts,
                 std::shared_ptr<const cluster_route> cluster,
                 std::shared_ptr<std::atomic<uint64_t>> refused)
    : node_(n), opts_(opts), cluster_(std::move(cluster)),
      refused_(std::move(refused)) {
  }

  void claim(claim_request req,
             std::function<void(reply<claim_result>)> done) override {
    // Retries of this attempt (leader changes) carry the same id, so a
    // claim that committed although its answer was lost is found as ours.
    req.owner = cluster_->raft->id();
    req.request_id = next_request_id_.fetch_add(1, std::memory_order_relaxed);
    // Giving up does not undo a claim that may still commit (its leader
    // lost leadership with the entry in flight): release it, should it
    // have committed, so that the sender's retry executes.
    auto undo = release_of(req);
    auto undo_for = std::chrono::milliseconds(
      std::clamp<int64_t>(req.ttl_ms, 1000, 86'400'000));
    auto on_reply = [this, done = std::move(done), undo,
                     undo_for](reply<claim_result> rep) mutable {
      if (!rep.ok) // cheap when nothing committed: one log entry
        release_abandoned(std::move(undo), undo_for);
      done(std::move(rep));
    };
    link::request call;
    call.kind = link::op::claim;
    call.claim = std::move(req);
    route<claim_result>(cluster_, std::move(call), deadline(),
                        std::move(on_reply));
  }

  void update(record_update upd,
              std::function<void(reply<update_result>)> done) override {
    // A transition that cannot reach a leader in time (a partition) must
    // still land: the upstream's outcome is known here only. Keep trying
    // in the background; the update names its record instance, so a late
    // one cannot touch a successor.
    auto on_reply = [this, done = std::move(done),
                     again = upd](reply<update_result> rep) mutable {
      if (!rep.ok && rep.error == errc::not_leader)
        retry_update(std::move(again), std::chrono::hours(24));
      done(std::move(rep));
    };
    route<update_result>(cluster_, update_request(std::move(upd)), deadline(),
                         std::move(on_reply));
  }

  void lookup(std::string route_name, std::string key,
              std::function<void(reply<lookup_result>)> done) override {
    link::request call;
    call.kind = link::op::lookup;
    call.route = std::move(route_name);
    call.key = std::move(key);
    route<lookup_result>(cluster_, std::move(call), deadline(),
                         std::move(done));
  }

  void list(std::string route_name, record_state state, std::string after,
            uint32_t limit,
            std::function<void(reply<record_page>)> done) override {
    link::request call;
    call.kind = link::op::list;
    call.route = std::move(route_name);
    call.state = state;
    call.key = std::move(after);
    call.limit = limit;
    route<record_page>(cluster_, std::move(call), deadline(), std::move(done));
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
    res.peer_messages_refused = refused_->load();
    auto ls = cluster_->raft->link_stats();
    res.link = {ls.links,
                ls.streams,
                ls.buffered_bytes,
                ls.refused_handshake,
                ls.refused_identity,
                ls.refused_hello,
                ls.refused_busy,
                ls.refused_source,
                ls.refused_frame,
                ls.requests_sent,
                ls.requests_failed,
                ls.late_answers,
                ls.requests_served,
                ls.requests_overloaded};
    for (auto& [m, role] : st.members)
      res.members.push_back({m.id, m.address, cluster::raft_role_name(role)});
    return res;
  }

  void change_cluster(cluster_op op, uint64_t id,
                      std::function<void(reply<uint64_t>)> done) override {
    link::request call;
    call.node = id;
    switch (op) {
      case cluster_op::transfer:
        call.kind = link::op::transfer;
        break;
      case cluster_op::remove:
        call.kind = link::op::remove;
        break;
      case cluster_op::add: {
        call.kind = link::op::add;
        auto& peers = cluster_->peers;
        auto p = std::find_if(peers.begin(), peers.end(),
                              [id](const cluster::peer& x) {
                                return x.id == id;
                              });
        if (p == peers.end()) {
          reply<uint64_t> res;
          res.error = errc::invalid_argument;
          res.detail = "node " + std::to_string(id)
                       + " is not in cluster.peers";
          done(std::move(res));
          return;
        }
        call.address = p->raft_address;
        break;
      }
    }
    route<uint64_t>(cluster_, std::move(call), deadline(), std::move(done));
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
      if (!st.leader_ready && !cluster_->raft->leader_linked()) {
        done(false, "connecting to the leader");
        return;
      }
      probe_store(self, node_, opts_.service.probe_timeout, std::move(done));
    });
  }

private:
  // Applies `upd` through a ready leader, retrying until one applied it or
  // `keep_trying` passed.
  void retry_update(record_update upd, caf::timespan keep_trying) {
    retry_in_background(std::move(upd), keep_trying,
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
  void release_abandoned(record_update undo, caf::timespan keep_trying) {
    retry_in_background(
      std::move(undo), keep_trying,
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
  void retry_in_background(record_update upd, caf::timespan keep_trying,
                           Report report) {
    auto cost = background_cost(upd);
    if (!admit_background(cost, upd))
      return;
    auto done = [this, key = upd.key, cost,
                 report](reply<update_result> rep) {
      settle_background(cost);
      report(key, rep);
    };
    route<update_result>(cluster_, update_request(std::move(upd)),
                         std::chrono::steady_clock::now() + keep_trying,
                         std::move(done));
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
    cluster_->bridge->post(std::move(fn));
  }

  node node_;
  routed_service_options opts_;
  mutable std::mutex background_mtx_;
  std::size_t background_ = 0;
  std::size_t background_bytes_ = 0;
  uint64_t background_dropped_ = 0;
  std::shared_ptr<const cluster_route> cluster_;
  std::shared_ptr<std::atomic<uint64_t>> refused_;
  /// Request ids: a random start (unique across restarts) counting up.
  std::atomic<uint64_t> next_request_id_{random_start()};

  static uint64_t random_start() {
    std::random_device rd;
    auto x = (uint64_t{rd()} << 32) ^ rd();
    return x == 0 ? 1 : x;
  }
};

} // namespace

std::unique_ptr<node_service>
make_routed_service(const cluster::cluster_node& n,
                    routed_service_options opts) {
  auto cr = std::make_shared<cluster_route>();
  cr->raft = n.raft;
  cr->context = n.context;
  cr->bridge = n.bridge;
  cr->peers = n.opts.peers;
  cr->remote_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
    n.opts.remote_timeout);
  cr->retry_interval = opts.retry_interval;
  return std::make_unique<routed_service>(n.local, opts, std::move(cr),
                                          n.refused_messages);
}

} // namespace oncegate::gateway
