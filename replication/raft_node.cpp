// The Raft node's loop (raft_node_impl.hpp): start (a libraft server per
// group over its transport on the one node link, all on one libuv thread)
// and stop, the queue other threads post to, proposals, and reading
// libraft's state after every loop turn (roles, the barrier of a new
// leader, the step-down of a leader that cannot apply), published for
// other threads.
// Membership changes, transfers and the stuck-follower repair are
// raft_membership.cpp.

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "common/enum_text.hpp"
#include "common/errc.hpp"
#include "common/logging.hpp"
#include "common/stage_trace.hpp"
#include "replication/raft_node_impl.hpp"
#include "replication/raft_segments.hpp"

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

using detail::clock_type;
using detail::proposal;

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

} // namespace

std::string group_dir(const std::string& dir, uint16_t group) {
  return group == 0 ? dir : dir + "-" + std::to_string(group);
}

void raft_node::host::drain() {
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
    for (auto& g : groups)
      if (!g->closed)
        g->close_when_stored();
}

void raft_node::host::on_check() {
  stage_trace::mark("loop.check");
  // A follower's entries are written after its answers to the leader have
  // left (raft_fsm.hpp): the commit waits for those answers, not for this
  // node's SQLite. libraft wrote the answers of the entries it applied last
  // turn to its socketpairs; the link read and framed them in this turn's
  // poll: send them, then write those entries (not the ones applied this
  // turn, whose answers the link reads next turn).
  auto ripe = [](auto& g) {
    return !g->closed && g->ripe > 0 && g->adapter->deferred() > 0
           && g->adapter->flush_due();
  };
  if (std::any_of(groups.begin(), groups.end(), ripe)) {
    auto open = std::find_if(groups.begin(), groups.end(),
                             [](auto& g) { return !g->closed; });
    link::flush(&(*open)->transport); // the groups share one endpoint
    for (auto& g : groups)
      if (ripe(g))
        g->adapter->flush(g->ripe);
  }
  for (auto& g : groups)
    g->ripe = g->closed ? 0 : g->adapter->last_deferred();
  for (auto& g : groups) {
    if (g->closed)
      continue;
    g->admit_held();
    g->refresh();
    if (g->close_pending)
      g->close_when_stored();
  }
  balance();
}

void raft_node::host::close_when_groups_closed() {
  if (handles_closed)
    return;
  for (auto& g : groups)
    if (!g->closed)
      return;
  handles_closed = true;
  uv_close(reinterpret_cast<uv_handle_t*>(&wake), nullptr);
  uv_check_stop(&poll);
  uv_close(reinterpret_cast<uv_handle_t*>(&poll), nullptr);
  uv_timer_stop(&tick);
  uv_close(reinterpret_cast<uv_handle_t*>(&tick), nullptr);
}

void raft_node::impl::close_when_stored() {
  // libraft 0.15 can free twice while it closes a log segment that still
  // has a write in flight (seen at 3 of 8 stops under traffic, an abort in
  // raft_close; fixed upstream after 0.15): close when every entry it holds
  // is stored. Entries from a leader keep arriving on a busy follower, so
  // the wait is bounded; it never delays what is durable.
  auto now = std::chrono::steady_clock::now();
  if (!close_pending) {
    close_pending = true;
    close_asked = now;
  }
  if (raft_last_index(&r) != r.last_stored
      && now - close_asked < std::chrono::seconds(1))
    return;
  close();
}

void raft_node::impl::close() {
  if (closed)
    return;
  // raft_close turns libraft unavailable on purpose; callbacks it runs
  // meanwhile (a barrier's) may still refresh: that is no failure.
  closing = true;
  // Held entries never reached libraft.
  while (!held.empty()) {
    auto p = held.front().p;
    held_bytes -= held.front().entry.size();
    held.pop_front();
    finish(p, RAFT_SHUTDOWN, nullptr);
  }
  closed = true;
  // What is still deferred would be applied again from the log at start;
  // written now, the next start has less to replay.
  adapter->flush();
  r.data = this;
  raft_close(&r, [](::raft* r) {
    auto self = static_cast<impl*>(r->data);
    raft_uv_close(&self->io);
    link::close(&self->transport);
  });
  owner->close_when_groups_closed();
}

