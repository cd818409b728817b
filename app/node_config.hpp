#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>

#include "actors/node.hpp"
#include "common/clock_offset.hpp"
#include "common/logging.hpp"
#include "routing/routed_service.hpp"
#include "http/http_server.hpp"
#include "http/server_tls.hpp"
#include "api/routes.hpp"
#include "api/webhook_handler.hpp"

namespace oncegate::gateway {

/// One group of `--help`, named by what an operator configures there.
struct help_group {
  /// One option with a few words (its full description is `--long-help`'s).
  struct entry {
    /// The full name: `http-port`, `keys.ttl`.
    const char* name;
    const char* words;
  };
  const char* title;
  /// Extra lines under the title (route sections are no options).
  std::vector<const char*> notes;
  std::vector<entry> options;
  /// Tuning options of the group: named only, `--long-help` explains them.
  std::vector<const char*> tuning;
};

/// The node's configuration: CAF's config system, so every option can be
/// set in the INI file (`--config-file=FILE`) and overridden on the command
/// line. Node basics are top-level flags (`--http-port=8080`), tuning lives
/// in groups (`--keys.ttl=72h`, `[keys]` in the INI file).
class node_config : public caf::actor_system_config {
public:
  node_config();

  /// Checks values that CAF's types cannot express (ranges, non-empty).
  /// Returns an error message naming the option, or an empty string.
  std::string validate() const;

  /// The first key of the config file that names no option (e.g. a typo,
  /// `[keys] ttll=1h`), as `group.key`; empty when there is none.
  std::string unknown_option() const;

  /// The first key of the config file whose value has the wrong type for
  /// its option (`[keys] ttl="1h"`, `[global] http-port=99999`), with the
  /// type wanted; empty when there is none. CAF 0.17 drops such a value
  /// without a word and keeps the default: a mistyped `[admin] token`
  /// would leave the admin API without one.
  std::string mistyped_option() const;

  /// The first section header or key that the config file gives twice
  /// (`[route.tv]` twice, `ttl` twice in `[keys]`), with both lines;
  /// empty when there is none. CAF keeps the last silently: a second
  /// `[route.tv]` with `auth="none"` turned a route's authentication off.
  std::string repeated_in_file() const;

  /// The first command-line argument (`--name=value`) that gives a 64-bit
  /// integer option a number above 2^63 - 1, as a message naming the
  /// option; empty when there is none. CAF 0.17 keeps integers as int64
  /// and turns such a number into 0 on the command line without a word
  /// (`--store.max-pending-bytes=18446744073709551615` became 0); the
  /// config file's parser refuses it already.
  std::string oversized_number(const std::vector<std::string>& args) const;

  /// Every option this node accepts (CAF's own included).
  const caf::config_option_set& options() const {
    return custom_options_;
  }

  /// The groups of `--help`: each of oncegate's own options is in exactly
  /// one of them (as an entry or a tuning option); CAF's are in none.
  static const std::vector<help_group>& help_groups();

  /// Whether `name` (full: `http.tls-key`) is one of oncegate's own
  /// options (in `help_groups`), not CAF's.
  static bool own_option(const std::string& name);

  node_options node_opts() const;
  log::log_options log_opts() const;
  /// The listener's options. Its TLS context is `listener_tls`'s.
  http_server_options http_opts() const;

  /// The listener's TLS context from `http.tls-certificate` and
  /// `http.tls-key`: null without them; nothing, with `error` naming the
  /// option and the file, when they do not load.
  std::optional<std::shared_ptr<const server_tls>>
  listener_tls(std::string& error) const;
  routed_service_options service_opts() const;

  /// How the node measures its clock against the cluster's
  /// (`cluster.max-clock-offset`; the window outlasts a few idle purges).
  clock_offset_options clock_offset_opts() const;

  /// True when `cluster.id` is set: the node runs Raft with `cluster.peers`.
  bool clustered() const {
    return cluster_id != 0;
  }

