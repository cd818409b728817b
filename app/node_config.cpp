#include "app/node_config.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <limits>
#include <string_view>
#include <chrono>
#include <thread>

#include <caf/atom.hpp>

#include "actors/messages.hpp"
#include "api/auth.hpp"
#include "common/record.hpp"

namespace oncegate::gateway {

namespace {

std::chrono::milliseconds to_ms(caf::timespan x) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(x);
}

} // namespace

node_config::node_config() {
  register_types(*this);
  set_scheduler_defaults(*this);
  opt_group{custom_options_, "global"}
    .add(http_host, "http-host", "address the HTTP listener binds")
    .add(http_port, "http-port", "HTTP port (0: any free port)")
    .add(data_dir, "data-dir", "directory of the SQLite database")
    .add(log_level, "log-level", "trace, debug, info, warn, error or off")
    .add(log_levels, "log-levels",
         "per-component levels, e.g. store=debug,cluster=warn (components: "
         "gateway, actors, store, cluster)")
    .add(log_format, "log-format", "text or json (one object per line)")
    .add(log_file, "log-file",
         "also log to this file, rotated (empty: stderr only)")
    .add(log_file_size, "log-file-size", "rotate the log file at this size")
    .add(log_file_count, "log-file-count", "rotated log files kept")
    .add(http_threads, "http-threads", "threads serving HTTP")
    .add(upstream, "upstream",
         "forward the default route's first requests to http://host:port/path")
    .add(version, "version", "print the version and exit")
    .add(backup_to, "backup-to",
         "write an online backup of data-dir's database to this new file "
         "and exit (the node may be running)")
    .add(accept_wal_loss, "accept-wal-loss",
         "start although the WAL holds committed transactions SQLite would "
         "drop (a damaged frame before them): their keys execute again; "
         "the damaged WAL is copied aside (docs/operations.md)");
  opt_group{custom_options_, "http"}
    .add(body_limit, "body-limit", "largest request body in bytes (413)")
    .add(header_limit, "header-limit", "largest header block in bytes (431)")
    .add(header_timeout, "header-timeout", "time to receive headers (408)")
    .add(body_timeout, "body-timeout", "time to receive the body (408)")
    .add(idle_timeout, "idle-timeout", "keep-alive connection idle time")
    .add(response_timeout, "response-timeout",
         "time from request to response before 503 (bounds every decision)")
    .add(max_connections, "max-connections", "open connections at most")
    .add(stall_rescue, "stall-rescue",
         "one HTTP thread stuck this long in a commit (a stalled disk) gets "
         "a second thread serving the other requests until it returns")
    .add(shutdown_grace, "shutdown-grace",
         "longest wait for in-flight requests on shutdown")
    .add(tls_certificate, "tls-certificate",
         "PEM certificate chain, leaf first (certbot: fullchain.pem): the "
         "listener speaks HTTPS only; SIGHUP reloads it (docs/tls.md)")
    .add(tls_key, "tls-key",
         "PEM private key of http.tls-certificate, unencrypted (certbot: "
         "privkey.pem)")
    .add(tls_handshake_timeout, "tls-handshake-timeout",
         "time from accept to the end of the TLS handshake (closed beyond)")
    .add(trusted_proxies, "trusted-proxies",
         "reverse proxies (CIDRs) whose forwarding header names the client "
         "for route allowlists and logs")
    .add(forwarded_headers, "forwarded-headers",
         "headers a trusted proxy names the client in, first present wins: "
         "x-forwarded-for, forwarded")
    .add(forwarded_limit, "forwarded-limit",
         "bytes of the forwarding header read at most, from its right end");
  opt_group{custom_options_, "keys"}
    .add(ttl, "ttl", "lifetime of a record (e.g. 24h, 72h)")
    .add(key_idle_timeout, "idle-timeout",
         "an idle key actor leaves memory after this long")
    .add(max_live_keys, "max-live", "live key actors at most (503 beyond)")
    .add(registry_shards, "registry-shards", "registry actors")
    .add(gateway_actors, "gateway-actors", "gateway (bridge) actors")
    .add(decision_cache, "decision-cache",
         "completed decisions cached for duplicates on HTTP threads "
         "(entries; 0: off)")
    .add(decision_cache_bytes, "decision-cache-bytes",
         "bytes the decision cache holds at most (answers included; 0: "
         "no byte bound)")
    .add(key_cache_bytes, "actor-cache-bytes",
         "a live key actor keeps a stored answer up to this size in memory "
         "(larger ones are read from the store when a duplicate needs it)")
    .add(in_flight_deadline, "in-flight-deadline",
         "an in-flight record older than this turns in-doubt (0: the "
         "longest upstream connect + response timeout + 10s)");
  opt_group{custom_options_, "store"}
    .add(max_batch, "max-batch", "operations per transaction at most")
    .add(max_pending, "max-pending",
         "operations waiting for a transaction at most (503 beyond)")
    .add(max_pending_bytes, "max-pending-bytes",
         "bytes of operations waiting for a transaction at most (503 "
         "beyond)")
    .add(checkpoint_pages, "checkpoint-pages",
         "WAL pages that trigger a background checkpoint")
    .add(wal_writeout_pages, "wal-writeout-pages",
         "cluster node: write the WAL out each time it grew by this many "
         "pages (0: only at checkpoints)")
    .add(store_on_scheduler, "on-scheduler",
         "run the store actor on CAF's workers (a single node commits on "
         "the asking HTTP thread when idle, else on a commit thread) "
         "instead of a thread of its own")
    .add(max_pages, "max-pages",
         "largest database in 4 KiB pages (0: unlimited; 503 beyond)");
  opt_group{custom_options_, "admin"}
    .add(admin_token, "token",
         "bearer token for /v1/keys (prefer token-env or token-file)")
    .add(admin_token_env, "token-env",
         "environment variable holding the admin token")
    .add(admin_token_file, "token-file", "file holding the admin token")
    .add(admin_allow_unauthenticated_loopback,
         "allow-unauthenticated-loopback",
         "without a token, let admin changes through on a loopback listener "
         "from a loopback peer (loopback-only setups; warned at start)");
  opt_group{custom_options_, "cluster"}
    .add(cluster_id, "id", "this node's id in cluster.peers (0: single node)")
    .add(cluster_peers, "peers",
         "every node as \"ID=RAFT_HOST:PORT,CAF_HOST:PORT\" (itself too)")
    .add(cluster_initial, "initial",
         "ids of the voters that bootstrap a new cluster (default: every "
         "peer); peers not listed can be added later")
    .add(cluster_join, "join",
         "join an existing cluster (added by an operator) instead of "
         "bootstrapping it")
    .add(election_timeout, "election-timeout",
         "raft election timeout (randomised to 1-2x)")
    .add(heartbeat_timeout, "heartbeat-timeout", "raft heartbeat interval")
    .add(snapshot_threshold, "snapshot-threshold",
         "raft log entries between snapshots")
    .add(snapshot_trailing, "snapshot-trailing",
         "raft log entries kept behind a snapshot")
    .add(cluster_tls_ca, "tls-ca",
         "PEM file of the cluster CA (scripts/cluster-certs.sh)")
    .add(cluster_tls_certificate, "tls-certificate",
         "PEM file of this node's certificate (names node-ID.oncegate)")
    .add(cluster_tls_key, "tls-key", "PEM file of this node's private key")
    .add(member_sources_only, "member-sources-only",
         "refuse connections to the node link's port from addresses that "
         "are no member's before any handshake (off behind NAT)")
    .add(max_peer_message, "max-peer-message",
         "the largest frame in bytes another node may send on the node "
         "link (larger: the connection is closed)")
    .add(cluster_insecure, "insecure",
         "talk to the other nodes in plain text, without authentication "
         "(anyone who reaches the ports controls the cluster)")
    .add(cluster_partitions, "partitions",
         "Raft groups (partitions) the keys are spread over, 1..256, each "
         "with its own leader; the same on every node and fixed when the "
         "cluster is created")
    .add(repair_after, "repair-after",
         "a follower that answers but stays behind this long is repaired: "
         "the leader hands leadership to an up-to-date voter (0: never)")
    .add(remote_timeout, "remote-timeout",
         "bound on each request to another node")
    .add(leader_wait, "leader-wait",
         "how long a request looks for a ready leader before 503")
    .add(max_clock_offset, "max-clock-offset",
         "beyond this offset of its clock from the leader's, a node is not "
         "ready and answers deliveries signed with a timestamp it judges "
         "stale 503 instead of 401")
    .add(max_outstanding, "max-outstanding",
         "raft entries proposed and not yet applied at most")
    .add(max_entry_bytes, "max-entry-bytes",
         "bytes of commands per raft log entry at most")
    .add(max_log_bytes, "max-log-bytes",
         "bytes of raft log entries kept in memory between snapshots at "
         "most (a snapshot is taken sooner, and the leader holds new "
         "entries while the log is full; 0: entry counts only)")
    .add(max_held_bytes, "max-held-bytes",
         "bytes of raft entries waiting for room in a full log at most "
         "(beyond: 503 overloaded, never proposed; 0: none waits)")
    .add(max_hold, "max-hold",
         "how long a raft entry waits for room in a full log (then: 503 "
         "overloaded, never proposed)")
    .add(max_background, "max-background",
         "record transitions retried in the background at most (beyond: "
         "dropped, the record turns in_doubt at its deadline)")
    .add(max_background_bytes, "max-background-bytes",
         "bytes of record transitions retried in the background at most");
  opt_group{custom_options_, "alarm"}
    .add(purge_chunk, "purge-chunk", "records deleted per purge transaction")
    .add(alarm_max_interval, "max-interval",
         "longest sleep of the expiry alarm");
}

