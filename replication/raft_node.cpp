#include "replication/raft_node.hpp"
#include "common/enum_text.hpp"

#include <atomic>
#include <unordered_map>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>
#include <system_error>

// libraft 0.15's headers lack extern "C" guards.
extern "C" {
#include <raft.h>
#include <raft/uv.h>
#include <uv.h>
}

#include "replication/raft_fsm.hpp"
#include "common/errc.hpp"
#include "common/logging.hpp"

namespace oncegate::cluster {

constexpr const char* raft_role_names[] = {
  "unavailable", "follower", "candidate", "leader"};
static_assert(enum_table_covers(raft_role::leader, raft_role_names));

const char* to_string(raft_role x) {
  return enum_text(x, raft_role_names);
}

const char* raft_error_text(int status) {
  return raft_strerror(status);
}

// Member roles are numbered from 0 by libraft.
constexpr const char* member_role_names[] = {"standby", "voter", "spare"};
static_assert(RAFT_STANDBY == 0 && RAFT_VOTER == 1 && RAFT_SPARE == 2);

const char* raft_role_name(int role) {
  auto known =
      role >= 0 && role < static_cast<int>(std::size(member_role_names));
  return known ? member_role_names[role] : "unknown";
}

namespace {

using clock_type = std::chrono::steady_clock;

raft_role role_of(int state) {
  switch (state) {
    case RAFT_FOLLOWER:
      return raft_role::follower;
    case RAFT_CANDIDATE:
      return raft_role::candidate;
    case RAFT_LEADER:
      return raft_role::leader;
    default:
      return raft_role::unavailable;
  }
}

struct proposal {
  struct ::raft_apply req;
  proposal_done done;
  clock_type::time_point started;
};

struct change_request {
  ::raft_change req;
  std::function<void(int)> done;
};

} // namespace

struct raft_node::impl {
  raft_node_options opts;
  raft_hooks hooks;
  std::unique_ptr<raft_fsm_adapter> adapter;

  uv_loop_t loop;
  uv_async_t wake;
  uv_check_t poll;
  uv_timer_t tick;
  ::raft_uv_transport transport;
  ::raft_io io;
  ::raft r;
  struct ::raft_barrier barrier;
  /// The one transfer request (see `do_transfer`) and its caller's callback
  /// while a transfer runs.
  struct ::raft_transfer transfer;
  std::function<void(uint64_t)> transfer_done;
  bool barrier_pending = false;
  std::thread thread;

  // Work handed over by other threads.
  std::mutex queue_mtx;
  std::deque<std::function<void()>> queue;
  bool stopping = false;

  // Published state.
  mutable std::mutex status_mtx;
  raft_status published;

  std::atomic<uint8_t> brief_role{0};
  std::atomic<uint64_t> brief_leader{0};
  std::atomic<bool> brief_ready{false};

  // Raft-thread view (no lock needed on the thread).
  raft_status current;
  uint64_t ready_term = 0;
  /// Apply failures seen while not leader (or when stepping down last);
  /// more than these while leading make the node hand leadership over.
  uint64_t step_down_failures = 0;
  bool stepping_down = false;
  clock_type::time_point last_step_down;
  uint64_t configuration_index = ~uint64_t{0};
  bool lost = false;
  bool closing = false;
  /// Per follower: the replicated index it was last seen at while behind,
  /// and since when (see `raft_node_options::repair_after_ms`).
  struct lag {
    raft_index match = 0;
    clock_type::time_point since;
  };
  std::unordered_map<uint64_t, lag> lags;
  clock_type::time_point last_lag_check;
  clock_type::time_point last_repair;

  impl() {
    std::memset(&loop, 0, sizeof(loop));
    std::memset(&wake, 0, sizeof(wake));
    std::memset(&poll, 0, sizeof(poll));
    std::memset(&tick, 0, sizeof(tick));
    std::memset(&transport, 0, sizeof(transport));
    std::memset(&io, 0, sizeof(io));
    std::memset(&r, 0, sizeof(r));
    std::memset(&barrier, 0, sizeof(barrier));
    std::memset(&transfer, 0, sizeof(transfer));
  }

  // -- on the Raft thread -----------------------------------------------------