void raft_node::impl::refresh() {
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
  next.log_bytes = log_bytes();
  next.held = held.size();
  next.held_bytes = held_bytes;
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
  if (ready_when_written == next.term && next.role == raft_role::leader
      && adapter->deferred() == 0) {
    ready_term = next.term;
    ready_when_written = 0;
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
  if (next.leader_id != current.leader_id) {
    ++next.leader_changes;
    // Requests this node forwarded to the leader it knew may never be
    // answered now (a leader that is hung or cut off answers late or not
    // at all): retried at the next leader with their request ids instead
    // of waiting out `cluster.remote-timeout`.
    auto old = current.leader_id;
    if (old != 0 && old != opts.id && !closing)
      link::give_up(&transport, old,
                    "node " + std::to_string(old) + " no longer leads group "
                      + std::to_string(group)
                      + ": the outcome is unknown");
  }
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
  brief_linked.store(current.leader_id != 0 && current.leader_id != opts.id
                       && !closing
                       && link::connected(&transport, current.leader_id),
                     std::memory_order_release);
  watch_leader_link();
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
      if (st == 0 && raft_state(&self->r) == RAFT_LEADER) {
        // What it applied as a follower is in its store before it serves
        // as the leader (raft_fsm.hpp); if that fails, it is ready once
        // the check wrote it (`refresh`), and the failure counts towards
        // a step-down.
        if (self->adapter->flush()) {
          self->ready_when_written = self->r.current_term;
          return;
        }
        self->ready_term = self->r.current_term;
        self->refresh(); // ready at once
        return;
      }
      // A failed barrier is failed by a leader that steps down, from inside
      // libraft's conversion: its state still reads leader there, with its
      // replication state freed, and a refresh would propose the next
      // barrier into it (a crash, seen when a leader that had just lost its
      // quorum handed off before stopping). The check after this loop turn
      // refreshes.
      log::cluster()->warn("raft.barrier_failed status={}", raft_strerror(st));
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

void raft_node::impl::do_propose(std::string& entry,
                                  proposal_done& done) {
  stage_trace::mark("raft.apply", entry.size());
  auto p = new proposal{};
  p->done = std::move(done);
  p->started = clock_type::now();
  p->req.data = this;
  auto bound = opts.max_log_bytes;
  // Back-pressure: the leader admits an entry only while the log, with it,
  // stays within its byte bound. The log shrinks only when a snapshot
  // trims it, however long that takes, so the bound holds whatever the
  // speed of the snapshot; meanwhile entries wait, in order, in a queue
  // bounded by bytes and time. A follower proposes nothing: libraft
  // refuses at once (RAFT_NOTLEADER).
  if (bound == 0 || raft_state(&r) != RAFT_LEADER) {
    submit(entry, p);
    return;
  }
  if (entry.size() > bound) {
    refuse(p, RAFT_TOOBIG); // can never fit
    return;
  }
  if (held.empty() && log_bytes() + entry.size() <= bound) {
    submit(entry, p);
    return;
  }
  if (held_bytes + entry.size() > opts.max_held_bytes) {
    refuse(p, RAFT_BUSY);
    return;
  }
  if (held.empty()) {
    held_since = p->started;
    refused_before = current.refused;
    log::cluster()->info("raft.backpressure_on log_bytes={} max_log_bytes={} "
                         "snapshotting={}",
                         log_bytes(), bound, snapshotting());
  }
  held_bytes += entry.size();
  held.push_back({std::move(entry), p});
  nudge();
  publish_load();
}

void raft_node::impl::submit(std::string& entry, proposal* p) {
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
    return;
  }
  p->bytes = entry.size();
  in_flight_bytes += p->bytes;
  current.log_bytes_peak = std::max(current.log_bytes_peak, log_bytes());
  publish_load();
}

uint64_t raft_node::impl::log_bytes() const {
  return adapter->log_bytes() + in_flight_bytes;
}

bool raft_node::impl::snapshotting() const {
  // libraft's own marks of a snapshot being taken or installed.
  return r.snapshot.pending.term != 0 || r.snapshot.put.data != nullptr;
}

void raft_node::impl::admit_held() {
  if (held.empty())
    return;
  auto now = clock_type::now();
  auto leading = raft_state(&r) == RAFT_LEADER;
  auto max_hold = std::chrono::milliseconds(opts.max_hold_ms);
  while (!held.empty()) {
    auto& front = held.front();
    // Not leading: libraft refuses it (RAFT_NOTLEADER), nothing waits.
    auto fits = !leading
                || log_bytes() + front.entry.size() <= opts.max_log_bytes;
    if (!fits && now - front.p->started < max_hold)
      break;
    auto entry = std::move(front.entry);
    auto p = front.p;
    held.pop_front();
    held_bytes -= entry.size();
    if (fits)
      submit(entry, p);
    else
      refuse(p, RAFT_BUSY); // waited its time: never proposed
  }
  if (held.empty()) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                now - held_since)
                .count();
    log::cluster()->info("raft.backpressure_off log_bytes={} held_ms={} "
                         "refused={}",
                         log_bytes(), ms, current.refused - refused_before);
  } else {
    nudge();
  }
  publish_load();
}