// What an operator configures, in the order of setting a node up. The
// words are short on purpose: the option's description (`--long-help`,
// docs/operations.md) says the rest.
const std::vector<help_group>& node_config::help_groups() {
  static const std::vector<help_group> groups{
    {"listener",
     {},
     {{"http-host", "address to bind"},
      {"http-port", "port (0: any free port)"},
      {"http.tls-certificate", "PEM chain, leaf first: HTTPS (docs/tls.md)"},
      {"http.tls-key", "its PEM key; SIGHUP reloads both"},
      {"http.tls-handshake-timeout", "TLS handshake deadline"},
      {"http.max-connections", "connections at most (503 beyond)"},
      {"http.trusted-proxies", "reverse proxies (CIDRs) naming the client"},
      {"http.body-limit", "largest body in bytes (413)"},
      {"http.header-timeout", "time to receive the headers (408)"},
      {"http.body-timeout", "time to receive the body (408)"},
      {"http.idle-timeout", "keep-alive connection idle time"},
      {"http.response-timeout", "time to a decision (503 beyond)"},
      {"http.shutdown-grace", "wait for requests in flight on stop"},
      {"http-threads", "threads serving HTTP"}},
     {"http.header-limit", "http.forwarded-headers", "http.forwarded-limit",
      "http.stall-rescue"}},
    {"routes",
     {"[route.NAME] sections (POST /v1/webhook/NAME): auth secret secret-env",
      "  secret-file ttl on-duplicate body-limit allow tolerance upstream",
      "  upstream-* respond-after delivery* reconcile* (docs/operations.md)"},
     {{"upstream", "the default route's upstream, http(s)://host:port/path"}},
     {}},
    {"keys",
     {},
     {{"keys.ttl", "lifetime of a record (routes may override)"},
      {"keys.in-flight-deadline", "then in_flight turns in_doubt (0: auto)"},
      {"keys.max-live", "live keys in memory at most (503 beyond)"},
      {"keys.decision-cache", "decisions cached for duplicates (0: off)"}},
     {"keys.idle-timeout", "keys.registry-shards", "keys.gateway-actors",
      "keys.decision-cache-bytes", "keys.actor-cache-bytes",
      "alarm.purge-chunk", "alarm.max-interval"}},
    {"store",
     {},
     {{"data-dir", "directory of the SQLite database"},
      {"store.max-pages", "largest database, 4 KiB pages (0: unlimited)"},
      {"backup-to", "write an online backup to this new file, exit"},
      {"accept-wal-loss", "start despite a damaged WAL (loses decisions)"}},
     {"store.max-batch", "store.max-pending", "store.max-pending-bytes",
      "store.checkpoint-pages", "store.wal-writeout-pages",
      "store.on-scheduler"}},
    {"cluster",
     {},
     {{"cluster.id", "this node's id (0: a single node)"},
      {"cluster.peers", "every node: \"ID=HOST:PORT\" (its node link)"},
      {"cluster.initial", "voters that bootstrap (default: every peer)"},
      {"cluster.join", "join an existing cluster instead"},
      {"cluster.tls-ca", "PEM of the cluster CA"},
      {"cluster.tls-certificate", "PEM of this node (node-ID.oncegate)"},
      {"cluster.tls-key", "PEM key of this node"},
      {"cluster.insecure", "plain text between the nodes (warned)"},
      {"cluster.member-sources-only", "refuse non-members on the link port"},
      {"cluster.election-timeout", "raft election timeout"},
      {"cluster.leader-wait", "look for a ready leader (503 beyond)"},
      {"cluster.max-clock-offset", "not ready beyond this clock offset"},
      {"cluster.remote-timeout", "bound on requests to other nodes"}},
     {"cluster.partitions", "cluster.repair-after", "cluster.max-hold",
      "cluster.max-held-bytes", "cluster.heartbeat-timeout",
      "cluster.snapshot-threshold", "cluster.snapshot-trailing",
      "cluster.max-peer-message", "cluster.max-outstanding",
      "cluster.max-entry-bytes", "cluster.max-log-bytes",
      "cluster.max-background", "cluster.max-background-bytes"}},
    {"admin",
     {},
     {{"admin.token-env", "environment variable holding the admin token"},
      {"admin.token-file", "file holding the admin token"},
      {"admin.token", "the token itself (prefer -env or -file)"},
      {"admin.allow-unauthenticated-loopback", "no token on loopback"}},
     {}},
    {"logging",
     {},
     {{"log-level", "trace, debug, info, warn, error or off"},
      {"log-levels", "per component: store=debug,cluster=warn"},
      {"log-format", "text or json"},
      {"log-file", "also log to this file, rotated"},
      {"log-file-size", "rotate at this size"},
      {"log-file-count", "rotated files kept"}},
     {}},
  };
  return groups;
}

