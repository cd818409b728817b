#include "routing/cluster_node.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <set>
#include <system_error>
#include <utility>

extern "C" {
#include <raft.h>
}

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "common/errc.hpp"
#include "common/mutant.hpp"
#include "common/logging.hpp"
#include "routing/peer_tls.hpp"

namespace oncegate::cluster {

namespace {

// A membership change finished on the Raft thread; the front answers.
struct change_outcome {
  caf::response_promise rp;
  int status = 0;
  uint64_t leader = 0;
  bool is_transfer = false;
  /// A removed node (its in-flight records are doubted afterwards).
  uint64_t removed = 0;
};

} // namespace

} // namespace oncegate::cluster

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(oncegate::cluster::change_outcome)

namespace oncegate::cluster {

// -- peers --------------------------------------------------------------------

namespace {

bool parse_host_port(const std::string& text, std::string& host,
                     uint16_t& port) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return false;
  host = text.substr(0, colon);
  uint32_t value = 0;
  for (auto c : text.substr(colon + 1)) {
    if (c < '0' || c > '9')
      return false;
    value = value * 10 + static_cast<uint32_t>(c - '0');
    if (value > 65535)
      return false;
  }
  if (value == 0)
    return false;
  port = static_cast<uint16_t>(value);
  return true;
}

} // namespace

peer parse_peer(const std::string& text, std::string& error) {
  peer result;
  error.clear();
  auto eq = text.find('=');
  auto comma = text.find(',');
  if (eq == std::string::npos || comma == std::string::npos || comma < eq) {
    error = "expected ID=RAFT_HOST:PORT,CAF_HOST:PORT, got '" + text + "'";
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
  result.raft_address = text.substr(eq + 1, comma - eq - 1);
  std::string raft_host;
  uint16_t raft_port = 0;
  if (!parse_host_port(result.raft_address, raft_host, raft_port)) {
    error = "bad raft address in '" + text + "'";
    return result;
  }
  if (!parse_host_port(text.substr(comma + 1), result.host, result.port)) {
    error = "bad CAF address in '" + text + "'";
    return result;
  }
  return result;
}

peer_links::peer_links(caf::actor_system& sys, std::vector<peer> peers,
                       caf::timespan timeout, bool tls)
  : sys_(sys), peers_(std::move(peers)), timeout_(timeout), tls_(tls) {
  // nop
}

const peer* peer_links::find(uint64_t id) const {
  for (auto& p : peers_)
    if (p.id == id)
      return &p;
  return nullptr;
}

caf::actor peer_links::get(caf::event_based_actor* self, uint64_t id) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (auto i = links_.find(id); i != links_.end())
      return i->second;
    if (!connecting_.insert(id).second)
      return {};
  }
  auto p = find(id);
  if (p == nullptr) {
    std::lock_guard<std::mutex> guard{mtx_};
    connecting_.erase(id);
    log::cluster()->warn("cluster.unknown_peer id={}", id);
    return {};
  }
  // Over TLS when the node is (the OpenSSL module is loaded only then).
  auto mm = tls_ ? sys_.openssl_manager().actor_handle()
                 : sys_.middleman().actor_handle();
  self->request(mm, timeout_, caf::connect_atom::value, p->host, p->port)
    .then(
      [this, id](const caf::node_id&, caf::strong_actor_ptr& ptr,
                 const std::set<std::string>&) {
        std::lock_guard<std::mutex> guard{mtx_};
        connecting_.erase(id);
        if (ptr)
          links_[id] = caf::actor_cast<caf::actor>(std::move(ptr));
      },
      [this, id](caf::error& err) {
        log::cluster()->debug("cluster.connect_failed peer={} error={}", id,
                              sys_.render(err));
        std::lock_guard<std::mutex> guard{mtx_};
        connecting_.erase(id);
      });
  return {};
}

void peer_links::drop(uint64_t id) {
  std::lock_guard<std::mutex> guard{mtx_};
  links_.erase(id);
}

// -- the front actor ------------------------------------------------------------

