#include "routing/cluster_node.hpp"

// A cluster node: its start (the replicated store, Raft with the node link,
// the actors), the one path of a request at this node's actors
// (`call_locally`, for its own gateway and for the other nodes, whose
// requests arrive on the link and are checked by `refusal` first), and the
// doubt of what an earlier run of this node left in flight.

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

extern "C" {
#include <raft.h>
}

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>

#include "common/errc.hpp"
#include "common/inline_execution.hpp"
#include "common/logging.hpp"
#include "common/stage_trace.hpp"
#include "common/mutant.hpp"
#include "common/partition.hpp"

namespace oncegate::cluster {

// -- peers ----------------------------------------------------------------------

namespace {

bool parse_host_port(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return false;
  uint32_t value = 0;
  for (auto c : text.substr(colon + 1)) {
    if (c < '0' || c > '9')
      return false;
    value = value * 10 + static_cast<uint32_t>(c - '0');
    if (value > 65535)
      return false;
  }
  return value != 0;
}

} // namespace

peer parse_peer(const std::string& text, std::string& error, bool* legacy) {
  peer result;
  error.clear();
  auto eq = text.find('=');
  if (eq == std::string::npos) {
    error = "expected ID=HOST:PORT, got '" + text + "'";
    return result;
  }
  auto id_text = text.substr(0, eq);
  if (id_text.empty()
      || !std::all_of(id_text.begin(), id_text.end(),
                      [](char c) { return c >= '0' && c <= '9'; })
      || id_text.size() > 18 || std::stoull(id_text) == 0) {
    error = "peer id must be a positive integer: '" + text + "'";
    return result;
  }
  result.id = std::stoull(id_text);
  auto comma = text.find(',', eq);
  result.raft_address = text.substr(eq + 1, comma == std::string::npos
                                              ? std::string::npos
                                              : comma - eq - 1);
  if (!parse_host_port(result.raft_address)) {
    error = "bad address in '" + text + "'";
    return result;
  }
  if (comma != std::string::npos) {
    // ID=RAFT,CAF of the builds before the node link: the CAF address is
    // checked (a typo stays an error) and ignored.
    if (!parse_host_port(text.substr(comma + 1))) {
      error = "bad second address in '" + text + "'";
      return result;
    }
    if (legacy != nullptr)
      *legacy = true;
  }
  return result;
}

const char* refusal(const link::request& req, const std::vector<peer>& peers) {
  auto known = [&](uint64_t id) {
    return id != 0
           && std::any_of(peers.begin(), peers.end(),
                          [id](const peer& p) { return p.id == id; });
  };
  switch (req.kind) {
    case link::op::claim:
      if (auto why = malformed(req.claim))
        return why;
      if (req.claim.owner != 0 && !known(req.claim.owner))
        return "owner is no member";
      return nullptr;
    case link::op::update:
      return malformed(req.update);
    case link::op::lookup:
      return malformed_key(req.route, req.key);
    case link::op::list:
      if (req.route.size() > record_bounds::route
          || req.key.size() > record_bounds::key
          || static_cast<uint8_t>(req.state)
               > static_cast<uint8_t>(record_state::failed)
          || req.limit > record_bounds::list_page)
        return "bounds";
      return nullptr;
    case link::op::doubt:
      return known(req.node) ? nullptr : "owner is no member";
    case link::op::add: {
      auto p = std::find_if(peers.begin(), peers.end(),
                            [&](const peer& x) { return x.id == req.node; });
      if (req.node == 0 || p == peers.end()
          || p->raft_address != req.address)
        return "not a member of cluster.peers";
      return nullptr;
    }
    case link::op::remove:
      return req.node == 0 ? "node id 0" : nullptr;
    case link::op::transfer:
      return req.node == 0 || known(req.node) ? nullptr
                                              : "not a member of cluster.peers";
    case link::op::pause:
      if (req.pause == pause_op::read)
        return nullptr;
      return malformed_key(req.route, "-");
  }
  return "unknown request";
}

// -- the one path of a request at this node -----------------------------------------

struct cluster_context {
  /// Partition g's actors.
  std::vector<node> parts;
  std::shared_ptr<raft_node> raft;
  std::shared_ptr<gateway::actor_bridge> bridge;
  /// Asks this node's actors for the link's and the gateway's requests
  /// (answers complete on the answering actor's thread).
  std::shared_ptr<gateway::actor_caller> caller;
  std::vector<peer> peers;
  uint64_t id = 0;
  caf::timespan remote_timeout;
  std::shared_ptr<std::atomic<uint64_t>> refused;
  /// Records in flight that this node's earlier runs claimed (first seen
  /// before this start) are turned into in-doubt through the leader. The
  /// bound is the later of this node's clock at start and just past the
  /// store's clock its file had then (the latest stamp it applied, which
  /// may be its own last claim): with sane clocks every earlier record is
  /// below it. A record of the earlier run stamped later (entries this node
  /// had not applied, a leader's clock ahead) is left to the in-flight
  /// deadline sweep; a new claim stamped earlier (a leader's clock behind)
  /// turns in-doubt while its forward runs and is completed from there.
  /// Either way nothing executes twice.
  int64_t started_ms = 0;
  /// Set once `parts` holds the actors (requests from other nodes may
  /// arrive as soon as Raft runs).
  std::atomic<bool> serving{false};
};

namespace {

link::answer failed(link::op kind, errc code, std::string detail) {
  link::answer res;
  res.kind = kind;
  res.error = code;
  res.detail = std::move(detail);
  return res;
}

// Asks `hdl` and answers with `fill(answer, value)`, on the thread of the
// actor that answered. No timeout: the local node always answers (its store
// settles every command; a Raft leader that cannot commit loses leadership
// and fails what it holds), and the HTTP response timeout bounds the
// sender's wait.
template <class T, class Handle, class Fill, class... Ts>
void ask_actor(gateway::actor_caller& caller, const Handle& hdl, link::op kind,
               std::function<void(link::answer)> done, Fill fill,
               Ts&&... xs) {
  caller.ask<T>(
    hdl,
    [kind, done = std::move(done), fill](gateway::reply<T> rep) {
      if (!rep.ok) {
        done(failed(kind, rep.error, std::move(rep.detail)));
        return;
      }
      link::answer res;
      res.kind = kind;
      fill(res, rep.value);
      done(std::move(res));
    },
    std::forward<Ts>(xs)...);
}

// Hands a result from the Raft thread back to a bridge actor.
std::function<void(link::answer)>
back_to_bridge(const std::shared_ptr<cluster_context>& cx,
               std::function<void(link::answer)> done) {
  return [bridge = cx->bridge, done](link::answer ans) {
    bridge->post([done, ans = std::move(ans)](caf::event_based_actor*) mutable {
      done(std::move(ans));
    });
  };
}

// libraft's status of a membership change, as the answer to `kind`.
std::function<void(int)> status_answer(std::function<void(link::answer)> back,
                                       link::op kind) {
  return [back = std::move(back), kind](int status) {
    link::answer res;
    res.kind = kind;
    res.status = status;
    back(std::move(res));
  };
}

void doubt_removed(caf::event_based_actor* self,
                   const std::shared_ptr<cluster_context>& cx, uint16_t group,
                   uint64_t id) {
  // A removed node never comes back to settle what it had in flight: those
  // records are in doubt now (never re-executed automatically).
  self
    ->request(cx->parts[group].store, cx->remote_timeout, doubt_atom::value,
              id, std::numeric_limits<int64_t>::max())
    .then(
      [id, group](uint64_t n) {
        log::cluster()->info("cluster.removed_node_doubted id={} partition={} "
                             "count={}",
                             id, group, n);
      },
      [id, group](caf::error& err) {
        log::cluster()->warn("cluster.removed_node_doubt_failed id={} "
                             "partition={} error={}",
                             id, group, describe(err));
      });
}

} // namespace

void call_locally(const std::shared_ptr<cluster_context>& cx, uint16_t group,
                  link::request req, std::function<void(link::answer)> done) {
  using link::op;
  auto kind = req.kind;
  if (group >= cx->parts.size()) {
    done(failed(kind, errc::invalid_argument, "no such partition"));
    return;
  }
  // A key is decided in its partition only: one asked of another (a
  // sender's bug, a peer's of another build) would be a second record of
  // it, and a second execution.
  auto parts = static_cast<uint16_t>(cx->parts.size());
  if (parts > 1) {
    const std::string* route = nullptr;
    const std::string* key = nullptr;
    if (kind == op::claim) {
      route = &req.claim.route;
      key = &req.claim.key;
    } else if (kind == op::update) {
      route = &req.update.route;
      key = &req.update.key;
    } else if (kind == op::lookup) {
      route = &req.route;
      key = &req.key;
    }
    if (route != nullptr) {
      auto home = partition_of(*route, *key, parts);
      if (home != group) {
        done(failed(kind, errc::invalid_argument,
                    "the key belongs to partition " + std::to_string(home)
                      + ", not " + std::to_string(group)));
        return;
      }
    }
  }
  if (!cx->serving.load(std::memory_order_acquire)
      || !cx->raft->brief(group).leader_ready) {
    done(failed(kind, errc::not_leader,
                "this node is not the partition's ready leader"));
    return;
  }
  auto& local = cx->parts[group];
  switch (kind) {
    case op::claim: {
      auto& shard = local.shard_for(req.claim.route, req.claim.key);
      ask_actor<claim_result>(
        *cx->caller, shard, kind, std::move(done),
        [](link::answer& a, claim_result& v) { a.claim = std::move(v); },
        claim_atom::value, std::move(req.claim));
      return;
    }
    case op::update: {
      auto& shard = local.shard_for(req.update.route, req.update.key);
      ask_actor<update_result>(
        *cx->caller, shard, kind, std::move(done),
        [](link::answer& a, update_result& v) { a.update = std::move(v); },
        update_atom::value, std::move(req.update));
      return;
    }
    case op::lookup: {
      auto& shard = local.shard_for(req.route, req.key);
      ask_actor<lookup_result>(
        *cx->caller, shard, kind, std::move(done),
        [](link::answer& a, lookup_result& v) { a.lookup = std::move(v); },
        get_atom::value, std::move(req.route), std::move(req.key));
      return;
    }
    case op::list:
      ask_actor<record_page>(
        *cx->caller, local.store, kind, std::move(done),
        [](link::answer& a, record_page& v) { a.page = std::move(v); },
        list_atom::value, std::move(req.route), req.state, std::move(req.key),
        req.limit);
      return;
    case op::doubt:
      ask_actor<uint64_t>(
        *cx->caller, local.store, kind, std::move(done),
        [](link::answer& a, uint64_t& v) { a.value = v; }, doubt_atom::value,
        req.node, req.before_ms);
      return;
    case op::pause:
      ask_actor<route_pauses>(
        *cx->caller, local.store, kind, std::move(done),
        [](link::answer& a, route_pauses& v) { a.pauses = std::move(v); },
        pause_atom::value, std::move(req.route), req.pause, req.now_ms);
      return;
    case op::add: {
      // Joins as a spare (no vote), is caught up by the leader while being
      // promoted, then votes.
      cx->raft->add_voter(req.node, req.address,
                          status_answer(back_to_bridge(cx, std::move(done)),
                                        kind),
                          group);
      return;
    }
    case op::remove: {
      auto id = req.node;
      auto back = back_to_bridge(
        cx,
        [self_cx = cx, id, group, done = std::move(done)](link::answer ans) {
          if (ans.error == errc::none && ans.status == 0)
            self_cx->bridge->post(
              [self_cx, id, group](caf::event_based_actor* self) {
                doubt_removed(self, self_cx, group, id);
              });
          done(std::move(ans));
        });
      cx->raft->remove(id, status_answer(std::move(back), kind), group);
      return;
    }
    case op::transfer: {
      auto back = back_to_bridge(cx, std::move(done));
      cx->raft->transfer(
        req.node,
        [back, kind](uint64_t leader) {
        if (leader == 0) {
          // libraft refused it (to this leader itself, another transfer
          // running) or no leader came out of it: not a success.
          back(failed(kind, errc::invalid_argument,
                      "the leadership transfer did not happen (to the "
                      "leader itself, another transfer running, or no "
                      "leader afterwards)"));
          return;
        }
        link::answer res;
        res.kind = kind;
        res.value = leader;
        back(std::move(res));
        },
        group);
      return;
    }
  }
  done(failed(kind, errc::invalid_argument, "unknown request"));
}

namespace {

// A request of another node, on the Raft thread: checked, then run at this
// node's actors by a bridge actor; the answer goes back on the link it came
// on. A malformed one is refused and counted, never applied (it must not
// fail a batch, move leadership or change the membership); the first and
// then every 1000th is logged, so that a flood cannot fill the disk.
void serve(const std::shared_ptr<cluster_context>& cx,
           const link::served& from, link::request req) {
  if (auto why = refusal(req, cx->peers)) {
    auto n = cx->refused->fetch_add(1) + 1;
    if (n == 1 || n % 1000 == 0)
      log::cluster()->warn("cluster.message_refused from={} kind={} "
                           "reason={} refused_total={}",
                           from.peer, link::to_string(req.kind), why, n);
    cx->raft->reply(from, failed(req.kind, errc::invalid_argument,
                                 std::string{"refused "}
                                   + link::to_string(req.kind) + ": " + why));
    return;
  }
  // Straight from the Raft thread into the registry; the key actor's (or
  // the store's) answer is handed back to the Raft thread from there.
  call_locally(cx, from.group, std::move(req),
               [raft = cx->raft, from](link::answer ans) {
    stage_trace::mark("local.answer");
    raft->reply(from, std::move(ans));
  });
}

// Asks the leader (this node's own store when it is the ready leader) to
// doubt what this node had in flight before it started; retried until done.
void doubt_own(caf::event_based_actor* self,
               std::shared_ptr<cluster_context> cx, uint16_t group) {
  auto retry = [cx, group](caf::event_based_actor* self) {
    gateway::actor_bridge::post_later(
      self, std::chrono::milliseconds(200),
      [cx, group](caf::event_based_actor* self) { doubt_own(self, cx, group); });
  };
  auto settle = [cx, retry, group](caf::event_based_actor* self,
                                   link::answer ans) {
    if (ans.error != errc::none) {
      retry(self);
      return;
    }
    log::cluster()->info("cluster.own_in_flight_doubted partition={} count={}",
                         group, ans.value);
  };
  link::request req;
  req.kind = link::op::doubt;
  req.node = cx->id;
  req.before_ms = cx->started_ms;
  // The answer comes on another thread (an actor's, the Raft thread's).
  auto back = [cx, settle](link::answer ans) {
    cx->bridge->post(
      [settle, ans = std::move(ans)](caf::event_based_actor* self) mutable {
        settle(self, std::move(ans));
      });
  };
  auto status = cx->raft->brief(group);
  if (status.leader_ready) {
    call_locally(cx, group, std::move(req), std::move(back));
    return;
  }
  if (status.leader_id == 0 || status.leader_id == cx->id) {
    retry(self);
    return;
  }
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
    cx->remote_timeout);
  cx->raft->ask(status.leader_id, std::move(req), timeout, std::move(back),
                group);
}

} // namespace