bool node_config::own_option(const std::string& name) {
  if (name == "version")
    return true;
  for (auto& g : help_groups()) {
    for (auto& e : g.options)
      if (name == e.name)
        return true;
    for (auto t : g.tuning)
      if (name == t)
        return true;
  }
  return false;
}

std::string node_config::unknown_option() const {
  for (auto& [name, value] : content) {
    auto group = caf::get_if<caf::settings>(&value);
    if (group == nullptr) {
      if (!custom_options_.qualified_name_lookup("global", name))
        return name;
      continue;
    }
    // Routes are sections of their own (`[route.NAME]`), checked by
    // `make_routes`.
    if (name == "route")
      continue;
    for (auto& [key, inner] : *group) {
      auto qualified = name + "." + key;
      if (caf::holds_alternative<caf::settings>(inner)
          || !custom_options_.qualified_name_lookup(name, key))
        return qualified;
    }
  }
  return {};
}

std::string node_config::mistyped_option() const {
  if (config_file_path.empty())
    return {};
  // The file as written, each value as the INI parser read it (CAF's parse
  // kept only the values its options accept).
  auto raw = parse_config_file(config_file_path.c_str());
  if (!raw)
    return {}; // unreadable or malformed: CAF's parse reported it
  auto check = [this](const std::string& group, const std::string& key,
                      const caf::config_value& value) -> std::string {
    auto opt = custom_options_.qualified_name_lookup(group, key);
    if (opt == nullptr || !opt->check(value))
      return {};
    // Never the value: it may be a secret.
    auto type = opt->type_name();
    return (group == "global" ? key : group + "." + key) + " in "
           + config_file_path + ": not a valid "
           + std::string{type.data(), type.size()}
           + " (a string is quoted, a number or duration is not, and a "
             "number must fit its option)";
  };
  for (auto& [name, value] : *raw) {
    auto group = caf::get_if<caf::settings>(&value);
    if (group == nullptr) {
      if (auto problem = check("global", name, value); !problem.empty())
        return problem;
      continue;
    }
    if (name == "route")
      continue; // checked by make_routes
    for (auto& [key, inner] : *group)
      if (auto problem = check(name, key, inner); !problem.empty())
        return problem;
  }
  return {};
}