  /// The cluster part of the configuration; nothing (with `error` naming
  /// the key) when a peer does not parse or this node is not among them.
  std::optional<cluster::cluster_options>
  cluster_opts(std::string& error) const;

  /// Routes (`[route.NAME]` sections) and admin access; resolves secrets
  /// from the environment and files. Nothing, with `error` naming the key,
  /// when a route or secret is invalid.
  std::optional<webhook_options> webhook_opts(const env_lookup& env,
                                              std::string& error) const;

  /// Checks each route's TTL against the work it bounds: a TTL shorter
  /// than the upstream's connect + response timeouts, or than
  /// `http.response-timeout`, could expire a record while its first request
  /// still runs; a route whose upstream's timeouts exceed
  /// `http.response-timeout` (and that answers no 202 first) would answer
  /// its sender before the upstream. Returns an error naming the route, or
  /// an empty string.
  /// Shorter-than-advised TTLs of signed routes (the sender retries for
  /// longer) are added to `warnings`.
  std::string check_route_ttls(const webhook_options& web,
                               std::vector<std::string>& warnings) const;

  /// Adds a warning to `warnings` when
  /// `admin.allow-unauthenticated-loopback` is set: what it opens, or that
  /// it has no effect (a token is configured, the listener is not
  /// loopback).
  void check_admin(const webhook_options& web,
                   std::vector<std::string>& warnings) const;

  /// How long after its claim an in-flight record has outlived every
  /// forward: `keys.in-flight-deadline`, or (0) the longest upstream
  /// connect + response timeout (at least `http.response-timeout`) plus a
  /// margin for the commits around it.
  int64_t in_flight_deadline_ms(const webhook_options& web) const;

  // Top-level options.
  std::string http_host = "127.0.0.1";
  uint16_t http_port = 8080;
  std::string data_dir = "./data";
  std::string log_level = "info";
  std::string log_levels;
  std::string log_format = "text";
  std::string log_file;
  size_t log_file_size = 64 * 1024 * 1024;
  size_t log_file_count = 5;
  size_t http_threads = 1;
  std::string upstream;
  bool version = false;
  std::string backup_to;
  bool accept_wal_loss = false;

  // Every default below is the one of the option struct of the component
  // it configures (where it is documented and tested); none is written
  // twice.

  // [http]
  size_t body_limit = http_server_options{}.body_limit;
  size_t header_limit = http_server_options{}.header_limit;
  caf::timespan header_timeout = http_server_options{}.header_timeout;
  caf::timespan body_timeout = http_server_options{}.body_timeout;
  caf::timespan idle_timeout = http_server_options{}.idle_timeout;
  caf::timespan response_timeout = http_server_options{}.response_timeout;
  caf::timespan stall_rescue = http_server_options{}.stall_rescue;
  size_t max_connections = http_server_options{}.max_connections;
  caf::timespan shutdown_grace = http_server_options{}.shutdown_grace;
  std::string tls_certificate;
  std::string tls_key;
  caf::timespan tls_handshake_timeout =
    http_server_options{}.tls_handshake_timeout;
  std::vector<std::string> trusted_proxies;
  std::vector<std::string> forwarded_headers =
    to_strings(proxy_options{}.headers);
  size_t forwarded_limit = proxy_options{}.max_bytes;

  // [keys]
  caf::timespan ttl = std::chrono::milliseconds(route_defaults{}.ttl_ms);
  caf::timespan key_idle_timeout = key_actor_options{}.idle_timeout;
  size_t max_live_keys = registry_options{}.max_live_keys;
  size_t registry_shards = node_options{}.registry_shards;
  size_t gateway_actors = service_options{}.actors;
  size_t decision_cache = webhook_options{}.decision_cache;
  size_t decision_cache_bytes = webhook_options{}.decision_cache_bytes;
  size_t key_cache_bytes = key_actor_options{}.max_cached_answer;
  caf::timespan in_flight_deadline = caf::timespan::zero();