void cluster_node::shutdown() {
  if (context)
    context->serving.store(false, std::memory_order_release);
  // Its actors' retries hold the context, which holds the bridge.
  if (bridge)
    bridge->stop();
  if (caller)
    caller->stop();
  for (auto& part : parts)
    part.shutdown();
  // Raft stops here, on the caller's thread, while this node still owns
  // it: left to the last owner, it could be a request's callback on the
  // Raft thread itself (see `raft_node::~raft_node`), at the actor
  // system's teardown. What it leads it hands on first: the others then
  // go on after a transfer, not after an election timeout.
  if (raft) {
    auto bound = std::chrono::milliseconds(
      2 * std::max<uint32_t>(opts.raft.election_timeout_ms, 100));
    if (auto moved = raft->hand_off(bound); moved > 0)
      log::cluster()->info("cluster.handed_off groups={}", moved);
    raft->stop();
  }
}

uint64_t partition_share(uint64_t budget, uint16_t partitions,
                         uint64_t floor) {
  if (budget == 0 || partitions <= 1)
    return budget;
  return std::max<uint64_t>(budget / std::max<uint16_t>(partitions, 1),
                            floor);
}

std::string partition_db(const std::string& data_dir, uint16_t group) {
  auto name = group == 0 ? std::string{"oncegate.db"}
                         : "oncegate-p" + std::to_string(group) + ".db";
  return (std::filesystem::path{data_dir} / name).string();
}