std::string
node_config::oversized_number(const std::vector<std::string>& args) const {
  static constexpr std::string_view max = "9223372036854775807";
  for (auto& arg : args) {
    if (arg.rfind("--", 0) != 0)
      continue;
    auto eq = arg.find('=');
    if (eq == std::string::npos)
      continue;
    auto name = std::string_view{arg}.substr(2, eq - 2);
    auto value = std::string_view{arg}.substr(eq + 1);
    if (!value.empty() && value.front() == '+')
      value.remove_prefix(1);
    while (value.size() > 1 && value.front() == '0')
      value.remove_prefix(1);
    if (value.empty()
        || value.find_first_not_of("0123456789") != std::string_view::npos)
      continue;
    auto opt = custom_options_.cli_long_name_lookup(name);
    if (opt == nullptr)
      continue;
    auto type = opt->type_name();
    if (type != "uint64" && type != "int64")
      continue;
    if (value.size() > max.size()
        || (value.size() == max.size() && value > max))
      return std::string{name} + " on the command line: a number above "
             + std::string{max} + " (2^63 - 1) fits no option";
  }
  return {};
}

std::string node_config::repeated_in_file() const {
  if (config_file_path.empty())
    return {};
  std::ifstream in{config_file_path};
  auto trim = [](std::string_view x) {
    while (!x.empty() && (x.front() == ' ' || x.front() == '\t'))
      x.remove_prefix(1);
    while (!x.empty()
           && (x.back() == ' ' || x.back() == '\t' || x.back() == '\r'))
      x.remove_suffix(1);
    return x;
  };
  auto name_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  };
  std::map<std::string, int> sections; // header -> line
  std::map<std::string, int> keys;     // section + '\n' + key -> line
  std::string section = "global";
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    auto text = trim(line);
    if (text.empty() || text.front() == ';' || text.front() == '#')
      continue;
    if (text.front() == '[') {
      // A section header; a line of a multi-line list starts with a value.
      auto close = text.find(']');
      if (close == std::string_view::npos)
        continue;
      auto name = trim(text.substr(1, close - 1));
      if (name.empty() || !std::all_of(name.begin(), name.end(), name_char))
        continue;
      section = std::string{name};
      auto [it, fresh] = sections.emplace(section, no);
      if (!fresh)
        return "section [" + section + "] appears twice in "
               + config_file_path + " (lines " + std::to_string(it->second)
               + " and " + std::to_string(no) + ")";
      continue;
    }
    auto eq = text.find('=');
    if (eq == std::string_view::npos)
      continue;
    auto key = trim(text.substr(0, eq));
    if (key.empty() || !std::all_of(key.begin(), key.end(), name_char))
      continue; // a line of a multi-line list: "1=...", 2, ...
    auto [it, fresh] = keys.emplace(section + '\n' + std::string{key}, no);
    if (!fresh)
      return std::string{key} + " is set twice in [" + section + "] of "
             + config_file_path + " (lines " + std::to_string(it->second)
             + " and " + std::to_string(no) + ")";
  }
  return {};
}

