#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <optional>

#include <caf/expected.hpp>

#include "common/raft_progress.hpp"
#include "persistence/command.hpp"
#include "persistence/sqlite_store.hpp"
#include "link/node_link.hpp"

namespace oncegate::cluster {

/// One member of the Raft configuration.
struct member {
  uint64_t id = 0;
  /// Raft transport address, `host:port`.
  std::string address;
};

/// How a node runs its Raft server.
struct raft_node_options {
  uint64_t id = 0;
  /// This node's Raft address, `host:port` (it listens there).
  std::string address;
  /// Directory of the Raft log and snapshots (created if missing) of group
  /// 0; group g > 0 (a partition) keeps its own in `dir-g` (`group_dir`).
  std::string dir;
  /// Bootstrap with `initial` when the log is pristine; a node that joins
  /// an existing cluster later (as a spare, via `add`) does not bootstrap.
  bool bootstrap = true;
  /// The initial voters (every bootstrapping node is given the same list).
  std::vector<member> initial;
  /// Election timeout (randomised by libraft to 1-2x) and heartbeat.
  uint32_t election_timeout_ms = 500;
  uint32_t heartbeat_timeout_ms = 50;
  /// Entries between snapshots, and entries kept behind a snapshot.
  uint32_t snapshot_threshold = 100000;
  uint32_t snapshot_trailing = 8192;
  /// Bytes of log entries kept in memory at most (`raft_status::log_bytes`;
  /// see `raft_fsm_adapter::bound_log`); 0: entry counts only. Held by
  /// back-pressure: on the leader, a proposal that would take the log past
  /// it waits until a snapshot trims the log (see `max_held_bytes`).
  uint64_t max_log_bytes = 128 * 1024 * 1024;
  /// Bytes of entries waiting for room in the log at most: beyond, and
  /// after `max_hold_ms` of waiting, a proposal fails with `RAFT_BUSY`
  /// (libraft never saw it). 0: none waits.
  uint64_t max_held_bytes = 8 * 1024 * 1024;
  uint32_t max_hold_ms = 2000;
  /// Proposals queued for the Raft thread at most; beyond, `propose` fails
  /// at once with `RAFT_BUSY`.
  uint32_t max_queued = 4096;
  /// A follower that answers the leader but whose replicated index stays
  /// below the commit index this long is stuck (libraft 0.15 can leave one
  /// behind after a refused snapshot install): the leader hands leadership
  /// to another up-to-date voter, whose fresh replication state repairs it.
  /// 0: never.
  uint32_t repair_after_ms = 10000;
  /// With several groups: how long the leaders of every group must have
  /// stayed the same before this node hands one of its groups to a voter
  /// that leads at least two fewer (`next_leader_move`), and the pause
  /// after each such transfer. Each node leads floor(P/N) or ceil(P/N)
  /// groups once the cluster is calm, again after a failover or a rejoin.
  /// 0: never.
  uint32_t balance_interval_ms = 2000;
  /// Tests only: runs in libuv's thread pool before each snapshot image is
  /// copied; false fails the snapshot (see
  /// `raft_fsm_adapter::before_snapshot_copy`).
  std::function<bool()> before_snapshot_copy;
  /// Run on the Raft thread before its loop starts, with a way to queue
  /// work on that loop (run after the current callback, never inside it;
  /// it throws once the node stops), and on the same thread once the loop
  /// ended: the node's owner lets the actors that the Raft thread's
  /// messages wake run there (common/inline_execution.hpp), as the HTTP
  /// threads do (`http_server_options::on_loop_start`).
  std::function<void(std::function<void(std::function<void()>)>)>
    on_loop_start;
  std::function<void()> on_loop_end;
  /// The node link (mutual TLS unless `link.tls` is empty: only with
  /// `cluster.insecure`), Raft's transport and the nodes' requests.
  link::options link;
};

/// The Raft directory of group `group` of a node whose group 0 keeps its
/// log in `dir`: `dir` itself for group 0 (a cluster without partitions
/// keeps its layout), `dir-g` for the others.
std::string group_dir(const std::string& dir, uint16_t group);

/// Role of a node, as last polled.
enum class raft_role : uint8_t { unavailable, follower, candidate, leader };

const char* to_string(raft_role x);

/// libraft's message for a status code (e.g. `RAFT_NOTLEADER`).
const char* raft_error_text(int status);

/// The name of a member role (`RAFT_VOTER`, ...): `voter`, `standby`,
/// `spare`.
const char* raft_role_name(int role);

/// A consistent view of the node's Raft state.
struct raft_status : raft_progress {
  /// The Raft group (partition) this is the state of.
  uint16_t group = 0;
  raft_role role = raft_role::unavailable;
  /// Entries whose application failed (decode or SQLite errors).
  uint64_t apply_failures = 0;
  /// Snapshots this node took, and the bytes of log entries it holds in
  /// memory as it accounts them (see `raft_node_options::max_log_bytes`):
  /// now, and the most right after any proposal was handed to libraft.
  uint64_t snapshots = 0;
  uint64_t log_bytes = 0;
  uint64_t log_bytes_peak = 0;
  /// Proposals waiting for room in the log, their bytes, and proposals
  /// refused by back-pressure (never proposed) since the start.
  uint64_t held = 0;
  uint64_t held_bytes = 0;
  uint64_t refused = 0;
  /// The configuration: members and their roles (RAFT_VOTER, ...).
  std::vector<std::pair<member, int>> members;
};

/// The part of `raft_status` that request paths need, read without a lock
/// (fields are read one by one: a change may be seen half-way, which every
/// user tolerates: the leader checks again when it proposes).
struct raft_brief {
  raft_role role = raft_role::unavailable;
  uint64_t leader_id = 0;
  bool leader_ready = false;
};

/// The result of one proposal: libraft's status (0 on success) and, on
/// success, the results of the entry's commands (empty when the entry was
/// skipped as already applied).
using proposal_done
  = std::function<void(int status, std::vector<persistence::command_result>)>;

/// Callbacks of a Raft node; they run on the Raft thread and must not block.
struct raft_hooks {
  /// Role, term, leader or leader readiness changed (`status()` already
  /// shows the new state).
  std::function<void(const raft_status&)> on_change;
  /// An entry was applied (on every node, followers too), with its commands
  /// and their results.
  std::function<void(const std::vector<persistence::command>&,
                     const std::vector<persistence::command_result>&)>
    on_applied;
  /// A snapshot replaced the whole database.
  std::function<void()> on_restored;
  /// libraft turned `unavailable` while running (an I/O error it does not
  /// recover from, e.g. ENOSPC writing its metadata): this instance will
  /// never take part again. Called once; the node must be restarted.
  std::function<void()> on_unavailable;
};

/// A node's Raft servers, one per Raft group (partition), on one thread (a
/// libuv loop) and one node link; each group has its own log, and its own
/// SQLite store as its replicated state machine.
///
/// Every libraft call and callback happens on that thread; other threads
/// talk to it through a queue and `uv_async_send`. Callbacks given to this
/// class run on the Raft thread and must not block. Calls that name a
/// `group` act on that group alone (it must be below `groups()`).
class raft_node {
public:
  /// Opens the Raft directory, bootstraps if asked and the log is pristine,
  /// and starts the thread. Sets SIGPIPE to ignored for the process (libuv
  /// would otherwise die writing to a dead peer). The node holds `db`
  /// until its thread has ended; nobody else may write through it.
  static caf::expected<std::unique_ptr<raft_node>>
  start(raft_node_options opts, std::shared_ptr<persistence::sqlite_store> db,
        raft_hooks hooks = {});