void raft_node::impl::nudge() {
  // libraft takes a snapshot only right after applying an entry, once the
  // FSM lowered its threshold; an entry in flight will do. With none, and
  // no snapshot under way, the held entries would wait for nothing: a
  // barrier is an entry. Nothing applied since the last snapshot: a new one
  // would trim nothing.
  if (nudge_pending || in_flight_bytes > 0 || snapshotting()
      || raft_state(&r) != RAFT_LEADER
      || raft_last_applied(&r) <= r.log.snapshot.last_index)
    return;
  adapter->snapshot_soon();
  nudge_req.data = this;
  nudge_pending = true;
  auto rv = raft_barrier(&r, &nudge_req,
                         [](struct ::raft_barrier* req, int) {
                           static_cast<impl*>(req->data)->nudge_pending
                             = false;
                         });
  if (rv != 0) {
    nudge_pending = false;
    log::cluster()->warn("raft.nudge_failed status={}", raft_strerror(rv));
  }
}

void raft_node::impl::refuse(proposal* p, int status) {
  // First and then every 1000th: under a flood each is a 503 already.
  auto n = ++current.refused;
  if (n == 1 || n % 1000 == 0)
    log::cluster()->warn("raft.proposal_refused reason={} log_bytes={} "
                         "max_log_bytes={} held_bytes={} max_held_bytes={} "
                         "refused_total={}",
                         status == RAFT_BUSY ? "log_bytes_bound" : "too_big",
                         log_bytes(), opts.max_log_bytes, held_bytes,
                         opts.max_held_bytes, n);
  finish(p, status, nullptr);
  publish_load();
}

void raft_node::impl::publish_load() {
  current.log_bytes = log_bytes();
  current.held = held.size();
  current.held_bytes = held_bytes;
  std::lock_guard<std::mutex> lock{status_mtx};
  published.log_bytes = current.log_bytes;
  published.log_bytes_peak = current.log_bytes_peak;
  published.held = current.held;
  published.held_bytes = current.held_bytes;
  published.refused = current.refused;
}