std::string node_config::validate() const {
  if (auto name = unknown_option(); !name.empty())
    return "unknown option " + name
           + " (oncegate --long-help lists every option)";
  if (auto problem = mistyped_option(); !problem.empty())
    return "bad value for " + problem;
  if (auto problem = repeated_in_file(); !problem.empty())
    return problem;
  if (data_dir.empty())
    return "data-dir must not be empty";
  if (http_threads < 1 || http_threads > 64)
    return "http-threads must be within 1..64";
  if (body_limit < 1)
    return "http.body-limit must be positive";
  // Durations: a negative one is never meant, and zero where it is no
  // value of its own would spin (the alarm) or refuse everything.
  struct span_rule {
    const char* name;
    caf::timespan value;
    bool zero_ok;
  };
  for (auto& r : {span_rule{"http.header-timeout", header_timeout, false},
                  span_rule{"http.body-timeout", body_timeout, false},
                  span_rule{"http.idle-timeout", idle_timeout, false},
                  span_rule{"http.response-timeout", response_timeout, false},
                  span_rule{"http.shutdown-grace", shutdown_grace, true},
                  span_rule{"http.stall-rescue", stall_rescue, false},
                  span_rule{"alarm.max-interval", alarm_max_interval, false},
                  span_rule{"cluster.remote-timeout", remote_timeout, false},
                  span_rule{"cluster.leader-wait", leader_wait, true},
                  span_rule{"cluster.repair-after", repair_after, true},
                  span_rule{"cluster.max-hold", max_hold, true}})
    if (r.value < caf::timespan::zero()
        || (!r.zero_ok && r.value == caf::timespan::zero()))
      return std::string{r.name}
             + (r.zero_ok ? " must not be negative" : " must be positive");
  // Below a millisecond nothing can be measured; a day is far beyond any
  // signature tolerance (a drill that steps clocks by hours raises it).
  if (max_clock_offset < std::chrono::milliseconds(1)
      || max_clock_offset > std::chrono::hours(24))
    return "cluster.max-clock-offset must be within 1ms..24h";
  if (ttl <= caf::timespan::zero())
    return "keys.ttl must be positive";
  if (std::chrono::duration_cast<std::chrono::milliseconds>(ttl).count()
      > record_bounds::ttl_ms)
    return "keys.ttl must be at most ten years (87840h)";
  if (key_idle_timeout <= caf::timespan::zero())
    return "keys.idle-timeout must be positive";
  if (max_live_keys < 1)
    return "keys.max-live must be positive";
  if (registry_shards < 1 || registry_shards > 256)
    return "keys.registry-shards must be within 1..256";
  if (gateway_actors < 1 || gateway_actors > 256)
    return "keys.gateway-actors must be within 1..256";
  if (max_batch < 1 || max_pending < max_batch)
    return "store.max-batch must be positive and at most store.max-pending";
  if (wal_writeout_pages > std::numeric_limits<uint32_t>::max())
    return "store.wal-writeout-pages must be at most 4294967295";
  if (in_flight_deadline < caf::timespan::zero())
    return "keys.in-flight-deadline must not be negative";
  if (purge_chunk < 1)
    return "alarm.purge-chunk must be positive";
  if (max_connections < 1)
    return "http.max-connections must be positive";
  if (forwarded_limit < 1)
    return "http.forwarded-limit must be positive";
  if (tls_certificate.empty() != tls_key.empty())
    return "http.tls-certificate and http.tls-key go together: set both "
           "(HTTPS) or neither (plain HTTP)";
  if (tls_handshake_timeout <= caf::timespan::zero())
    return "http.tls-handshake-timeout must be positive";
  if (clustered()) {
    if (cluster_peers.empty())
      return "cluster.peers must list every node when cluster.id is set";
    if (heartbeat_timeout <= caf::timespan::zero()
        || election_timeout <= heartbeat_timeout)
      return "cluster.election-timeout must exceed cluster.heartbeat-timeout";
    if (max_outstanding < 1)
      return "cluster.max-outstanding must be positive";
    if (cluster_partitions < 1 || cluster_partitions > link::max_groups)
      return "cluster.partitions must be within 1..256";
    // A full entry must fit beside the entries a snapshot keeps behind it
    // (about a quarter of the bound), or it could wait for nothing.
    if (max_log_bytes > 0 && max_entry_bytes > max_log_bytes / 4)
      return "cluster.max-entry-bytes must be at most a quarter of "
             "cluster.max-log-bytes";
    if (max_hold > std::chrono::hours(1))
      return "cluster.max-hold must be at most 1h";
    if (snapshot_threshold < 1)
      return "cluster.snapshot-threshold must be positive";
    if (max_peer_message < 4096 || max_peer_message > (1u << 30))
      return "cluster.max-peer-message must be within 4096..1073741824";
    bool any_tls = !cluster_tls_ca.empty() || !cluster_tls_certificate.empty()
                   || !cluster_tls_key.empty();
    if (cluster_insecure && any_tls)
      return "cluster.insecure=true and cluster.tls-* are both set: choose "
             "one";
    if (!cluster_insecure
        && (cluster_tls_ca.empty() || cluster_tls_certificate.empty()
            || cluster_tls_key.empty()))
      return "a cluster talks over mutual TLS: set cluster.tls-ca, "
             "cluster.tls-certificate and cluster.tls-key "
             "(scripts/cluster-certs.sh DIR ID... makes them), or "
             "cluster.insecure=true where nobody else can reach the ports";
  }
  return log::check(log_opts());
}