caf::error check_partition_count(const std::string& data_dir,
                                 uint16_t partitions) {
  namespace fs = std::filesystem;
  auto path = fs::path{data_dir} / "partitions";
  auto fixed = [&](uint64_t had) {
    return make_error(errc::invalid_argument,
                      "cluster.partitions is " + std::to_string(partitions)
                        + " but " + data_dir + " holds a cluster of "
                        + std::to_string(had)
                        + " partition(s): a cluster's partition count is "
                          "fixed when it is created (another count needs a "
                          "new cluster, docs/cluster.md \"Partitions\")");
  };
  std::error_code ec;
  auto st = fs::symlink_status(path, ec);
  if (!ec && fs::exists(st)) {
    if (!fs::is_regular_file(st))
      return make_error(errc::storage_failure,
                        path.string() + " is not a regular file");
    std::ifstream in{path, std::ios::binary};
    char buf[16] = {};
    in.read(buf, sizeof(buf) - 1);
    std::string text{buf, static_cast<size_t>(in.gcount())};
    uint64_t had = 0;
    size_t i = 0;
    for (; i < text.size() && i < 4 && text[i] >= '0' && text[i] <= '9'; ++i)
      had = had * 10 + static_cast<uint64_t>(text[i] - '0');
    bool ok = i > 0 && (text.size() == i || (text.size() == i + 1
                                               && text[i] == '\n'))
              && had >= 1 && had <= link::max_groups;
    if (!ok)
      return make_error(errc::storage_failure,
                        path.string()
                          + " does not hold a partition count (damaged?); "
                            "it must read as the count the cluster was "
                            "created with, e.g. 1");
    if (had != partitions)
      return fixed(had);
    return {};
  }
  // No file: data of a build before partitions (one group), or nothing.
  auto has = [&](const char* name) {
    std::error_code ignored;
    return fs::exists(fs::path{data_dir} / name, ignored);
  };
  if ((has("raft") || has("oncegate.db")) && partitions != 1)
    return fixed(1);
  auto tmp = path;
  tmp += ".tmp";
  auto text = std::to_string(partitions) + "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC
                                 | O_NOFOLLOW,
                  0600);
  if (fd < 0)
    return make_error(errc::storage_failure, "cannot write " + tmp.string()
                                               + ": " + std::strerror(errno));
  bool written = ::write(fd, text.data(), text.size())
                   == static_cast<ssize_t>(text.size())
                 && ::fsync(fd) == 0;
  auto err = errno;
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    if (written)
      err = errno;
    return make_error(errc::storage_failure, "cannot write " + path.string()
                                               + ": " + std::strerror(err));
  }
  // The name must last too.
  if (int dfd = ::open(data_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

caf::expected<std::unique_ptr<cluster_node>>
start_cluster_node(caf::actor_system& sys, node_options opts,
                   cluster_options copts, cluster_hooks hooks,
                   wall_clock_fn now) {
  auto self_peer = std::find_if(copts.peers.begin(), copts.peers.end(),
                                [&](const peer& p) {
                                  return p.id == copts.id;
                                });
  if (self_peer == copts.peers.end())
    return make_error(errc::invalid_argument,
                      "cluster.id " + std::to_string(copts.id)
                        + " is not among cluster.peers");
  if (copts.partitions < 1 || copts.partitions > link::max_groups)
    return make_error(errc::invalid_argument,
                      "cluster.partitions must be 1.."
                        + std::to_string(link::max_groups));
  uint16_t parts = copts.partitions;
  if (auto err = prepare_data_dir(opts))
    return err;
  if (auto err = check_partition_count(opts.data_dir, parts))
    return err;
  // Durability comes from the Raft log (fsynced before an entry counts as
  // committed); libraft replays it into the file after a crash, and
  // `apply_batch` skips what the file already holds.
  opts.store.sync_commits = false;
  // The node's bounds are budgets its partitions share (keys spread evenly
  // over them): the database size, the Raft log in memory, the entries
  // waiting for room, and the entries in flight (below).
  opts.store.max_pages = partition_share(opts.store.max_pages, parts, 64);
  std::vector<std::shared_ptr<persistence::sqlite_store>> writers;
  std::vector<std::shared_ptr<persistence::sqlite_store>> readers;
  int64_t log_clock = 0;
  for (uint16_t g = 0; g < parts; ++g) {
    auto sopts = opts.store;
    if (g > 0)
      sopts.path = partition_db(opts.data_dir, g);
    auto writer = persistence::sqlite_store::open(sopts);
    if (!writer)
      return std::move(writer.error());
    auto reader = persistence::sqlite_store::open_reader(sopts);
    if (!reader)
      return std::move(reader.error());
    writers.emplace_back(std::move(*writer));
    readers.emplace_back(std::move(*reader));
    // Read before the Raft thread owns the writer.
    auto clock = writers.back()->clock_ms();
    if (!clock)
      return std::move(clock.error());
    log_clock = std::max(log_clock, *clock);
  }
  auto result = std::make_unique<cluster_node>();
  result->opts = copts;
  result->bridge = std::make_shared<gateway::actor_bridge>(
    sys, std::max<std::size_t>(1, copts.bridge_actors));
  auto cx = std::make_shared<cluster_context>();
  cx->bridge = result->bridge;
  // A request alone in flight runs the registry, the key actor and the
  // store on the thread that asked (an HTTP thread, or the Raft thread for
  // another node's request; common/inline_execution.hpp): a cluster's
  // store proposes instead of committing, so what it does there is bounded
  // reads on its read-only connection (a cold key's record, a list page),
  // which in WAL mode wait for no writer, and which the Raft thread's own
  // applies already exceed.
  result->caller = std::make_shared<gateway::actor_caller>(sys, true);
  cx->caller = result->caller;
  cx->peers = copts.peers;
  cx->id = copts.id;
  cx->remote_timeout = copts.remote_timeout;
  cx->refused = result->refused_messages;
  cx->started_ms = std::max(log_clock + 1, now());
  result->context = cx;
  // Raft.
  auto ropts = copts.raft;
  ropts.id = copts.id;
  ropts.address = self_peer->raft_address;
  ropts.dir = (std::filesystem::path{opts.data_dir} / "raft").string();
  ropts.bootstrap = !copts.join;
  // A log must hold a few full entries beside what a snapshot keeps.
  ropts.max_log_bytes = partition_share(ropts.max_log_bytes, parts,
                                        4 * copts.store.max_entry_bytes);
  ropts.max_held_bytes = partition_share(ropts.max_held_bytes, parts,
                                         copts.store.max_entry_bytes);
  // Only the members of cluster.peers, each at its address there.
  ropts.link.peers.clear();
  for (auto& p : copts.peers)
    ropts.link.peers[p.id] = p.raft_address;
  ropts.initial.clear();
  for (auto& p : copts.peers)
    if (copts.initial.empty()
        || std::find(copts.initial.begin(), copts.initial.end(), p.id)
             != copts.initial.end())
      ropts.initial.push_back(member{p.id, p.raft_address});
  // The registries exist only after Raft started; role changes before that
  // find none to reset (and none has a cached record yet). Partition g's
  // are `(*registries)[g]`.
  auto registries
    = std::make_shared<std::vector<std::vector<registry_actor>>>(parts);
  auto registries_mtx = std::make_shared<std::mutex>();
  auto reset = [registries, registries_mtx](uint16_t g) {
    std::lock_guard<std::mutex> guard{*registries_mtx};
    for (auto& reg : (*registries)[g])
      caf::anon_send(reg, reset_atom::value);
  };
  auto applied = std::make_shared<decltype(hooks.on_applied)>(
    std::move(hooks.on_applied));
  auto restored = std::make_shared<decltype(hooks.on_restored)>(
    std::move(hooks.on_restored));
  auto unavailable = std::make_shared<decltype(hooks.on_unavailable)>(
    std::move(hooks.on_unavailable));
  std::vector<raft_hooks> rhs(parts);
  for (uint16_t g = 0; g < parts; ++g) {
    auto& rh = rhs[g];
    rh.on_applied = [applied, g](const auto& cmds, const auto& results) {
      if (*applied)
        (*applied)(g, cmds, results);
    };
    rh.on_unavailable = [unavailable] {
      if (*unavailable)
        (*unavailable)();
    };
    rh.on_restored = [reset, restored, g] {
      reset(g);
      if (*restored)
        (*restored)(g);
    };
    // (leader, term) as last seen; only the Raft thread touches it.
    auto seen = std::make_shared<std::pair<bool, uint64_t>>(false, 0);
    rh.on_change = [reset, seen, g](const raft_status& s) {
      auto leader = s.role == raft_role::leader;
      auto changed = leader != seen->first
                     || (leader && s.term != seen->second);
      *seen = {leader, s.term};
      if (!changed)
        return;
      // Cached records must not outlive a change of leadership: while this
      // node was not the partition's leader, another one may have changed
      // them.
      if (ONCEGATE_MUTANT("skip-key-reset"))
        return;
      reset(g);
    };
  }
  // The Raft thread runs what its messages wake (the store that learns a
  // commit, the registry of a forwarded request) where the senders let it.
  ropts.on_loop_start = [psys = &sys](inline_exec::deferrer defer) {
    inline_exec::run_woken_actors_here(*psys, std::move(defer));
  };
  ropts.on_loop_end = [] { inline_exec::stop_running_here(); };
  auto raft = raft_node::start(ropts, writers, std::move(rhs));
  if (!raft)
    return std::move(raft.error());
  result->raft = std::move(*raft);
  cx->raft = result->raft;
  for (uint16_t g = 0; g < parts; ++g) {
    auto store_opts = copts.store;
    store_opts.detached = opts.detached_store;
    store_opts.group = g;
    // The entries in flight are the node's budget, shared by its
    // partitions: each entry costs every node an append, a sync and an
    // apply of its own, so P partitions each pipelining as one would
    // split the same load into P times as many, smaller entries (3 nodes,
    // 8 partitions, 48 connections: 1.5 commands per entry at 4 each, 2.6
    // at 1, and 31 % more decisions a second; docs/benchmarks.md).
    store_opts.max_outstanding = static_cast<uint32_t>(
      partition_share(copts.store.max_outstanding, parts, 1));
    auto store = spawn_replicated_store(sys, result->raft, readers[g],
                                        std::move(store_opts), now);
    result->parts.push_back(spawn_node_actors(sys, store, opts, now));
  }
  cx->parts = result->parts;
  {
    std::lock_guard<std::mutex> guard{*registries_mtx};
    for (uint16_t g = 0; g < parts; ++g)
      (*registries)[g] = result->parts[g].registries;
  }
  cx->serving.store(true, std::memory_order_release);
  // Other nodes' requests: answered `not_leader` until now.
  std::weak_ptr<cluster_context> weak = cx;
  result->raft->serve([weak](const link::served& from, link::request req) {
    if (auto cx = weak.lock())
      serve(cx, from, std::move(req));
  });
  for (uint16_t g = 0; g < parts; ++g)
    result->bridge->post(
      [cx, g](caf::event_based_actor* self) { doubt_own(self, cx, g); });
  log::cluster()->info("cluster.started id={} address={} peers={} "
                       "partitions={} tls={}",
                       copts.id, self_peer->raft_address, copts.peers.size(),
                       parts, ropts.link.tls.has_value());
  return result;
}

} // namespace oncegate::cluster