  void drain() {
    std::deque<std::function<void()>> work;
    bool stop = false;
    {
      std::lock_guard<std::mutex> guard{queue_mtx};
      work.swap(queue);
      stop = stopping;
    }
    for (auto& fn : work)
      fn();
    if (stop)
      close();
  }

  void close() {
    if (uv_is_closing(reinterpret_cast<uv_handle_t*>(&wake)))
      return;
    // raft_close turns libraft unavailable on purpose; callbacks it runs
    // meanwhile (a barrier's) may still refresh: that is no failure.
    closing = true;
    uv_close(reinterpret_cast<uv_handle_t*>(&wake), nullptr);
    uv_check_stop(&poll);
    uv_close(reinterpret_cast<uv_handle_t*>(&poll), nullptr);
    uv_timer_stop(&tick);
    uv_close(reinterpret_cast<uv_handle_t*>(&tick), nullptr);
    r.data = this;
    raft_close(&r, [](::raft* r) {
      auto self = static_cast<impl*>(r->data);
      raft_uv_close(&self->io);
      if (self->opts.tls)
        tls_transport_close(&self->transport);
      else
        raft_uv_tcp_close(&self->transport);
    });
  }

  // On the ready leader, twice a second: finds a follower that answers but
  // stays behind (its match index below the commit index, unchanged for
  // `repair_after_ms`) and hands leadership to an up-to-date voter. libraft
  // 0.15 may otherwise leave it behind for good: its own snapshot made it
  // refuse the leader's install (RAFT_BUSY), after which this leader only
  // probes below what it kept; a new leader's replication state starts
  // afresh and sends the snapshot again.
  void check_followers(raft_status& next) {
    auto now = clock_type::now();
    if (opts.repair_after_ms == 0 || now - last_lag_check < std::chrono::milliseconds(500))
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

  // Reads libraft's state; publishes and reports changes.
  void refresh() {
    auto next = current;
    next.role = role_of(raft_state(&r));
    next.term = r.current_term;
    raft_id lid = 0;
    const char* laddr = nullptr;
    raft_leader(&r, &lid, &laddr);
    next.leader_id = lid;
    next.leader_address = laddr ? laddr : "";
    next.commit_index = r.commit_index;
    next.applied_index = raft_last_applied(&r);
    next.last_index = r.last_stored;
    next.apply_failures = adapter->failures();
    next.snapshots = adapter->snapshots();
    next.log_bytes = adapter->log_bytes();
    // A leader that cannot apply (its disk is full, say) would keep leading
    // while deciding nothing: hand leadership to a voter that can. It keeps
    // retrying as a follower and catches up once it can write again.
    if (next.role == raft_role::leader
        && next.apply_failures > step_down_failures && !stepping_down
        && clock_type::now() - last_step_down >= std::chrono::seconds(1)) {
      stepping_down = true;
      last_step_down = clock_type::now();
      // Until another node leads, try again (at most once a second).
      step_down_failures = next.apply_failures - 1;
      log::cluster()->error("raft.step_down reason=apply_failed failures={}",
                            next.apply_failures);
      do_transfer(0, [this](uint64_t leader) {
        stepping_down = false;
        log::cluster()->warn("raft.stepped_down new_leader={}", leader);
      });
    } else if (next.role != raft_role::leader) {
      step_down_failures = next.apply_failures;
    }
    next.leader_ready = next.role == raft_role::leader
                        && ready_term == next.term;
    if (next.leader_ready)
      check_followers(next);
    else
      lags.clear();
    bool changed = next.role != current.role || next.term != current.term
                   || next.leader_id != current.leader_id
                   || next.leader_ready != current.leader_ready;
    auto conf_index = std::max<uint64_t>(r.configuration_index,
                                         r.configuration_uncommitted_index);
    if (conf_index != configuration_index) {
      configuration_index = conf_index;
      changed = true;
    }
    if (next.leader_id != current.leader_id)
      ++next.leader_changes;
    if (changed) {
      next.members.clear();
      for (unsigned i = 0; i < r.configuration.n; ++i) {
        auto& srv = r.configuration.servers[i];
        next.members.emplace_back(member{srv.id, srv.address}, srv.role);
      }
    }
    current = std::move(next);
    {
      std::lock_guard<std::mutex> guard{status_mtx};
      published = current;
    }
    // Running means started and not closing, so `unavailable` here is for
    // good.
    if (current.role == raft_role::unavailable && !lost && !closing) {
      lost = true;
      log::cluster()->critical("raft.unavailable term={} (libraft stopped "
                               "after an I/O error; restart the node)",
                               current.term);
      if (hooks.on_unavailable)
        hooks.on_unavailable();
    }
    brief_role.store(static_cast<uint8_t>(current.role),
                     std::memory_order_release);
    brief_leader.store(current.leader_id, std::memory_order_release);
    brief_ready.store(current.leader_ready, std::memory_order_release);
    if (!changed)
      return;
    log::cluster()->info("raft.state role={} term={} leader={} ready={}",
                         to_string(current.role), current.term,
                         current.leader_id, current.leader_ready);
    // A new leader commits nothing of earlier terms until an entry of its
    // own term commits: the barrier makes sure everything is applied before
    // the node decides anything.
    if (current.role == raft_role::leader && ready_term != current.term
        && !barrier_pending) {
      barrier_pending = true;
      barrier.data = this;
      auto term = current.term;
      auto rv = raft_barrier(&r, &barrier, [](struct ::raft_barrier* req, int st) {
        auto self = static_cast<impl*>(req->data);
        self->barrier_pending = false;
        if (st == 0 && raft_state(&self->r) == RAFT_LEADER)
          self->ready_term = self->r.current_term;
        else
          log::cluster()->warn("raft.barrier_failed status={}",
                               raft_strerror(st));
        self->refresh();
      });
      if (rv != 0) {
        barrier_pending = false;
        log::cluster()->warn("raft.barrier_failed term={} status={}", term,
                             raft_strerror(rv));
      }
    }
    if (hooks.on_change)
      hooks.on_change(current);
  }

  void do_propose(std::string& entry, proposal_done& done) {
    auto p = new proposal{};
    p->done = std::move(done);
    p->started = clock_type::now();
    p->req.data = this;
    ::raft_buffer buf;
    buf.len = entry.size();
    buf.base = raft_malloc(entry.size());
    if (buf.base == nullptr) {
      finish(p, RAFT_NOMEM, nullptr);
      return;
    }
    std::memcpy(buf.base, entry.data(), entry.size());
    auto rv = raft_apply(&r, &p->req, &buf, 1,
                         [](struct ::raft_apply* req, int st, void* result) {
                           auto p = reinterpret_cast<proposal*>(req);
                           static_cast<impl*>(req->data)->finish(p, st,
                                                                 result);
                         });
    if (rv != 0) {
      raft_free(buf.base);
      finish(p, rv, nullptr);
    }
  }

  void finish(proposal* p, int status, void* result) {
    std::unique_ptr<proposal> guard{p};
    // Owned by the FSM adapter, valid during this call (see raft_fsm.hpp).
    auto res = static_cast<std::vector<persistence::command_result>*>(result);
    auto secs = std::chrono::duration<double>(clock_type::now() - p->started)
                  .count();
    if (status == 0 && res) {
      ++current.proposals_applied;
    } else {
      ++current.proposals_failed;
      if (status == 0)
        status = RAFT_IOERR; // applied, but the FSM failed on it
    }
    current.proposal_seconds_sum += secs;
    {
      std::lock_guard<std::mutex> lock{status_mtx};
      published.proposals_applied = current.proposals_applied;
      published.proposals_failed = current.proposals_failed;
      published.proposal_seconds_sum = current.proposal_seconds_sum;
    }
    p->done(status, res ? std::move(*res)
                        : std::vector<persistence::command_result>{});
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
  void do_transfer(uint64_t id, std::function<void(uint64_t)> done) {
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

  void do_change(int kind, uint64_t id, const std::string& address, int role,
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

  // -- any thread -------------------------------------------------------------

  bool post(std::function<void()> fn, bool bounded) {
    {
      std::lock_guard<std::mutex> guard{queue_mtx};
      if (stopping || (bounded && queue.size() >= opts.max_queued))
        return false;
      queue.emplace_back(std::move(fn));
    }
    uv_async_send(&wake);
    return true;
  }
};

raft_node::raft_node(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

tls_transport_stats raft_node::transport_stats() const {
  if (!impl_->opts.tls)
    return {};
  return tls_transport_stats_of(&impl_->transport);
}

raft_node::~raft_node() {
  {
    std::lock_guard<std::mutex> guard{impl_->queue_mtx};
    impl_->stopping = true;
  }
  uv_async_send(&impl_->wake);
  if (impl_->thread.joinable())
    impl_->thread.join();
  uv_loop_close(&impl_->loop);
}

caf::expected<std::unique_ptr<raft_node>>
raft_node::start(raft_node_options opts, persistence::sqlite_store& db,
                 raft_hooks hooks) {
  auto fail = [](const std::string& what, int rv) {
    return make_error(errc::storage_failure,
                      "raft: " + what + ": " + raft_strerror(rv));
  };
  // libuv writes to peers' sockets without MSG_NOSIGNAL: a write to a dead
  // peer must cost an error code, not the process.
  std::signal(SIGPIPE, SIG_IGN);
  std::error_code ec;
  std::filesystem::create_directories(opts.dir, ec);
  if (ec)
    return make_error(errc::storage_failure,
                      "cannot create raft dir " + opts.dir + ": "
                        + ec.message());
  auto st = std::make_unique<impl>();
  auto& x = *st;
  x.opts = std::move(opts);
  x.hooks = std::move(hooks);
  x.adapter = std::make_unique<raft_fsm_adapter>(db, true);
  if (x.hooks.on_applied)
    x.adapter->on_applied(x.hooks.on_applied);
  if (x.hooks.on_restored)
    x.adapter->on_restored(x.hooks.on_restored);
  if (auto rv = uv_loop_init(&x.loop); rv != 0)
    return make_error(errc::storage_failure,
                      std::string{"uv_loop_init: "} + uv_strerror(rv));
  // Anything failing below leaves a loop with handles behind; the process
  // exits on a failed start, so only the loop itself matters.
  if (x.opts.tls) {
    std::string error;
    if (auto rv = tls_transport_init(&x.transport, &x.loop, *x.opts.tls,
                                     error);
        rv != 0)
      return make_error(errc::invalid_argument, "raft tls: " + error);
  } else if (auto rv = raft_uv_tcp_init(&x.transport, &x.loop); rv != 0) {
    return fail("transport", rv);
  }
  if (auto rv = raft_uv_init(&x.io, &x.loop, x.opts.dir.c_str(),
                             &x.transport);
      rv != 0)
    return fail("io " + x.opts.dir, rv);
  // raft_uv implements the async work of version 2 but reports version 1,
  // which would make libraft reject the FSM's async snapshots.
  x.io.version = 2;
  if (auto rv = raft_init(&x.r, &x.io, x.adapter->fsm(), x.opts.id,
                          x.opts.address.c_str());
      rv != 0)
    return fail("init", rv);
  x.adapter->attach(&x.r);
  raft_set_election_timeout(&x.r, x.opts.election_timeout_ms);
  raft_set_heartbeat_timeout(&x.r, x.opts.heartbeat_timeout_ms);
  raft_set_snapshot_threshold(&x.r, x.opts.snapshot_threshold);
  raft_set_snapshot_trailing(&x.r, x.opts.snapshot_trailing);
  x.adapter->bound_log(x.opts.max_log_bytes, x.opts.snapshot_threshold,
                       x.opts.snapshot_trailing);
  raft_set_pre_vote(&x.r, true);
  if (x.opts.bootstrap) {
    ::raft_configuration conf;
    raft_configuration_init(&conf);
    for (auto& m : x.opts.initial) {
      if (auto rv = raft_configuration_add(&conf, m.id, m.address.c_str(),
                                           RAFT_VOTER);
          rv != 0) {
        raft_configuration_close(&conf);
        return fail("configuration", rv);
      }
    }
    auto rv = raft_bootstrap(&x.r, &conf);
    raft_configuration_close(&conf);
    if (rv != 0 && rv != RAFT_CANTBOOTSTRAP)
      return fail("bootstrap", rv);
  }
  if (auto rv = raft_start(&x.r); rv != 0)
    return fail("start", rv);
  x.wake.data = &x;
  uv_async_init(&x.loop, &x.wake, [](uv_async_t* h) {
    static_cast<impl*>(h->data)->drain();
  });
  x.poll.data = &x;
  uv_check_init(&x.loop, &x.poll);
  uv_check_start(&x.poll, [](uv_check_t* h) {
    static_cast<impl*>(h->data)->refresh();
  });
  // The check runs after every loop turn; the timer makes sure there is a
  // turn at least every 10 ms.
  x.tick.data = &x;
  uv_timer_init(&x.loop, &x.tick);
  uv_timer_start(&x.tick, [](uv_timer_t*) {}, 10, 10);
  x.refresh();
  log::cluster()->info("raft.started id={} address={} dir={} bootstrap={}",
                       x.opts.id, x.opts.address, x.opts.dir,
                       x.opts.bootstrap);
  x.thread = std::thread{[&x] { uv_run(&x.loop, UV_RUN_DEFAULT); }};
  return std::unique_ptr<raft_node>{new raft_node(std::move(st))};
}

void raft_node::propose(std::string entry, proposal_done done) {
  auto self = impl_.get();
  auto shared = std::make_shared<proposal_done>(std::move(done));
  auto ok = self->post(
    [self, entry = std::move(entry), shared]() mutable {
      self->do_propose(entry, *shared);
    },
    true);
  if (!ok)
    (*shared)(RAFT_BUSY, {});
}

void raft_node::add(uint64_t id, std::string address,
                    std::function<void(int)> done) {
  auto self = impl_.get();
  auto shared = std::make_shared<std::function<void(int)>>(std::move(done));
  if (!self->post([self, id, address, shared] {
        self->do_change(0, id, address, 0, *shared);
      },
                  false))
    (*shared)(RAFT_SHUTDOWN);
}

void raft_node::add_voter(uint64_t id, std::string address,
                          std::function<void(int)> done) {
  auto self = impl_.get();
  auto shared = std::make_shared<std::function<void(int)>>(std::move(done));
  if (!self->post(
        [self, id, address, shared] {
          std::function<void(int)> then = [self, id, shared](int status) {
            if (status != 0) {
              (*shared)(status);
              return;
            }
            std::function<void(int)> last = *shared;
            self->do_change(1, id, {}, RAFT_VOTER, last);
          };
          self->do_change(0, id, address, 0, then);
        },
        false))
    (*shared)(RAFT_SHUTDOWN);
}

void raft_node::assign(uint64_t id, int role, std::function<void(int)> done) {
  auto self = impl_.get();
  auto shared = std::make_shared<std::function<void(int)>>(std::move(done));
  if (!self->post([self, id, role, shared] {
        self->do_change(1, id, {}, role, *shared);
      },
                  false))
    (*shared)(RAFT_SHUTDOWN);
}

void raft_node::remove(uint64_t id, std::function<void(int)> done) {
  auto self = impl_.get();
  auto shared = std::make_shared<std::function<void(int)>>(std::move(done));
  if (!self->post([self, id, shared] {
        self->do_change(2, id, {}, 0, *shared);
      },
                  false))
    (*shared)(RAFT_SHUTDOWN);
}

void raft_node::transfer(uint64_t id, std::function<void(uint64_t)> done) {
  auto self = impl_.get();
  auto shared = std::make_shared<std::function<void(uint64_t)>>(
    std::move(done));
  auto ok = self->post(
    [self, id, shared] { self->do_transfer(id, std::move(*shared)); },
    false);
  if (!ok)
    (*shared)(0);
}

raft_status raft_node::status() const {
  std::lock_guard<std::mutex> guard{impl_->status_mtx};
  return impl_->published;
}

raft_brief raft_node::brief() const {
  raft_brief res;
  res.role = static_cast<raft_role>(
    impl_->brief_role.load(std::memory_order_acquire));
  res.leader_id = impl_->brief_leader.load(std::memory_order_acquire);
  res.leader_ready = impl_->brief_ready.load(std::memory_order_acquire);
  return res;
}

uint64_t raft_node::id() const {
  return impl_->opts.id;
}

} // namespace oncegate::cluster