node_options node_config::node_opts() const {
  node_options res;
  res.data_dir = data_dir;
  res.store.checkpoint_pages = static_cast<uint32_t>(checkpoint_pages);
  res.store.wal_writeout_pages = static_cast<uint32_t>(wal_writeout_pages);
  res.store.max_pages = max_pages;
  res.store.accept_wal_loss = accept_wal_loss;
  res.detached_store = !store_on_scheduler;
  res.commit_thread = store_on_scheduler;
  res.store_actor.max_batch = static_cast<uint32_t>(max_batch);
  res.store_actor.max_pending = static_cast<uint32_t>(max_pending);
  res.store_actor.max_pending_bytes = max_pending_bytes;
  res.registry.max_live_keys = max_live_keys;
  res.registry.key.idle_timeout = key_idle_timeout;
  res.registry.key.max_cached_answer = key_cache_bytes;
  res.registry_shards = static_cast<uint32_t>(registry_shards);
  res.alarm.chunk = static_cast<uint32_t>(purge_chunk);
  res.alarm.max_interval = alarm_max_interval;
  return res;
}

log::log_options node_config::log_opts() const {
  log::log_options res;
  res.level = log_level;
  res.levels = log_levels;
  res.format = log_format;
  res.file = log_file;
  res.file_size = log_file_size;
  res.file_count = log_file_count;
  return res;
}

http_server_options node_config::http_opts() const {
  http_server_options res;
  res.host = http_host;
  res.port = http_port;
  res.threads = static_cast<unsigned>(http_threads);
  res.body_limit = body_limit;
  res.header_limit = header_limit;
  res.header_timeout = to_ms(header_timeout);
  res.body_timeout = to_ms(body_timeout);
  res.idle_timeout = to_ms(idle_timeout);
  res.response_timeout = to_ms(response_timeout);
  res.max_connections = max_connections;
  res.shutdown_grace = to_ms(shutdown_grace);
  res.stall_rescue = std::max(to_ms(stall_rescue), std::chrono::milliseconds{1});
  res.tls_handshake_timeout = to_ms(tls_handshake_timeout);
  return res;
}

std::optional<std::shared_ptr<const server_tls>>
node_config::listener_tls(std::string& error) const {
  if (tls_certificate.empty() && tls_key.empty())
    return std::shared_ptr<const server_tls>{};
  server_tls_files files{tls_certificate, tls_key};
  auto culprit = server_tls_files::part::certificate;
  auto res = server_tls::load(files, error, culprit);
  if (!res) {
    error = (culprit == server_tls_files::part::certificate
               ? "http.tls-certificate: "
               : "http.tls-key: ")
            + error;
    return std::nullopt;
  }
  return res;
}