void raft_node::impl::finish(proposal* p, int status, void* result) {
  std::unique_ptr<proposal> guard{p};
  in_flight_bytes -= p->bytes;
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

bool raft_node::host::post(std::function<void()> fn, bool bounded) {
  {
    std::lock_guard<std::mutex> guard{queue_mtx};
    if (stopping || (bounded && queue.size() >= max_queued))
      return false;
    queue.emplace_back(std::move(fn));
  }
  uv_async_send(&wake);
  return true;
}

raft_node::raft_node(std::unique_ptr<host> ptr) : host_(std::move(ptr)) {
  // nop
}

raft_node::impl& raft_node::group(uint16_t g) const {
  return *host_->groups.at(g);
}

uint16_t raft_node::groups() const {
  return static_cast<uint16_t>(host_->groups.size());
}

link::link_stats raft_node::link_stats() const {
  return link::stats_of(&group(0).transport);
}

bool raft_node::leader_linked(uint16_t g) const {
  return group(g).brief_linked.load(std::memory_order_acquire);
}

void raft_node::ask(uint64_t peer, link::request req,
                    std::chrono::milliseconds timeout, link::answer_fn done,
                    uint16_t g) {
  auto self = &group(g);
  auto kind = req.kind;
  auto shared = std::make_shared<link::answer_fn>(std::move(done));
  auto ok = host_->post(
    [self, peer, req = std::move(req), timeout, shared]() mutable {
      if (self->closing) {
        link::answer res;
        res.kind = req.kind;
        res.error = errc::not_leader;
        res.detail = "this node stops";
        (*shared)(std::move(res));
        return;
      }
      link::ask(&self->transport, peer, std::move(req), timeout,
                std::move(*shared));
    },
    true);
  if (!ok) {
    link::answer res;
    res.kind = kind;
    res.error = errc::overloaded;
    res.detail = "the queue to the Raft thread is full (or the node stops)";
    (*shared)(std::move(res));
  }
}

void raft_node::serve(
  std::function<void(const link::served&, link::request)> fn) {
  auto self = &group(0); // the endpoint's: every group's requests
  host_->post(
    [self, fn = std::move(fn)]() mutable {
      if (!self->closing)
        link::set_server(&self->transport, std::move(fn));
    },
    false);
}

void raft_node::reply(const link::served& to, link::answer ans) {
  auto h = host_.get();
  // Unbounded: an answer is owed (its request was admitted within the
  // link's own bounds); dropped only when the node stops. Any group's
  // transport that is still open reaches the endpoint (groups close one
  // by one when the node stops).
  h->post(
    [h, to, ans = std::move(ans)]() mutable {
      for (auto& g : h->groups)
        if (!g->closing) {
          link::reply(&g->transport, to, std::move(ans));
          return;
        }
    },
    false);
}

void raft_node::stop() {
  {
    std::lock_guard<std::mutex> guard{host_->queue_mtx};
    host_->stopping = true;
  }
  uv_async_send(&host_->wake);
  if (host_->thread.joinable()
      && host_->thread.get_id() != std::this_thread::get_id())
    host_->thread.join();
}

raft_node::~raft_node() {
  if (host_->thread.joinable()
      && host_->thread.get_id() == std::this_thread::get_id()) {
    // The last owner let go in a callback on the Raft thread (a request's
    // callback that held it, say). Joining would wait for this very
    // thread (std::system_error, "Resource deadlock avoided", seen at a
    // node's stop): the thread stops the node and frees it instead.
    log::cluster()->debug("raft.released_on_raft_thread");
    stop();
    host_->free_on_exit = true;
    host_->thread.detach();
    host_.release();
    return;
  }
  stop();
  uv_loop_close(&host_->loop);
}

caf::expected<std::unique_ptr<raft_node>>
raft_node::start(raft_node_options opts,
                 std::shared_ptr<persistence::sqlite_store> db,
                 raft_hooks hooks) {
  std::vector<std::shared_ptr<persistence::sqlite_store>> dbs;
  dbs.push_back(std::move(db));
  std::vector<raft_hooks> each;
  each.push_back(std::move(hooks));
  return start(std::move(opts), std::move(dbs), std::move(each));
}

namespace {

caf::error raft_failure(const std::string& what, int rv) {
  return make_error(errc::storage_failure,
                    "raft: " + what + ": " + raft_strerror(rv));
}

} // namespace

// Group g of a starting node: its directory, FSM, transport on the node's
// link (group 0 makes the link) and libraft server, started.
caf::error raft_node::impl::start(const raft_node_options& node_opts,
                                  uint16_t count) {
  opts = node_opts;
  opts.dir = group_dir(node_opts.dir, group);
  opts.link.groups = count;
  current.group = published.group = group;
  std::error_code ec;
  std::filesystem::create_directories(opts.dir, ec);
  if (ec)
    return make_error(errc::storage_failure,
                      "cannot create raft dir " + opts.dir + ": "
                        + ec.message());
  if (auto err = pad_open_segments(opts.dir))
    return err;
  adapter = std::make_unique<raft_fsm_adapter>(*db, true);
  if (hooks.on_applied)
    adapter->on_applied([fn = hooks.on_applied](uint64_t, const auto& cmds,
                                                const auto& results) {
      fn(cmds, results);
    });
  // Written by the check handle once the turn's answers are sent
  // (`host::on_check`).
  adapter->defer_follower_applies(true);
  if (hooks.on_restored)
    adapter->on_restored(hooks.on_restored);
  if (opts.before_snapshot_copy)
    adapter->before_snapshot_copy(opts.before_snapshot_copy);
  {
    std::string error;
    auto rv = group == 0
                ? link::init(&transport, &owner->loop, opts.link, error)
                : link::init_group(&transport, &owner->groups[0]->transport,
                                   group, error);
    if (rv != 0)
      return make_error(errc::invalid_argument, "cluster link: " + error);
  }
  if (auto rv = raft_uv_init(&io, &owner->loop, opts.dir.c_str(), &transport);
      rv != 0)
    return raft_failure("io " + opts.dir, rv);
  // raft_uv implements the async work of version 2 but reports version 1,
  // which would make libraft reject the FSM's async snapshots.
  io.version = 2;
  if (auto rv = raft_init(&r, &io, adapter->fsm(), opts.id,
                          opts.address.c_str());
      rv != 0)
    return raft_failure("init", rv);
  adapter->attach(&r);
  raft_set_election_timeout(&r, opts.election_timeout_ms);
  raft_set_heartbeat_timeout(&r, opts.heartbeat_timeout_ms);
  raft_set_snapshot_threshold(&r, opts.snapshot_threshold);
  raft_set_snapshot_trailing(&r, opts.snapshot_trailing);
  adapter->bound_log(opts.max_log_bytes, opts.snapshot_threshold,
                     opts.snapshot_trailing);
  raft_set_pre_vote(&r, true);
  if (opts.bootstrap) {
    ::raft_configuration conf;
    raft_configuration_init(&conf);
    for (auto& m : opts.initial) {
      if (auto rv = raft_configuration_add(&conf, m.id, m.address.c_str(),
                                           RAFT_VOTER);
          rv != 0) {
        raft_configuration_close(&conf);
        return raft_failure("configuration", rv);
      }
    }
    auto rv = raft_bootstrap(&r, &conf);
    raft_configuration_close(&conf);
    if (rv != 0 && rv != RAFT_CANTBOOTSTRAP)
      return raft_failure("bootstrap", rv);
  }
  if (auto rv = raft_start(&r); rv != 0)
    return raft_failure("start", rv);
  return {};
}

caf::expected<std::unique_ptr<raft_node>>
raft_node::start(raft_node_options opts,
                 std::vector<std::shared_ptr<persistence::sqlite_store>> dbs,
                 std::vector<raft_hooks> hooks) {
  if (dbs.empty() || dbs.size() > link::max_groups
      || hooks.size() != dbs.size())
    return make_error(errc::invalid_argument,
                      "raft: 1.." + std::to_string(link::max_groups)
                        + " groups, a store and hooks each");
  // libuv writes to peers' sockets without MSG_NOSIGNAL: a write to a dead
  // peer must cost an error code, not the process.
  std::signal(SIGPIPE, SIG_IGN);
  auto h = std::make_unique<host>();
  auto& x = *h;
  x.max_queued = opts.max_queued;
  x.id = opts.id;
  x.balance_interval_ms = opts.balance_interval_ms;
  if (auto rv = uv_loop_init(&x.loop); rv != 0)
    return make_error(errc::storage_failure,
                      std::string{"uv_loop_init: "} + uv_strerror(rv));
  // Anything failing below leaves a loop with handles behind; the process
  // exits on a failed start, so only the loop itself matters.
  auto count = static_cast<uint16_t>(dbs.size());
  for (uint16_t g = 0; g < count; ++g) {
    auto grp = std::make_unique<impl>();
    grp->owner = &x;
    grp->group = g;
    grp->db = std::move(dbs[g]);
    grp->hooks = std::move(hooks[g]);
    x.groups.push_back(std::move(grp));
    if (auto err = x.groups.back()->start(opts, count))
      return err;
  }
  x.wake.data = &x;
  uv_async_init(&x.loop, &x.wake, [](uv_async_t* h) {
    static_cast<host*>(h->data)->drain();
  });
  x.poll.data = &x;
  uv_check_init(&x.loop, &x.poll);
  uv_check_start(&x.poll, [](uv_check_t* h) {
    static_cast<host*>(h->data)->on_check();
  });
  // The check runs after every loop turn; the timer makes sure there is a
  // turn at least every 50 ms while nothing else happens (what waits for
  // time there: held proposals, a stop's wait for stored entries, the
  // follower repair, balancing, all bounded in hundreds of milliseconds
  // or more). Every 10 ms cost an idle 3-node cluster 15-22 % more CPU
  // (docs/benchmarks.md, session 18).
  x.tick.data = &x;
  uv_timer_init(&x.loop, &x.tick);
  uv_timer_start(&x.tick, [](uv_timer_t*) {}, 50, 50);
  for (auto& g : x.groups)
    g->refresh();
  log::cluster()->info("raft.started id={} address={} dir={} bootstrap={} "
                       "groups={}",
                       opts.id, opts.address, opts.dir, opts.bootstrap, count);
  x.thread = std::thread{[&x, start = opts.on_loop_start,
                          end = opts.on_loop_end] {
    if (start)
      start([&x](std::function<void()> fn) {
        if (!x.post(std::move(fn), false))
          throw std::runtime_error("the Raft loop stops");
      });
    uv_run(&x.loop, UV_RUN_DEFAULT);
    if (end)
      end();
    // Set on this thread (see `~raft_node`): nobody owns the state now.
    if (x.free_on_exit) {
      uv_loop_close(&x.loop);
      delete &x;
    }
  }};
  return std::unique_ptr<raft_node>{new raft_node(std::move(h))};
}

void raft_node::propose(std::string entry, proposal_done done, uint16_t g) {
  auto self = &group(g);
  auto shared = std::make_shared<proposal_done>(std::move(done));
  auto ok = host_->post(
    [self, entry = std::move(entry), shared]() mutable {
      self->do_propose(entry, *shared);
    },
    true);
  if (!ok)
    (*shared)(RAFT_BUSY, {});
}

raft_status raft_node::status(uint16_t g) const {
  auto& x = group(g);
  std::lock_guard<std::mutex> guard{x.status_mtx};
  return x.published;
}

raft_brief raft_node::brief(uint16_t g) const {
  auto& x = group(g);
  raft_brief res;
  res.role = static_cast<raft_role>(
    x.brief_role.load(std::memory_order_acquire));
  res.leader_id = x.brief_leader.load(std::memory_order_acquire);
  res.leader_ready = x.brief_ready.load(std::memory_order_acquire);
  return res;
}

uint64_t raft_node::id() const {
  return group(0).opts.id;
}

} // namespace oncegate::cluster