  // [store]
  size_t max_batch = persistence::store_actor_options{}.max_batch;
  size_t max_pending = persistence::store_actor_options{}.max_pending;
  uint64_t max_pending_bytes =
    persistence::store_actor_options{}.max_pending_bytes;
  size_t checkpoint_pages = persistence::store_options{}.checkpoint_pages;
  size_t wal_writeout_pages =
    persistence::store_options{}.wal_writeout_pages;
  size_t max_pages = persistence::store_options{}.max_pages;
  /// `store.on-scheduler`. A cluster node's store never waits for its
  /// disk (the Raft log is the durable copy, written on libraft's thread),
  /// and a thread of its own cost two thread switches per decision there
  /// (docs/benchmarks.md, session 17). A single node's commits then run on
  /// the HTTP thread that asks while it is alone, else on the sink's
  /// commit thread, never on a worker (`persistence::local_sink`;
  /// session 24). Off: the store on a thread of its own, which commits.
  bool store_on_scheduler = true;

  // [admin]
  std::string admin_token;
  std::string admin_token_env;
  std::string admin_token_file;
  bool admin_allow_unauthenticated_loopback =
    admin_options{}.allow_unauthenticated_loopback;

  // [cluster]
  size_t cluster_id = 0;
  std::vector<std::string> cluster_peers;
  bool cluster_join = false;
  std::vector<size_t> cluster_initial;
  caf::timespan election_timeout =
    std::chrono::milliseconds(cluster::raft_node_options{}.election_timeout_ms);
  caf::timespan heartbeat_timeout = std::chrono::milliseconds(
    cluster::raft_node_options{}.heartbeat_timeout_ms);
  size_t snapshot_threshold = cluster::raft_node_options{}.snapshot_threshold;
  size_t snapshot_trailing = cluster::raft_node_options{}.snapshot_trailing;
  caf::timespan remote_timeout = cluster::cluster_options{}.remote_timeout;
  caf::timespan leader_wait = routed_service_options{}.leader_wait;
  size_t max_background = routed_service_options{}.max_background;
  uint64_t max_entry_bytes = 1024 * 1024;
  uint64_t max_log_bytes = cluster::raft_node_options{}.max_log_bytes;
  uint64_t max_held_bytes = cluster::raft_node_options{}.max_held_bytes;
  caf::timespan max_hold = std::chrono::milliseconds(
    cluster::raft_node_options{}.max_hold_ms);
  size_t max_background_bytes =
    routed_service_options{}.max_background_bytes;
  size_t max_outstanding = 4;
  /// Raft groups the keys are spread over (fixed when the cluster is
  /// created; stored in the data dir and checked at every start).
  size_t cluster_partitions = cluster::cluster_options{}.partitions;
  caf::timespan repair_after = std::chrono::milliseconds(
    cluster::raft_node_options{}.repair_after_ms);
  /// Mutual TLS between the nodes (Raft and the nodes' actors): the
  /// cluster CA, this node's certificate and key (PEM files).
  std::string cluster_tls_ca;
  std::string cluster_tls_certificate;
  std::string cluster_tls_key;
  /// Run the cluster in plain text (warned at every start).
  bool cluster_insecure = false;
  bool member_sources_only = link::options{}.member_sources_only;
  size_t max_peer_message = link::options{}.max_frame_bytes;
  /// Beyond this offset from the cluster's clock a node is not ready and
  /// answers signed deliveries it refuses only for their age with 503.
  caf::timespan max_clock_offset = std::chrono::milliseconds(
    clock_offset_options{}.max_offset_ms);

  /// Whether the nodes talk over TLS (a cluster that is not insecure).
  bool cluster_tls() const {
    return clustered() && !cluster_insecure;
  }

  // [alarm]
  size_t purge_chunk = alarm_options{}.chunk;
  caf::timespan alarm_max_interval = alarm_options{}.max_interval;
};

} // namespace oncegate::gateway