std::optional<webhook_options>
node_config::webhook_opts(const env_lookup& env, std::string& error) const {
  webhook_options res;
  route_defaults defaults;
  defaults.ttl_ms = to_ms(ttl).count();
  defaults.body_limit = body_limit;
  defaults.default_upstream = upstream;
  auto section = caf::get_if<caf::settings>(&content, "route");
  auto routes = make_routes(section ? &*section : nullptr, defaults, env,
                            error);
  if (!routes)
    return std::nullopt;
  // Every partition's leader enforces its share of a cap: a share of 0
  // would refuse every new signal of that partition.
  if (clustered())
    for (auto& r : routes->routes)
      if (r.guards.max_new_per_minute != 0
          && r.guards.max_new_per_minute
               < static_cast<uint32_t>(cluster_partitions)) {
        error = "route." + r.name + ".max-new-per-minute: at least "
                "cluster.partitions ("
                + std::to_string(cluster_partitions)
                + "): each partition enforces its share of the cap";
        return std::nullopt;
      }
  res.routes = std::move(*routes);
  res.admin.token = admin_token;
  res.decision_cache = decision_cache;
  res.decision_cache_bytes = decision_cache_bytes;
  if (!admin_token_env.empty()) {
    auto val = env(admin_token_env);
    if (!val || val->empty()) {
      error = "admin.token-env: environment variable " + admin_token_env
              + " is not set";
      return std::nullopt;
    }
    res.admin.token = *val;
  }
  if (!admin_token_file.empty()) {
    // The first line, its CR dropped (a file written on Windows): the rule
    // of the CLI's --token-file, so both may read one file.
    std::ifstream in{admin_token_file};
    std::string tok;
    if (!in || !std::getline(in, tok)) {
      error = "admin.token-file: cannot read a token from "
              + admin_token_file;
      return std::nullopt;
    }
    if (!tok.empty() && tok.back() == '\r')
      tok.pop_back();
    if (tok.empty()) {
      error = "admin.token-file: the first line of " + admin_token_file
              + " is empty";
      return std::nullopt;
    }
    res.admin.token = tok;
  }
  // A token no header can carry would lock every admin client out: spaces
  // at either end are dropped from a header value, control characters
  // cannot be sent.
  if (!res.admin.token.empty()) {
    auto& tok = res.admin.token;
    bool sendable = tok.front() != ' ' && tok.front() != '\t'
                    && tok.back() != ' ' && tok.back() != '\t';
    for (char c : tok)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        sendable = false;
    if (!sendable) {
      error = "the admin token (admin.token, admin.token-env or "
              "admin.token-file) starts or ends with a space or holds a "
              "control character: no HTTP header can carry it";
      return std::nullopt;
    }
  }
  res.admin.loopback_listener = is_loopback_address(http_host);
  res.admin.allow_unauthenticated_loopback =
    admin_allow_unauthenticated_loopback;
  for (auto& text : trusted_proxies) {
    auto net = parse_cidr(text);
    if (!net) {
      error = "http.trusted-proxies: \"" + text
              + "\" is not an address or network (e.g. 10.0.0.0/8, ::1)";
      return std::nullopt;
    }
    res.proxies.trusted.push_back(std::move(*net));
  }
  res.proxies.headers.clear();
  for (auto& name : forwarded_headers) {
    auto kind = parse_forwarded_header(name);
    if (!kind
        || std::find(res.proxies.headers.begin(), res.proxies.headers.end(),
                     *kind)
             != res.proxies.headers.end()) {
      error = "http.forwarded-headers: \"" + name
              + "\" is unknown or listed twice (x-forwarded-for, forwarded)";
      return std::nullopt;
    }
    res.proxies.headers.push_back(*kind);
  }
  if (res.proxies.headers.empty()) {
    error = "http.forwarded-headers must name x-forwarded-for or forwarded";
    return std::nullopt;
  }
  res.proxies.max_bytes = forwarded_limit;
  return res;
}

void node_config::check_admin(const webhook_options& web,
                              std::vector<std::string>& warnings) const {
  if (!web.admin.allow_unauthenticated_loopback)
    return;
  constexpr auto name = "admin.allow-unauthenticated-loopback";
  if (!web.admin.token.empty())
    warnings.push_back(std::string{name}
                       + " has no effect: an admin token is configured, and "
                         "every admin request needs it");
  else if (!web.admin.loopback_listener)
    warnings.push_back(std::string{name} + " has no effect on the "
                       "non-loopback listener " + http_host
                       + ": admin changes need an admin token");
  else
    warnings.push_back(std::string{name}
                       + " is set: every local user and process can "
                         "release and complete keys and change the cluster "
                         "without a token (configure admin.token-env or "
                         "admin.token-file instead)");
}

