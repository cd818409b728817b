// @private: the inside of `raft_node` (pimpl), shared by its two files and
// included by nothing else. A node is one `host` (the thread, its libuv
// loop and the queue other threads post to) and one `impl` per Raft group
// (partition): its libraft server, transport, FSM and store, proposals and
// published state. raft_node.cpp is the loop: start and stop, the queue,
// proposals, and reading and publishing libraft's state. raft_membership.cpp
// is what changes who leads or votes: membership changes, leadership
// transfer, and the repair of a stuck follower.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <utility>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

// libraft 0.15's headers lack extern "C" guards.
extern "C" {
#include <raft.h>
#include <raft/uv.h>
#include <uv.h>
}

#include "replication/raft_fsm.hpp"
#include "replication/raft_node.hpp"

namespace oncegate::cluster {

namespace detail {

using clock_type = std::chrono::steady_clock;

/// One proposal: held (waiting for room in the log) or in flight.
struct proposal {
  struct ::raft_apply req;
  proposal_done done;
  clock_type::time_point started;
  /// Bytes of the entry once libraft has it (counted in `in_flight_bytes`
  /// until its callback runs).
  std::size_t bytes = 0;
};

/// A proposal waiting for the log to shrink below its byte bound.
struct held_proposal {
  std::string entry;
  proposal* p;
};

} // namespace detail

/// The thread and libuv loop every group of a node runs on.
struct raft_node::host {
  /// Declared first: the groups (and their stores) go last.
  std::vector<std::unique_ptr<impl>> groups;
  uint32_t max_queued = 0;

  uv_loop_t loop;
  uv_async_t wake;
  uv_check_t poll;
  uv_timer_t tick;
  std::thread thread;
  /// Set on the Raft thread when the last owner let go there: the thread
  /// frees this state once its loop ends (see `~raft_node`).
  bool free_on_exit = false;
  /// The host's handles are closed (every group closes or closed).
  bool handles_closed = false;

  // Spreading leaderships (raft_membership.cpp, `balance`).
  uint64_t id = 0;
  uint32_t balance_interval_ms = 0;
  /// Every group's leader as last seen, and since when it is so.
  std::vector<uint64_t> balance_view;
  detail::clock_type::time_point balance_view_since;
  detail::clock_type::time_point last_move;
  uint64_t moves = 0;

  // Work handed over by other threads.
  std::mutex queue_mtx;
  std::deque<std::function<void()>> queue;
  bool stopping = false;

  host() {
    std::memset(&loop, 0, sizeof(loop));
    std::memset(&wake, 0, sizeof(wake));
    std::memset(&poll, 0, sizeof(poll));
    std::memset(&tick, 0, sizeof(tick));
  }

  /// Runs the work other threads posted; closes every group when asked to
  /// stop (raft_node.cpp).
  void drain();
  /// After every loop turn: each group's held proposals and state.
  void on_check();
  /// Closes the host's handles once every group called raft_close.
  void close_when_groups_closed();
  /// Hands one group this node leads to a voter that leads fewer, when
  /// the leaders have been calm long enough (raft_membership.cpp).
  void balance();
  /// Queues `fn` for the Raft thread; false once stopping, or when
  /// `bounded` and `max_queued` are queued already.
  bool post(std::function<void()> fn, bool bounded);
  /// Runs `fn(done)` on the Raft thread, or fails `done` with
  /// `RAFT_SHUTDOWN` when the node stops (raft_membership.cpp).
  void post_change(std::function<void(int)> done,
                   std::function<void(std::function<void(int)>&)> fn);
};

/// One Raft group of a node.
struct raft_node::impl {
  /// The writer connection: declared first, so it closes last, after
  /// everything that uses it.
  std::shared_ptr<persistence::sqlite_store> db;
  /// The node's options, `dir` this group's.
  raft_node_options opts;
  raft_hooks hooks;
  std::unique_ptr<raft_fsm_adapter> adapter;
  /// The last of the adapter's deferred entries at the last check
  /// (`host::on_check` writes up to it at the next); 0: none.
  uint64_t ripe = 0;
  host* owner = nullptr;
  uint16_t group = 0;

  ::raft_uv_transport transport;
  ::raft_io io;
  ::raft r;
  struct ::raft_barrier barrier;
  /// The one transfer request (see `do_transfer`) and its caller's callback
  /// while a transfer runs.
  struct ::raft_transfer transfer;
  std::function<void(uint64_t)> transfer_done;
  bool barrier_pending = false;

  // Published state.
  mutable std::mutex status_mtx;
  raft_status published;

  std::atomic<uint8_t> brief_role{0};
  std::atomic<uint64_t> brief_leader{0};
  std::atomic<bool> brief_ready{false};
  std::atomic<bool> brief_linked{false};