  /// Starts one group per store (`dbs[g]` is group g's, with `hooks[g]`;
  /// 1..`link::max_groups` of them), all on one thread and one link: group
  /// 0's log in `opts.dir`, the others' in `group_dir(opts.dir, g)`. Every
  /// member must run as many groups (their hellos are refused otherwise).
  static caf::expected<std::unique_ptr<raft_node>>
  start(raft_node_options opts,
        std::vector<std::shared_ptr<persistence::sqlite_store>> dbs,
        std::vector<raft_hooks> hooks);

  /// The Raft groups this node runs.
  uint16_t groups() const;

  /// Stops the Raft server (pending proposals fail with `RAFT_CANCELED` or
  /// `RAFT_SHUTDOWN`) and joins the thread; idempotent. Call it from any
  /// thread but the Raft thread (from a callback it would wait for itself:
  /// it returns at once there, and the node stops after the callback).
  void stop();

  /// Stops as `stop` does. Callbacks (and the closures that own them) run
  /// and die on the Raft thread, so the last owner of a node may let go
  /// there: the thread cannot join itself, so it then stops the node and
  /// frees it itself when its loop ends, keeping `db` open until then.
  ~raft_node();

  raft_node(const raft_node&) = delete;
  raft_node& operator=(const raft_node&) = delete;

