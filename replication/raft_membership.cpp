#include "replication/raft_node.hpp"

// What changes who leads or votes in a Raft node (raft_node_impl.hpp):
// membership changes (add, add as voter, assign, remove), leadership
// transfer, and the repair of a stuck follower by a transfer. The node's
// loop and proposals are raft_node.cpp.

#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/logging.hpp"
#include "replication/leader_balance.hpp"
#include "replication/raft_node_impl.hpp"

namespace oncegate::cluster {

namespace {

using detail::clock_type;

struct change_request {
  ::raft_change req;
  std::function<void(int)> done;
};

} // namespace

// On the ready leader, twice a second: finds a follower that answers but
// stays behind (its match index below the commit index, unchanged for
// `repair_after_ms`) and hands leadership to an up-to-date voter. libraft
// 0.15 may otherwise leave it behind for good: its own snapshot made it
// refuse the leader's install (RAFT_BUSY), after which this leader only
// probes below what it kept; a new leader's replication state starts
// afresh and sends the snapshot again.
void raft_node::impl::check_followers(raft_status& next) {
  auto now = clock_type::now();
  if (opts.repair_after_ms == 0
      || now - last_lag_check < std::chrono::milliseconds(500))
    return;
  last_lag_check = now;
  auto bound = std::chrono::milliseconds(opts.repair_after_ms);
  uint64_t stuck = 0;
  raft_index stuck_at = 0;
  for (unsigned i = 0; i < r.configuration.n; ++i) {
    auto id = r.configuration.servers[i].id;
    auto& p = r.leader_state.progress[i];
    if (id == r.id || p.match_index >= r.commit_index || !p.recent_recv) {
      lags.erase(id);
      continue;
    }
    auto [it, fresh] = lags.try_emplace(id, lag{p.match_index, now});
    if (fresh || it->second.match != p.match_index) {
      it->second = lag{p.match_index, now};
      continue;
    }
    if (now - it->second.since >= bound) {
      stuck = id;
      stuck_at = p.match_index;
    }
  }
  if (stuck == 0 || transfer_done || now - last_repair < 2 * bound)
    return;
  // The target: a voter other than the stuck one that has everything.
  uint64_t target = 0;
  for (unsigned i = 0; i < r.configuration.n; ++i) {
    auto& srv = r.configuration.servers[i];
    auto& p = r.leader_state.progress[i];
    if (srv.id != r.id && srv.id != stuck && srv.role == RAFT_VOTER
        && p.recent_recv && p.match_index >= r.commit_index)
      target = srv.id;
  }
  if (target == 0) {
    log::cluster()->warn("raft.follower_stuck id={} match={} commit={} "
                         "(no up-to-date voter to hand leadership to)",
                         stuck, stuck_at, r.commit_index);
    last_repair = now;
    return;
  }
  last_repair = now;
  lags.clear();
  ++next.follower_repairs;
  log::cluster()->warn("raft.follower_stuck id={} match={} commit={} "
                       "repair=transfer to={}",
                       stuck, stuck_at, r.commit_index, target);
  do_transfer(target, [stuck](uint64_t leader) {
    log::cluster()->info("raft.follower_repair id={} new_leader={}", stuck,
                         leader);
  });
}

// Hands leadership to `id` (0: any voter); `done` gets the leader
// afterwards, or 0 when the transfer could not start.
// libraft sends the TimeoutNow of a transfer through the `raft_io_send`
// inside the `raft_transfer` given to it, without a callback; towards an
// unreachable voter that send waits in the peer's queue and is read
// (evicted, cancelled) after the transfer ended. So the request is never
// freed while the loop runs: one lives as long as the node, reused by
// each transfer (libraft runs one at a time). Freeing it in its callback
// crashed a leader that stepped down towards a dead voter.
void raft_node::impl::do_transfer(uint64_t id,
                                   std::function<void(uint64_t)> done) {
  if (transfer_done) {
    log::cluster()->warn("raft.transfer_refused target={} reason=running",
                         id);
    done(0);
    return;
  }
  transfer_done = std::move(done);
  transfer.data = this;
  auto rv = raft_transfer(&r, &transfer, id, [](struct ::raft_transfer* req) {
    auto self = static_cast<impl*>(req->data);
    raft_id lid = 0;
    const char* addr = nullptr;
    raft_leader(&self->r, &lid, &addr);
    auto done = std::move(self->transfer_done);
    self->transfer_done = nullptr;
    done(lid);
  });
  if (rv != 0) {
    log::cluster()->warn("raft.transfer_failed target={} status={}", id,
                         raft_strerror(rv));
    auto done = std::move(transfer_done);
    transfer_done = nullptr;
    done(0);
  }
}

void raft_node::impl::do_change(int kind, uint64_t id,
                                 const std::string& address, int role,
                                 std::function<void(int)>& done) {
  auto c = new change_request{};
  c->done = std::move(done);
  auto cb = [](::raft_change* req, int st) {
    std::unique_ptr<change_request> c{
      reinterpret_cast<change_request*>(req)};
    c->done(st);
  };
  int rv = 0;
  switch (kind) {
    case 0:
      rv = raft_add(&r, &c->req, id, address.c_str(), cb);
      break;
    case 1:
      rv = raft_assign(&r, &c->req, id, role, cb);
      break;
    default:
      rv = raft_remove(&r, &c->req, id, cb);
  }
  if (rv != 0) {
    std::unique_ptr<change_request> guard{c};
    c->done(rv);
  }
}

// Every loop turn, cheap unless it acts: with several groups, once every
// group's leader and the voters this node reaches stayed the same for
// `balance_interval_ms` (no failover or rejoin under way) and no transfer
// of this node runs, this node hands one group it leads to a reachable,
// caught-up voter that leads at least two fewer, if it is the one node of
// the cluster that should move (`next_leader_move`); then it waits as long
// again. So leaderships spread one move at a time, and a calm, balanced
// cluster moves nothing.
void raft_node::host::balance() {
  if (groups.size() < 2 || balance_interval_ms == 0)
    return;
  auto now = detail::clock_type::now();
  auto interval = std::chrono::milliseconds(balance_interval_ms);
  std::vector<uint64_t> view;
  for (auto& g : groups) {
    if (g->closing || g->close_pending || g->transfer_done)
      return; // stopping, or a transfer of this node under way
    view.push_back(g->current.leader_id);
  }
  // The voters of group 0's configuration that this node reaches now.
  auto& first = *groups[0];
  std::vector<uint64_t> voters;
  for (unsigned i = 0; i < first.r.configuration.n; ++i) {
    auto& srv = first.r.configuration.servers[i];
    if (srv.role == RAFT_VOTER
        && (srv.id == id || link::connected(&first.transport, srv.id)))
      voters.push_back(srv.id);
  }
  auto leaders = view;
  view.push_back(0); // the voters follow the leaders in the calm view
  view.insert(view.end(), voters.begin(), voters.end());
  if (view != balance_view) {
    balance_view = std::move(view);
    balance_view_since = now;
    return;
  }
  if (now - balance_view_since < interval || now - last_move < interval)
    return;
  // A voter of that group, caught up with what this leader committed.
  auto eligible = [this](uint16_t group, uint64_t to) {
    auto& r = groups[group]->r;
    if (raft_state(&r) != RAFT_LEADER)
      return false;
    for (unsigned i = 0; i < r.configuration.n; ++i)
      if (r.configuration.servers[i].id == to)
        return r.configuration.servers[i].role == RAFT_VOTER
               && r.leader_state.progress[i].recent_recv
               && r.leader_state.progress[i].match_index >= r.commit_index;
    return false;
  };
  auto move = next_leader_move(id, leaders, voters, eligible);
  if (!move)
    return;
  last_move = now;
  auto& g = *groups[move->group];
  ++moves;
  log::cluster()->info("raft.balance group={} to={} moves={}", move->group,
                       move->to, moves);
  g.do_transfer(move->to, [group = move->group, to = move->to](uint64_t l) {
    if (l != to)
      log::cluster()->info("raft.balance_missed group={} to={} leader={}",
                           group, to, l);
  });
}

std::size_t raft_node::hand_off(std::chrono::milliseconds bound) {
  auto h = host_.get();
  if (h->thread.get_id() == std::this_thread::get_id())
    return 0;
  struct handing {
    std::mutex mtx;
    std::condition_variable cv;
    bool started = false;
    std::size_t running = 0;
    std::size_t moved = 0;
  };
  auto st = std::make_shared<handing>();
  auto ok = h->post(
    [h, st] {
      std::vector<impl*> led;
      // A group without another voter has nobody to hand to.
      auto others = [h](const raft& r) {
        for (unsigned i = 0; i < r.configuration.n; ++i)
          if (r.configuration.servers[i].role == RAFT_VOTER
              && r.configuration.servers[i].id != h->id)
            return true;
        return false;
      };
      for (auto& g : h->groups)
        if (!g->closing && !g->close_pending && !g->transfer_done
            && raft_state(&g->r) == RAFT_LEADER && others(g->r))
          led.push_back(g.get());
      {
        std::lock_guard<std::mutex> guard{st->mtx};
        st->started = true;
        st->running = led.size();
      }
      st->cv.notify_all();
      for (auto g : led) {
        log::cluster()->info("raft.hand_off group={}", g->group);
        g->do_transfer(0, [st, group = g->group, self = h->id](uint64_t l) {
          log::cluster()->info("raft.handed_off group={} leader={}", group, l);
          {
            std::lock_guard<std::mutex> guard{st->mtx};
            --st->running;
            if (l != 0 && l != self)
              ++st->moved;
          }
          st->cv.notify_all();
        });
      }
    },
    false);
  if (!ok)
    return 0;
  std::unique_lock<std::mutex> lock{st->mtx};
  st->cv.wait_for(lock, bound, [&] { return st->started && st->running == 0; });
  return st->moved;
}

void raft_node::host::post_change(
  std::function<void(int)> done,
  std::function<void(std::function<void(int)>&)> fn) {
  auto shared = std::make_shared<std::function<void(int)>>(std::move(done));
  if (!post([shared, fn = std::move(fn)] { fn(*shared); }, false))
    (*shared)(RAFT_SHUTDOWN);
}

void raft_node::add(uint64_t id, std::string address,
                    std::function<void(int)> done, uint16_t g) {
  auto self = &group(g);
  host_->post_change(std::move(done), [self, id, address](auto& done) {
    self->do_change(0, id, address, 0, done);
  });
}

void raft_node::add_voter(uint64_t id, std::string address,
                          std::function<void(int)> done, uint16_t g) {
  auto self = &group(g);
  host_->post_change(std::move(done), [self, id, address](auto& done) {
    auto shared = std::make_shared<std::function<void(int)>>(std::move(done));
    std::function<void(int)> then = [self, id, shared](int status) {
      if (status != 0) {
        (*shared)(status);
        return;
      }
      std::function<void(int)> last = *shared;
      self->do_change(1, id, {}, RAFT_VOTER, last);
    };
    self->do_change(0, id, address, 0, then);
  });
}

void raft_node::assign(uint64_t id, int role, std::function<void(int)> done,
                       uint16_t g) {
  auto self = &group(g);
  host_->post_change(std::move(done), [self, id, role](auto& done) {
    self->do_change(1, id, {}, role, done);
  });
}

void raft_node::remove(uint64_t id, std::function<void(int)> done,
                       uint16_t g) {
  auto self = &group(g);
  host_->post_change(std::move(done), [self, id](auto& done) {
    self->do_change(2, id, {}, 0, done);
  });
}

void raft_node::transfer(uint64_t id, std::function<void(uint64_t)> done,
                         uint16_t g) {
  auto self = &group(g);
  auto shared = std::make_shared<std::function<void(uint64_t)>>(
    std::move(done));
  auto ok = host_->post(
    [self, id, shared] { self->do_transfer(id, std::move(*shared)); },
    false);
  if (!ok)
    (*shared)(0);
}

} // namespace oncegate::cluster