  // Back-pressure on the log's byte bound (raft_node.cpp, `admit`).
  /// Bytes of entries libraft accepted from `raft_apply` whose callback has
  /// not run yet (they are in its log, not applied: the FSM does not count
  /// them yet).
  uint64_t in_flight_bytes = 0;
  /// Proposals waiting for room, oldest first, and their entries' bytes.
  std::deque<detail::held_proposal> held;
  uint64_t held_bytes = 0;
  /// The barrier that makes libraft check for a snapshot (`nudge`).
  struct ::raft_barrier nudge_req;
  bool nudge_pending = false;
  /// The current episode of back-pressure: since when, and the refusals
  /// counted before it.
  detail::clock_type::time_point held_since;
  uint64_t refused_before = 0;

  // Raft-thread view (no lock needed on the thread).
  raft_status current;
  uint64_t ready_term = 0;
  /// The term whose barrier completed while the adapter's queue could not
  /// be written: ready once it is (`refresh`).
  uint64_t ready_when_written = 0;
  /// Apply failures seen while not leader (or when stepping down last);
  /// more than these while leading make the node hand leadership over.
  uint64_t step_down_failures = 0;
  bool stepping_down = false;
  detail::clock_type::time_point last_step_down;
  uint64_t configuration_index = ~uint64_t{0};
  bool lost = false;
  bool closing = false;
  /// raft_close was called.
  bool closed = false;
  /// Stopping, waiting for libraft's writes before raft_close (since when).
  bool close_pending = false;
  std::chrono::steady_clock::time_point close_asked;
  /// Per follower: the replicated index it was last seen at while behind,
  /// and since when (see `raft_node_options::repair_after_ms`).
  struct lag {
    raft_index match = 0;
    detail::clock_type::time_point since;
  };
  std::unordered_map<uint64_t, lag> lags;
  detail::clock_type::time_point last_lag_check;
  detail::clock_type::time_point last_repair;
  /// The leader this follower watches the link to, whether that link was
  /// up when last looked at, and when its election timer is to be expired
  /// because the link closed (see `watch_leader_link`).
  uint64_t watched_leader = 0;
  bool watched_up = false;
  std::optional<detail::clock_type::time_point> campaign_at;
  /// The election timer's start before it was expired, and what it was
  /// set to: restored if the link comes back before libraft's next tick.
  std::optional<std::pair<raft_time, raft_time>> expired_timer;

  impl() {
    std::memset(&transport, 0, sizeof(transport));
    std::memset(&io, 0, sizeof(io));
    std::memset(&r, 0, sizeof(r));
    std::memset(&barrier, 0, sizeof(barrier));
    std::memset(&nudge_req, 0, sizeof(nudge_req));
    std::memset(&transfer, 0, sizeof(transfer));
  }

  /// A follower whose link to its leader closes (the leader's process
  /// ended: its kernel closed the connection) expires its election timer
  /// instead of waiting out the election timeout, staggered by its rank
  /// among the other voters (see raft_node.cpp).
  void watch_leader_link();

  /// Opens this group's directory, transport and libraft server and
  /// starts it (before the loop runs; `owner->groups` holds it already).
  caf::error start(const raft_node_options& node_opts, uint16_t count);

  // -- on the Raft thread: raft_node.cpp -------------------------------------

  void close();
  /// Closes once libraft has stored everything it holds (or a bound
  /// passed); until then asked again on every loop turn.
  void close_when_stored();
  /// Reads libraft's state; publishes and reports changes.
  void refresh();
  void do_propose(std::string& entry, proposal_done& done);
  /// Hands the entry to libraft (`raft_apply`).
  void submit(std::string& entry, detail::proposal* p);
  /// The bytes of libraft's log as the node accounts them: entries applied
  /// and still kept (the FSM's count) plus those in flight.
  uint64_t log_bytes() const;
  /// Whether libraft is taking or installing a snapshot.
  bool snapshotting() const;
  /// Submits held proposals that fit now, in order; fails those that
  /// waited `max_hold_ms`; called after every loop turn.
  void admit_held();
  /// Over the bound with no snapshot under way and nothing in flight: makes
  /// libraft take one.
  void nudge();
  /// Fails a proposal that libraft never saw with `status` (RAFT_BUSY: the
  /// log is at its bound).
  void refuse(detail::proposal* p, int status);
  /// Publishes the log's bytes and what is held.
  void publish_load();
  void finish(detail::proposal* p, int status, void* result);

  // -- on the Raft thread: raft_membership.cpp -------------------------------

  /// Hands leadership away from a follower that stays behind.
  void check_followers(raft_status& next);
  /// Hands leadership to `id` (0: any voter).
  void do_transfer(uint64_t id, std::function<void(uint64_t)> done);
  /// raft_add (kind 0), raft_assign (1) or raft_remove (2).
  void do_change(int kind, uint64_t id, const std::string& address, int role,
                 std::function<void(int)>& done);
};

} // namespace oncegate::cluster