namespace {

// How long the senders of signed routes retry a delivery, from their docs:
// Standard Webhooks / Svix about 27.5 h (attempts up to 10 h apart);
// GitHub lets a delivery be redelivered for 3 days.
int64_t retry_horizon_ms(auth_mode mode) {
  constexpr int64_t hour = 3600 * 1000;
  switch (mode) {
    case auth_mode::standard_webhooks:
      return 28 * hour;
    case auth_mode::github:
      return 72 * hour;
    default:
      return 0;
  }
}

std::string human_ms(int64_t ms) {
  if (ms % (3600 * 1000) == 0)
    return std::to_string(ms / (3600 * 1000)) + "h";
  if (ms % 1000 == 0)
    return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

} // namespace

std::string
node_config::check_route_ttls(const webhook_options& web,
                              std::vector<std::string>& warnings) const {
  auto http_ms = to_ms(response_timeout).count();
  for (auto& r : web.routes.routes) {
    auto prefix = "route." + r.name + ".ttl (" + human_ms(r.ttl_ms) + ")";
    // Without an upstream the record is completed by its claim: nothing
    // runs that the TTL could cut short.
    if (r.upstream && r.ttl_ms <= http_ms)
      return prefix + " must exceed http.response-timeout ("
             + human_ms(http_ms)
             + "): a record could expire while its request still runs";
    if (r.upstream) {
      auto work = r.upstream->connect_timeout.count()
                  + r.upstream->response_timeout.count();
      if (r.ttl_ms <= work)
        return prefix + " must exceed the upstream's connect + response "
               "timeouts (" + human_ms(work)
               + "): a record could expire while its forward still runs";
      // A forward that can outlast the sender's answer ends in "in doubt"
      // whenever the upstream is slow (the response timeout answers 504
      // while it runs): refused, unless the route answers 202 first.
      bool answers_first = r.delivery.async
                           || (r.respond_after.count() > 0
                               && r.respond_after.count() < http_ms);
      if (!answers_first && work > http_ms)
        return "route." + r.name + ": upstream-connect-timeout + "
               "upstream-timeout (" + human_ms(work)
               + ") must not exceed http.response-timeout ("
               + human_ms(http_ms)
               + "): the sender would be answered before the upstream; "
                 "lower the upstream's timeouts, raise "
                 "http.response-timeout, or answer 202 first "
                 "(respond-after, delivery = \"async\")";
    }
    if (auto horizon = retry_horizon_ms(r.auth); r.ttl_ms < horizon)
      warnings.push_back(
        prefix + " is shorter than the " + to_string(r.auth)
        + " sender's retry horizon (about " + human_ms(horizon)
        + "): a retry after the TTL executes again; see docs/operations.md");
  }
  return {};
}

int64_t node_config::in_flight_deadline_ms(const webhook_options& web) const {
  if (in_flight_deadline > caf::timespan::zero())
    return to_ms(in_flight_deadline).count();
  int64_t work = to_ms(response_timeout).count();
  for (auto& r : web.routes.routes)
    if (r.upstream)
      work = std::max<int64_t>(work, r.upstream->connect_timeout.count()
                                       + r.upstream->response_timeout.count());
  return work + 10'000;
}

routed_service_options node_config::service_opts() const {
  routed_service_options res;
  res.service.actors = gateway_actors;
  res.leader_wait = leader_wait;
  res.max_background = max_background;
  res.max_background_bytes = max_background_bytes;
  return res;
}

clock_offset_options node_config::clock_offset_opts() const {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  clock_offset_options res;
  res.max_offset_ms = duration_cast<milliseconds>(max_clock_offset).count();
  // An idle leader stamps an entry at least every alarm.max-interval (its
  // purge): keep three of them.
  res.window_ms = std::max<int64_t>(
    res.window_ms, 3 * duration_cast<milliseconds>(alarm_max_interval).count());
  return res;
}

std::optional<cluster::cluster_options>
node_config::cluster_opts(std::string& error) const {
  cluster::cluster_options res;
  res.id = cluster_id;
  for (auto& text : cluster_peers) {
    auto p = cluster::parse_peer(text, error);
    if (!error.empty()) {
      error = "cluster.peers: " + error;
      return std::nullopt;
    }
    for (auto& other : res.peers)
      if (other.id == p.id) {
        error = "cluster.peers: id " + std::to_string(p.id) + " twice";
        return std::nullopt;
      }
    res.peers.push_back(std::move(p));
  }
  if (std::none_of(res.peers.begin(), res.peers.end(),
                   [&](const cluster::peer& p) { return p.id == res.id; })) {
    error = "cluster.id " + std::to_string(res.id)
            + " is not among cluster.peers";
    return std::nullopt;
  }
  res.join = cluster_join;
  for (auto id : cluster_initial) {
    if (std::none_of(res.peers.begin(), res.peers.end(),
                     [&](const cluster::peer& p) { return p.id == id; })) {
      error = "cluster.initial: id " + std::to_string(id)
              + " is not among cluster.peers";
      return std::nullopt;
    }
    res.initial.push_back(id);
  }
  res.raft.election_timeout_ms = static_cast<uint32_t>(
    to_ms(election_timeout).count());
  res.raft.heartbeat_timeout_ms = static_cast<uint32_t>(
    to_ms(heartbeat_timeout).count());
  res.raft.snapshot_threshold = static_cast<uint32_t>(snapshot_threshold);
  res.raft.snapshot_trailing = static_cast<uint32_t>(snapshot_trailing);
  res.raft.repair_after_ms = static_cast<uint32_t>(to_ms(repair_after).count());
  res.store.max_batch = static_cast<uint32_t>(max_batch);
  res.store.max_pending = static_cast<uint32_t>(max_pending);
  res.store.max_pending_bytes = max_pending_bytes;
  res.store.max_entry_bytes = max_entry_bytes;
  res.raft.max_log_bytes = max_log_bytes;
  res.raft.max_held_bytes = max_held_bytes;
  res.raft.max_hold_ms = static_cast<uint32_t>(to_ms(max_hold).count());
  res.store.max_outstanding = static_cast<uint32_t>(max_outstanding);
  res.partitions = static_cast<uint16_t>(cluster_partitions);
  res.remote_timeout = remote_timeout;
  res.bridge_actors = gateway_actors;
  res.raft.link.member_sources_only = member_sources_only;
  res.raft.link.max_frame_bytes = static_cast<uint32_t>(max_peer_message);
  res.raft.link.max_served_bytes = std::max<uint64_t>(
    res.raft.link.max_served_bytes, res.raft.link.max_frame_bytes);
  if (cluster_tls()) {
    link::tls_files tls;
    tls.ca_file = cluster_tls_ca;
    tls.cert_file = cluster_tls_certificate;
    tls.key_file = cluster_tls_key;
    res.raft.link.tls = std::move(tls);
  }
  return res;
}

} // namespace oncegate::gateway
