#include "routing/routed_service.hpp"

#include <algorithm>
#include <mutex>
#include <optional>
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
#include "common/partition.hpp"

extern "C" {
#include <raft.h>
}

namespace oncegate::gateway {

namespace {

// Where a cluster node sends requests: its own actors while it is the ready
// leader of the request's partition (`cluster::call_locally`), that
// partition's leader over the node link otherwise.
struct cluster_route {
  std::shared_ptr<cluster::raft_node> raft;
  uint16_t partitions = 1;
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

template <>
reply<route_pauses> reply_of(link::answer& ans) {
  return ans.error != errc::none ? failed_reply<route_pauses>(ans)
                                 : success(std::move(ans.pauses));
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
  /// The partition (Raft group) it is decided in.
  uint16_t group = 0;
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
  // Backs off (interval x 1, then x 2 for good): a failover takes hundreds
  // of milliseconds and many requests may be waiting for it, but each look
  // is cheap (this node's view of the partition's leader) and each one
  // past the new leader's arrival is time the sender waits: a waiting
  // request sees its partition's new leader at most 2 x interval late
  // (40 ms by default; 1000 requests waiting cost 25,000 looks a second).
  auto delay = cr.retry_interval * (1u << std::min(c->attempt, 1u));
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
  auto status = cr.raft->brief(c->group);
  if (status.leader_ready) {
    // The same path as another node's request at this node.
    cluster::call_locally(cr.context, c->group, c->req,
                          [c](link::answer ans) {
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
  auto group = c->group;
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
               },
               group);
}

template <class T>
void route(std::shared_ptr<const cluster_route> cr, uint16_t group,
           link::request req, std::chrono::steady_clock::time_point until,
           std::function<void(reply<T>)> done) {
  auto c = std::make_shared<routed_call<T>>();
  c->cr = std::move(cr);
  c->group = group;
  c->req = std::move(req);
  c->until = until;
  c->done = std::move(done);
  forward<T>(std::move(c));
}

// Asks `req` of every partition's leader; `done` gets the first failure,
// or `combine` of the answers in partition order.
template <class T>
void route_to_every(std::shared_ptr<const cluster_route> cr,
                    const link::request& req,
                    std::chrono::steady_clock::time_point until,
                    std::function<T(std::vector<T>)> combine,
                    std::function<void(reply<T>)> done) {
  struct gather {
    std::mutex mtx;
    std::vector<T> answers;
    std::size_t open = 0;
    std::optional<reply<T>> failure;
    std::function<T(std::vector<T>)> combine;
    std::function<void(reply<T>)> done;
  };
  auto parts = cr->partitions;
  auto st = std::make_shared<gather>();
  st->answers.resize(parts);
  st->open = parts;
  st->combine = std::move(combine);
  st->done = std::move(done);
  for (uint16_t g = 0; g < parts; ++g)
    route<T>(cr, g, req, until, [st, g](reply<T> rep) {
      std::unique_lock<std::mutex> guard{st->mtx};
      if (!rep.ok && !st->failure)
        st->failure = std::move(rep);
      else if (rep.ok)
        st->answers[g] = std::move(rep.value);
      if (--st->open > 0)
        return;
      guard.unlock();
      if (st->failure) {
        st->done(std::move(*st->failure));
        return;
      }
      st->done(success(st->combine(std::move(st->answers))));
    });
}

// The partition of a key (the same on every node, `common/partition.hpp`).
uint16_t partition(const cluster_route& cr, const std::string& route,
                   const std::string& key) {
  return cr.partitions == 1 ? 0 : partition_of(route, key, cr.partitions);
}

// One page of `limit` out of the pages of every partition (each the first
// keys after the same key, in key order): the first `limit` keys of them
// all, continued after the last one if any partition had more.
record_page merge_pages(std::vector<record_page> pages, uint32_t limit) {
  record_page res;
  bool more = false;
  for (auto& p : pages) {
    more = more || !p.next_after.empty();
    for (auto& r : p.records)
      res.records.push_back(std::move(r));
  }
  std::sort(res.records.begin(), res.records.end(),
            [](const record& a, const record& b) { return a.key < b.key; });
  if (res.records.size() > limit) {
    res.records.resize(limit);
    more = true;
  }
  if (more && !res.records.empty())
    res.next_after = res.records.back().key;
  return res;
}

link::request update_request(record_update upd) {
  link::request req;
  req.kind = link::op::update;
  req.update = std::move(upd);
  return req;
}

class routed_service : public node_service {
public:
  routed_service(std::vector<node> parts, routed_service_options opts,
                 std::shared_ptr<const cluster_route> cluster,
                 std::shared_ptr<std::atomic<uint64_t>> refused)
    : parts_(std::move(parts)), opts_(opts), cluster_(std::move(cluster)),
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
    auto group = partition(*cluster_, req.route, req.key);
    // A route's cap is shared by the partitions: each leader enforces its
    // partition's share, so that all of them together never exceed it.
    req.guards.max_new_per_minute = cap_share(req.guards.max_new_per_minute,
                                              cluster_->partitions, group);
    link::request call;
    call.kind = link::op::claim;
    call.claim = std::move(req);
    route<claim_result>(cluster_, group, std::move(call), deadline(),
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
    auto group = partition(*cluster_, upd.route, upd.key);
    route<update_result>(cluster_, group, update_request(std::move(upd)),
                         deadline(), std::move(on_reply));
  }

  void lookup(std::string route_name, std::string key,
              std::function<void(reply<lookup_result>)> done) override {
    auto group = partition(*cluster_, route_name, key);
    link::request call;
    call.kind = link::op::lookup;
    call.route = std::move(route_name);
    call.key = std::move(key);
    route<lookup_result>(cluster_, group, std::move(call), deadline(),
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
    auto parts = cluster_->partitions;
    if (parts == 1) {
      route<record_page>(cluster_, 0, std::move(call), deadline(),
                         std::move(done));
      return;
    }
    // Every partition's leader lists its keys; the pages merge here.
    route_to_every<record_page>(
      cluster_, call, deadline(),
      [limit](std::vector<record_page> pages) {
        return merge_pages(std::move(pages), limit);
      },
      std::move(done));
  }

  void pause(std::string route_name, pause_op op, int64_t now_ms,
             std::function<void(reply<route_pauses>)> done) override {
    link::request call;
    call.kind = link::op::pause;
    call.route = std::move(route_name);
    call.pause = op;
    call.now_ms = now_ms;
    auto parts = cluster_->partitions;
    if (op == pause_op::read || parts == 1) {
      route<route_pauses>(cluster_, 0, std::move(call), deadline(),
                          std::move(done));
      return;
    }
    // Every partition's leader decides the claims of its keys: each must
    // hold the pause before it is acknowledged. A failure leaves some
    // partitions changed; the operator's retry (a pause or resume is
    // idempotent) finishes it.
    route_to_every<route_pauses>(
      cluster_, call, deadline(),
      [](std::vector<route_pauses> all) { return std::move(all.front()); },
      std::move(done));
  }

  delivery_turn delivery() const override {
    // A ready leader delivers the records of the partitions it leads: it
    // has applied everything committed there, so their queues are the
    // cluster's. A deposed leader's attempts that were started (durably)
    // still finish; none starts anywhere else.
    auto id = cluster_->raft->id();
    for (uint16_t g = 0; g < cluster_->partitions; ++g)
      if (cluster_->raft->brief(g).leader_ready)
        return {true, cluster_->raft->status(g).term, id};
    return {false, cluster_->raft->status(0).term, id};
  }

  delivery_turn delivery_of(const std::string& route_name,
                            const std::string& key) const override {
    auto g = partition(*cluster_, route_name, key);
    auto st = cluster_->raft->status(g);
    auto id = cluster_->raft->id();
    return {st.leader_id == id && st.leader_ready, st.term, id};
  }

  void due(int64_t now_ms, uint32_t limit,
           std::function<void(reply<delivery_queue>)> done) override {
    post([this, now_ms, limit,
          done = std::move(done)](caf::event_based_actor* self) mutable {
      // The queues of the partitions this node leads, merged: the earliest
      // due first, at most `limit`.
      std::vector<uint16_t> led;
      for (uint16_t g = 0; g < cluster_->partitions; ++g)
        if (cluster_->raft->brief(g).leader_ready)
          led.push_back(g);
      if (led.empty()) {
        done(success(delivery_queue{}));
        return;
      }
      struct gather {
        delivery_queue q;
        std::size_t open = 0;
        std::optional<reply<delivery_queue>> failure;
        std::function<void(reply<delivery_queue>)> done;
      };
      auto st = std::make_shared<gather>();
      st->open = led.size();
      st->done = std::move(done);
      // The answers come to this one bridge actor: no lock.
      for (auto g : led)
        ask<delivery_queue>(
          self, parts_[g].store, opts_.service.probe_timeout,
          std::function<void(reply<delivery_queue>)>{
            [st, limit](reply<delivery_queue> rep) {
              if (!rep.ok) {
                if (!st->failure)
                  st->failure = std::move(rep);
              } else {
                for (auto& r : rep.value.due)
                  st->q.due.push_back(std::move(r));
                if (rep.value.next_ms >= 0
                    && (st->q.next_ms < 0 || rep.value.next_ms < st->q.next_ms))
                  st->q.next_ms = rep.value.next_ms;
              }
              if (--st->open > 0)
                return;
              if (st->failure) {
                st->done(std::move(*st->failure));
                return;
              }
              auto& due = st->q.due;
              std::sort(due.begin(), due.end(),
                        [](const record& a, const record& b) {
                          return a.next_attempt_ms < b.next_attempt_ms;
                        });
              if (due.size() > limit)
                due.resize(limit);
              st->done(success(std::move(st->q)));
            }},
          due_atom::value, now_ms, limit);
    });
  }

  void metrics(std::function<void(node_metrics)> done) override {
    post([this, done = std::move(done)](caf::event_based_actor* self) {
      auto info = cluster();
      gather_metrics(self, parts_, opts_.service.probe_timeout,
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
    for (uint16_t g = 0; g < cluster_->partitions; ++g) {
      auto ps = g == 0 ? st : cluster_->raft->status(g);
      partition_info p;
      static_cast<raft_progress&>(p) = ps;
      p.partition = g;
      p.role = to_string(ps.role);
      for (auto& [m, role] : ps.members)
        if (role == RAFT_VOTER)
          p.voters.push_back(m.id);
      res.partitions.push_back(std::move(p));
    }
    return res;
  }

  void change_cluster(cluster_op op, uint64_t id, uint16_t partition,
                      std::function<void(reply<uint64_t>)> done) override {
    link::request call;
    call.node = id;
    switch (op) {
      case cluster_op::transfer:
        if (partition >= cluster_->partitions) {
          reply<uint64_t> res;
          res.error = errc::invalid_argument;
          res.detail = "no partition " + std::to_string(partition)
                       + " (the cluster has "
                       + std::to_string(cluster_->partitions) + ")";
          done(std::move(res));
          return;
        }
        call.kind = link::op::transfer;
        route<uint64_t>(cluster_, partition, std::move(call), deadline(),
                        std::move(done));
        return;
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
    change_members(std::make_shared<link::request>(std::move(call)), 0,
                   std::move(done));
  }

  void ready(std::function<void(bool, std::string)> done) override {
    post([this, done = std::move(done)](caf::event_based_actor* self) {
      // Ready: for every partition, its ready leader, or a follower that
      // reaches the leader and has applied everything it knows to be
      // committed.
      auto parts = cluster_->partitions;
      for (uint16_t g = 0; g < parts; ++g) {
        auto st = cluster_->raft->status(g);
        auto which = parts == 1 ? std::string{}
                                : " (partition " + std::to_string(g) + ")";
        if (st.leader_id == 0) {
          done(false, "no raft leader" + which);
          return;
        }
        if (!st.leader_ready && st.leader_id == cluster_->raft->id()) {
          done(false, "leader not ready (catching up)" + which);
          return;
        }
        if (st.applied_index < st.commit_index) {
          done(false, "applying the committed log" + which);
          return;
        }
        if (!st.leader_ready && !cluster_->raft->leader_linked(g)) {
          done(false, "connecting to the leader" + which);
          return;
        }
      }
      probe_store(self, parts_, opts_.service.probe_timeout, std::move(done));
    });
  }

private:
  // Adds or removes a node in partition `group` and then in the next ones,
  // each through its leader, in order; stops at the first failure, which
  // names its partition. A partition that already has the change (an
  // earlier attempt got that far) is passed, so the same command again
  // finishes the rest. A node to be removed from a partition it leads
  // hands that leadership to another voter first (`moves`: how many
  // such hand-overs this partition had, bounded).
  void change_members(std::shared_ptr<link::request> call, uint16_t group,
                      std::function<void(reply<uint64_t>)> done,
                      int moves = 0, bool moved = false) {
    auto parts = cluster_->partitions;
    while (group < parts && already_changed(*call, group)) {
      ++group;
      moves = 0;
    }
    if (group >= parts) {
      done(success(uint64_t{0}));
      return;
    }
    if (parts > 1 && call->kind == link::op::remove && !moved && moves < 3
        && cluster_->raft->status(group).leader_id == call->node) {
      link::request away;
      away.kind = link::op::transfer;
      away.node = 0;
      route<uint64_t>(cluster_, group, std::move(away), deadline(),
                      [this, call, group, done,
                       moves](reply<uint64_t> rep) {
                        // Another node leads it now (this node's view may
                        // lag): remove there. Otherwise look again.
                        bool away = rep.ok && rep.value != 0
                                    && rep.value != call->node;
                        change_members(call, group, done, moves + 1, away);
                      });
      return;
    }
    route<uint64_t>(
      cluster_, group, *call, deadline(),
      [this, call, group, parts, done](reply<uint64_t> rep) mutable {
        if (!rep.ok) {
          if (parts > 1)
            rep.detail = "partition " + std::to_string(group) + " of "
                         + std::to_string(parts) + ": " + rep.detail
                         + (group > 0 ? " (the partitions before it have "
                                        "the change: run it again)"
                                      : "");
          done(std::move(rep));
          return;
        }
        change_members(call, group + 1, std::move(done));
      });
  }

  // Whether this node's view of partition `group`'s configuration has the
  // change already (a voter added, a member removed). Partition 0 is
  // always asked: a single partition answers as before.
  bool already_changed(const link::request& call, uint16_t group) const {
    if (cluster_->partitions == 1)
      return false;
    auto st = cluster_->raft->status(group);
    auto m = std::find_if(st.members.begin(), st.members.end(),
                          [&call](const auto& x) {
                            return x.first.id == call.node;
                          });
    if (call.kind == link::op::add)
      return m != st.members.end() && m->second == RAFT_VOTER;
    return m == st.members.end();
  }

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
    auto group = partition(*cluster_, upd.route, upd.key);
    route<update_result>(cluster_, group, update_request(std::move(upd)),
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

  /// Partition g's actors.
  std::vector<node> parts_;
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
  cr->partitions = static_cast<uint16_t>(n.parts.size());
  cr->context = n.context;
  cr->bridge = n.bridge;
  cr->peers = n.opts.peers;
  cr->remote_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
    n.opts.remote_timeout);
  cr->retry_interval = opts.retry_interval;
  return std::make_unique<routed_service>(n.parts, opts, std::move(cr),
                                          n.refused_messages);
}

} // namespace oncegate::gateway