namespace {

struct front_state {
  node local;
  std::shared_ptr<raft_node> raft;
  std::shared_ptr<peer_links> links;
  uint64_t id = 0;
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
  bool doubted = false;
  caf::timespan remote_timeout;
  /// Messages refused as malformed (shared with the node's metrics).
  std::shared_ptr<std::atomic<uint64_t>> refused;

  static inline const char* name = "oncegate.front";

  bool ready() const {
    return raft->brief().leader_ready;
  }
};

using front_pointer = caf::stateful_actor<front_state>*;

caf::error not_leader() {
  return make_error(errc::not_leader, "this node is not the ready leader");
}

} // namespace

bool answered_by(caf::event_based_actor* self, const caf::actor& target) {
  auto from = self->current_sender();
  return from != nullptr && target && from->node() == target.node()
         && from->id() == target.id();
}

namespace {

// Answers another node's request with what `hdl` answers, from the front
// itself (never `delegate`): no actor behind the front answers another node,
// so no other node learns its address. CAF 0.17's BASP broker monitors every
// local actor that another node holds a proxy of, and a down message that
// reaches the broker while the middleman stops is never destroyed (brokers
// do not drain their mailbox at exit). That message holds its actor: for the
// detached store, `~actor_system` then waits for the store's thread forever.
template <class T, class Handle, class... Ts>
caf::result<T> relay(front_pointer self, const Handle& hdl, Ts&&... xs) {
  auto rp = self->make_response_promise();
  self->request(hdl, caf::infinite, std::forward<Ts>(xs)...)
    .then([rp](T& res) mutable { rp.deliver(std::move(res)); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

// Every message the front accepts may come from another node: a buggy
// older version or, should a member's certificate be stolen, an impostor.
// A malformed one is refused and counted, never applied (it must not fail
// a batch, move leadership or change the membership); the first and then
// every 1000th is logged, so that a flood cannot fill the disk.
caf::error refuse(front_pointer self, const char* what, const char* why) {
  auto n = self->state.refused->fetch_add(1) + 1;
  if (n == 1 || n % 1000 == 0)
    log::cluster()->warn("cluster.message_refused kind={} reason={} "
                         "refused_total={}",
                         what, why, n);
  return make_error(errc::invalid_argument,
                    std::string{"refused "} + what + ": " + why);
}

// Whether `id` is a member of `cluster.peers` (0 is none).
bool known_peer(front_pointer self, uint64_t id) {
  return id != 0 && self->state.links->find(id) != nullptr;
}

// Asks the leader (this node's own store when it is the ready leader) to
// doubt what this node had in flight before it started; retried until done.
void doubt_own(front_pointer self) {
  auto& st = self->state;
  if (st.doubted)
    return;
  auto retry = [self] {
    self->delayed_send(self, std::chrono::milliseconds(200), doubt_atom::value);
  };
  auto on_done = [self](uint64_t n) {
    self->state.doubted = true;
    log::cluster()->info("cluster.own_in_flight_doubted count={}", n);
  };
  auto status = st.raft->status();
  if (status.leader_ready) {
    self
      ->request(st.local.store, st.remote_timeout, doubt_atom::value, st.id,
                st.started_ms)
      .then(on_done, [retry](caf::error&) { retry(); });
    return;
  }
  if (status.leader_id == 0) {
    retry();
    return;
  }
  auto hdl = st.links->get(self, status.leader_id);
  if (!hdl) {
    retry();
    return;
  }
  auto leader = status.leader_id;
  self
    ->request(hdl, st.remote_timeout, doubt_atom::value, st.id, st.started_ms)
    .then(
      [self, hdl, on_done, retry](uint64_t n) {
        if (!answered_by(self, hdl)) {
          retry(); // not the leader's answer: ask again
          return;
        }
        on_done(n);
      },
      [self, retry, leader](caf::error&) {
        self->state.links->drop(leader);
        retry();
      });
}

caf::behavior front_impl(front_pointer self, node local,
                         std::shared_ptr<raft_node> raft,
                         std::shared_ptr<peer_links> links,
                         cluster_options opts, int64_t started_ms,
                         std::shared_ptr<std::atomic<uint64_t>> refused) {
  auto& st = self->state;
  st.local = std::move(local);
  st.raft = std::move(raft);
  st.links = std::move(links);
  st.id = opts.id;
  st.started_ms = started_ms;
  st.remote_timeout = opts.remote_timeout;
  st.refused = std::move(refused);
  self->send(self, doubt_atom::value);
  auto change_cb = [self](caf::response_promise rp, bool transfer) {
    caf::actor hdl = caf::actor_cast<caf::actor>(self);
    return [hdl, rp, transfer](int status) mutable {
      caf::anon_send(hdl, change_outcome{rp, status, 0, transfer});
    };
  };
  return {
    [self](claim_atom, claim_request& req) -> caf::result<claim_result> {
      if (auto why = malformed(req))
        return refuse(self, "claim", why);
      if (req.owner != 0 && !known_peer(self, req.owner))
        return refuse(self, "claim", "owner is no member");
      if (!self->state.ready())
        return not_leader();
      auto& shard = self->state.local.shard_for(req.route, req.key);
      return relay<claim_result>(self, shard, claim_atom::value,
                                 std::move(req));
    },
    [self](update_atom, record_update& upd) -> caf::result<update_result> {
      if (auto why = malformed(upd))
        return refuse(self, "update", why);
      if (!self->state.ready())
        return not_leader();
      auto& shard = self->state.local.shard_for(upd.route, upd.key);
      return relay<update_result>(self, shard, update_atom::value,
                                  std::move(upd));
    },
    [self](get_atom, std::string& route,
           std::string& key) -> caf::result<lookup_result> {
      if (auto why = malformed_key(route, key))
        return refuse(self, "lookup", why);
      if (!self->state.ready())
        return not_leader();
      auto& shard = self->state.local.shard_for(route, key);
      return relay<lookup_result>(self, shard, get_atom::value,
                                  std::move(route), std::move(key));
    },
    [self](list_atom, std::string& route, record_state state,
           std::string& after, uint32_t limit) -> caf::result<record_page> {
      if (route.size() > record_bounds::route
          || after.size() > record_bounds::key
          || static_cast<uint8_t>(state)
               > static_cast<uint8_t>(record_state::failed)
          || limit > record_bounds::list_page)
        return refuse(self, "list", "bounds");
      if (!self->state.ready())
        return not_leader();
      return relay<record_page>(self, self->state.local.store,
                                list_atom::value, std::move(route), state,
                                std::move(after), limit);
    },
    // From another node (or this one) at its start: doubt its old records.
    [self](doubt_atom, uint64_t owner,
           int64_t before_ms) -> caf::result<uint64_t> {
      if (!known_peer(self, owner))
        return refuse(self, "doubt", "owner is no member");
      if (!self->state.ready())
        return not_leader();
      return relay<uint64_t>(self, self->state.local.store, doubt_atom::value,
                             owner, before_ms);
    },
    // This node's own start-up doubt (sent to itself, retried).
    [self](doubt_atom) { doubt_own(self); },
    [self, change_cb](add_atom, uint64_t id,
                      std::string& address) -> caf::result<int32_t> {
      // Only a node of cluster.peers, at its address there.
      auto p = self->state.links->find(id);
      if (p == nullptr || id == 0 || p->raft_address != address)
        return refuse(self, "add", "not a member of cluster.peers");
      if (!self->state.ready())
        return not_leader();
      auto rp = self->make_response_promise();
      // Joins as a spare (no vote), is caught up by the leader while being
      // promoted, then votes.
      self->state.raft->add_voter(id, address, change_cb(rp, false));
      return rp;
    },
    [self](remove_atom, uint64_t id) -> caf::result<int32_t> {
      if (id == 0)
        return refuse(self, "remove", "node id 0");
      if (!self->state.ready())
        return not_leader();
      auto rp = self->make_response_promise();
      caf::actor hdl = caf::actor_cast<caf::actor>(self);
      self->state.raft->remove(id, [hdl, rp, id](int status) mutable {
        caf::anon_send(hdl, change_outcome{rp, status, 0, false, id});
      });
      return rp;
    },
    [self](transfer_atom, uint64_t id) -> caf::result<uint64_t> {
      if (id != 0 && !known_peer(self, id))
        return refuse(self, "transfer", "not a member of cluster.peers");
      if (!self->state.ready())
        return not_leader();
      auto rp = self->make_response_promise();
      caf::actor hdl = caf::actor_cast<caf::actor>(self);
      self->state.raft->transfer(id, [hdl, rp](uint64_t leader) mutable {
        caf::anon_send(hdl, change_outcome{rp, 0, leader, true});
      });
      return rp;
    },
    [self](change_outcome& out) {
      if (out.removed != 0 && out.status == 0) {
        // A removed node never comes back to settle what it had in flight:
        // those records are in doubt now (never re-executed automatically).
        auto id = out.removed;
        self
          ->request(self->state.local.store, self->state.remote_timeout,
                    doubt_atom::value, id,
                    std::numeric_limits<int64_t>::max())
          .then(
            [id](uint64_t n) {
              log::cluster()->info("cluster.removed_node_doubted id={} "
                                   "count={}",
                                   id, n);
            },
            [id](caf::error& err) {
              log::cluster()->warn("cluster.removed_node_doubt_failed id={} "
                                   "error={}",
                                   id, describe(err));
            });
      }
      if (out.is_transfer && out.leader == 0)
        // libraft refused it (to this leader itself, another transfer
        // running) or no leader came out of it: not a success.
        out.rp.deliver(make_error(errc::invalid_argument,
                                  "the leadership transfer did not happen "
                                  "(to the leader itself, another transfer "
                                  "running, or no leader afterwards)"));
      else if (out.is_transfer)
        out.rp.deliver(out.leader);
      else
        out.rp.deliver(static_cast<int32_t>(out.status));
    },
  };
}

} // namespace

void cluster_node::shutdown() {
  local.shutdown();
  caf::anon_send_exit(front, caf::exit_reason::user_shutdown);
}

caf::error prepare_peer_tls(caf::actor_system_config& cfg,
                            const cluster_options& copts) {
  if (!copts.raft.tls)
    return caf::none;
  cfg.load<caf::openssl::manager>();
  tls::policy_config pc;
  pc.self_id = copts.id;
  pc.ca_file = copts.raft.tls->ca_file;
  pc.cert_file = copts.raft.tls->cert_file;
  pc.key_file = copts.raft.tls->key_file;
  pc.handshake_timeout = copts.raft.tls->handshake_timeout;
  pc.member_sources_only = copts.member_sources_only;
  pc.max_message_bytes = copts.max_peer_message;
  for (auto& p : copts.peers)
    pc.members.push_back({p.id, p.host, p.port});
  std::string error;
  if (!tls::configure(cfg, pc, error))
    return make_error(errc::invalid_argument, "cluster tls: " + error);
  // Refusals are logged first and then every 1000th: a flood of strangers
  // must not fill the disk (tls::stats() counts them all).
  auto refused = std::make_shared<std::atomic<uint64_t>>(0);
  tls::set_event_handler([refused](const tls::event& ev) {
    if (ev.kind == tls::event::accepted) {
      log::cluster()->debug("peer_tls.{}", tls::to_string(ev));
      return;
    }
    auto n = refused->fetch_add(1) + 1;
    if (n <= 100 || n % 1000 == 0)
      log::cluster()->warn("peer_tls.{} refused_total={}", tls::to_string(ev),
                           n);
  });
  return caf::none;
}

caf::error check_peer_tls(caf::actor_system& sys,
                          const cluster_options& copts) {
  if (!copts.raft.tls)
    return caf::none;
  std::string error;
  if (!tls::self_test(sys, error))
    return make_error(errc::invalid_argument, "cluster tls: " + error);
  return caf::none;
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
  if (auto err = prepare_data_dir(opts))
    return err;
  // Durability comes from the Raft log (fsynced before an entry counts as
  // committed); libraft replays it into the file after a crash, and
  // `apply_batch` skips what the file already holds.
  opts.store.sync_commits = false;
  auto writer = persistence::sqlite_store::open(opts.store);
  if (!writer)
    return std::move(writer.error());
  auto reader = persistence::sqlite_store::open_reader(opts.store);
  if (!reader)
    return std::move(reader.error());
  auto result = std::make_unique<cluster_node>();
  result->opts = copts;
  std::shared_ptr<persistence::sqlite_store> writer_db{std::move(*writer)};
  // Read before the Raft thread owns the writer.
  auto log_clock = writer_db->clock_ms();
  if (!log_clock)
    return std::move(log_clock.error());
  std::shared_ptr<persistence::sqlite_store> reader_db{std::move(*reader)};
  // Raft.
  auto ropts = copts.raft;
  ropts.id = copts.id;
  ropts.address = self_peer->raft_address;
  ropts.dir = (std::filesystem::path{opts.data_dir} / "raft").string();
  ropts.bootstrap = !copts.join;
  // Only the members of cluster.peers, each at its address there.
  if (ropts.tls) {
    ropts.tls->peers.clear();
    for (auto& p : copts.peers)
      ropts.tls->peers[p.id] = p.raft_address;
  }
  ropts.initial.clear();
  for (auto& p : copts.peers)
    if (copts.initial.empty()
        || std::find(copts.initial.begin(), copts.initial.end(), p.id)
             != copts.initial.end())
      ropts.initial.push_back(member{p.id, p.raft_address});
  // The registries exist only after Raft started; role changes before that
  // find none to reset (and none has a cached record yet).
  auto registries = std::make_shared<std::vector<registry_actor>>();
  auto registries_mtx = std::make_shared<std::mutex>();
  raft_hooks rh;
  rh.on_applied = std::move(hooks.on_applied);
  rh.on_unavailable = std::move(hooks.on_unavailable);
  rh.on_restored = [registries, registries_mtx,
                    restored = std::move(hooks.on_restored)] {
    {
      std::lock_guard<std::mutex> guard{*registries_mtx};
      for (auto& reg : *registries)
        caf::anon_send(reg, reset_atom::value);
    }
    if (restored)
      restored();
  };
  // (leader, term) as last seen; only the Raft thread touches it.
  auto seen = std::make_shared<std::pair<bool, uint64_t>>(false, 0);
  rh.on_change = [registries, registries_mtx, seen](const raft_status& s) {
    auto leader = s.role == raft_role::leader;
    auto changed = leader != seen->first || (leader && s.term != seen->second);
    *seen = {leader, s.term};
    if (!changed)
      return;
    // Cached records must not outlive a change of leadership: while this
    // node was not leader, another one may have changed them.
    if (ONCEGATE_MUTANT("skip-key-reset"))
      return;
    std::lock_guard<std::mutex> guard{*registries_mtx};
    for (auto& reg : *registries)
      caf::anon_send(reg, reset_atom::value);
  };
  auto raft = raft_node::start(ropts, *writer_db, std::move(rh));
  if (!raft)
    return std::move(raft.error());
  result->raft = std::shared_ptr<raft_node>{
    raft->release(),
    // The writer connection must outlive the Raft thread.
    [writer_db](raft_node* ptr) { delete ptr; }};
  auto store = spawn_replicated_store(sys, result->raft, reader_db,
                                      copts.store, now);
  result->local = spawn_node_actors(sys, store, opts, now);
  {
    std::lock_guard<std::mutex> guard{*registries_mtx};
    *registries = result->local.registries;
  }
  result->links = std::make_shared<peer_links>(sys, copts.peers,
                                               copts.remote_timeout,
                                               copts.raft.tls.has_value());
  result->front = sys.spawn(front_impl, result->local, result->raft,
                            result->links, copts,
                            std::max(*log_clock + 1, now()),
                            result->refused_messages);
  auto port = copts.raft.tls
                ? caf::openssl::publish(result->front, self_peer->port,
                                        self_peer->host.c_str(), true)
                : sys.middleman().publish(result->front, self_peer->port,
                                          self_peer->host.c_str(), true);
  if (!port) {
    result->shutdown();
    return make_error(errc::storage_failure,
                      "cannot publish the front actor on "
                        + self_peer->host + ":"
                        + std::to_string(self_peer->port) + ": "
                        + sys.render(port.error()));
  }
  result->front_port = *port;
  log::cluster()->info("cluster.started id={} raft={} front={}:{} peers={}",
                       copts.id, self_peer->raft_address, self_peer->host,
                       *port, copts.peers.size());
  return result;
}

} // namespace oncegate::cluster