  /// Proposes one encoded batch (`persistence::encode_batch`). `done` runs
  /// on the Raft thread once the entry was applied locally or failed:
  /// `RAFT_NOTLEADER` (nothing happened), `RAFT_BUSY` (never proposed: the
  /// queue to the Raft thread is full, or the log is at its byte bound and
  /// the entry could not wait, see `max_held_bytes`), `RAFT_TOOBIG` (never
  /// proposed: larger than `max_log_bytes`) or `RAFT_LEADERSHIPLOST` (the
  /// entry may still commit: the outcome is unknown).
  void propose(std::string entry, proposal_done done, uint16_t group = 0);

  /// Membership changes and leadership transfer of one group (each group's
  /// leader changes its own configuration); `done` gets libraft's status
  /// (0 on success) and runs on the Raft thread.
  void add(uint64_t id, std::string address, std::function<void(int)> done,
           uint16_t group = 0);
  /// Adds `id` as a spare, then promotes it to voter (libraft catches it up
  /// before it votes); `done` gets the first failure or 0.
  void add_voter(uint64_t id, std::string address,
                 std::function<void(int)> done, uint16_t group = 0);
  void assign(uint64_t id, int role, std::function<void(int)> done,
              uint16_t group = 0);
  void remove(uint64_t id, std::function<void(int)> done, uint16_t group = 0);
  /// Transfers leadership to `id` (0: any voter); `done` gets the new
  /// leader's id (0: none yet).
  void transfer(uint64_t id, std::function<void(uint64_t)> done,
                uint16_t group = 0);

  /// Hands every group this node leads to another voter (libraft picks
  /// the most up-to-date) and waits until each of those transfers ended or
  /// `bound` passed: a planned stop then costs the cluster a transfer
  /// instead of an election timeout (a group whose transfer is already
  /// under way, a balancing move or a repair, is left to it). Returns how
  /// many of the groups it handed another node leads now. Call it right before `stop`, from any thread but the Raft
  /// thread (there it returns 0 at once): until the node stops, others may
  /// hand it groups again.
  std::size_t hand_off(std::chrono::milliseconds bound);

  /// The last published state of a group (thread-safe).
  raft_status status(uint16_t group = 0) const;

  /// Role, leader and readiness of a group (thread-safe, lock-free).
  raft_brief brief(uint16_t group = 0) const;

  /// Sends `req` to node `peer` over its link; `done` runs exactly once on
  /// the Raft thread (hand it over, never block): the peer's answer, or
  /// `not_leader` (no link: nothing sent), `timeout` or `leadership_lost`
  /// (the outcome is unknown), `overloaded` (the queue to the Raft thread
  /// is full: nothing sent). Thread-safe.
  void ask(uint64_t peer, link::request req,
           std::chrono::milliseconds timeout, link::answer_fn done,
           uint16_t group = 0);

  /// Serves other nodes' requests, of every group (`served::group`), from
  /// now on (until then they are answered `not_leader`): `fn` runs on the
  /// Raft thread for each (hand it over, never block) and each is answered
  /// exactly once with `reply`. Thread-safe.
  void serve(std::function<void(const link::served&, link::request)> fn);

  /// Answers a request `serve`'s function was given. Thread-safe.
  void reply(const link::served& to, link::answer ans);

  /// Whether the link to a group's leader (another node) was open when last
  /// polled. Thread-safe, lock-free.
  bool leader_linked(uint16_t group = 0) const;

  /// The link's counters. Thread-safe.
  link::link_stats link_stats() const;

  /// This node's id.
  uint64_t id() const;

private:
  struct host;
  struct impl;
  explicit raft_node(std::unique_ptr<host> ptr);
  /// Group `g` (`groups()` must be more).
  impl& group(uint16_t g) const;
  std::unique_ptr<host> host_;
};

} // namespace oncegate::cluster
