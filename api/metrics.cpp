#include "api/metrics.hpp"
#include "common/enum_text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "http/http_server.hpp"

namespace oncegate::gateway {

namespace {

// The shortest text that reads back as `x`, laid out as Go's
// strconv.FormatFloat(x, 'g', -1, 64) does, which the Prometheus client
// libraries print (Python's through floatToGoString): `5e-05`, `0.0001`,
// `0.30000000000000004`, `100000`, `1e+06`. `%.17g` printed 5e-05 as
// `5.0000000000000002e-05`. The text format spells the special values
// `+Inf`, `-Inf` and `NaN`.
std::string number(double x) {
  if (std::isnan(x))
    return "NaN";
  if (std::isinf(x))
    return x > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto sci = std::to_chars(buf, buf + sizeof(buf), x,
                           std::chars_format::scientific);
  // `d[.ddd]e±XX`: the exponent, its sign always written.
  auto e = std::find(buf, sci.ptr, 'e');
  int exponent = 0;
  for (auto p = e + 2; p < sci.ptr; ++p)
    exponent = exponent * 10 + (*p - '0');
  if (e + 1 < sci.ptr && e[1] == '-')
    exponent = -exponent;
  // %g's rule with Go's precision 6 for the shortest form; in between the
  // fixed form is short (at most 4 zeros after the point, 6 digits before).
  if (exponent < -4 || exponent >= 6)
    return std::string(buf, sci.ptr);
  auto fixed = std::to_chars(buf, buf + sizeof(buf), x,
                             std::chars_format::fixed);
  return std::string(buf, fixed.ptr);
}

void header(std::string& out, const char* name, const char* type,
            const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, const char* name, uint64_t value) {
  out += name;
  out += ' ';
  out += std::to_string(value);
  out += '\n';
}

void metric(std::string& out, const char* name, const char* type,
            const char* help, uint64_t value) {
  header(out, name, type, help);
  sample(out, name, value);
}

// Renders cumulative buckets from per-bucket counts.
void render_histogram(std::string& out, const char* name, const char* help,
                      const std::vector<double>& bounds,
                      const std::vector<uint64_t>& counts, double sum,
                      uint64_t count) {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += i < counts.size() ? counts[i] : 0;
    out += name;
    out += "_bucket{le=\"";
    out += number(bounds[i]);
    out += "\"} ";
    out += std::to_string(cumulative);
    out += '\n';
  }
  out += name;
  out += "_bucket{le=\"+Inf\"} ";
  out += std::to_string(count);
  out += '\n';
  out += name;
  out += "_sum ";
  out += number(sum);
  out += '\n';
  out += name;
  out += "_count ";
  out += std::to_string(count);
  out += '\n';
}

} // namespace

constexpr const char* outcome_names[] = {
  "new",         "duplicate",   "mismatch", "rejected_auth", "forbidden",
  "bad_request", "unavailable", "stale",    "rate_limited",  "paused"};
static_assert(enum_table_covers(outcome::paused, outcome_names));

const char* to_string(outcome x) {
  return enum_text(x, outcome_names);
}

gateway_metrics::gateway_metrics(std::vector<std::string> route_names)
  : routes_(std::move(route_names)),
    counts_(new std::atomic<uint64_t>[routes_.size() * outcome_count]),
    upstream_(new std::atomic<uint64_t>[routes_.size() * 3]),
    reconcile_skipped_(new std::atomic<uint64_t>[routes_.size()]),
    bounds_(histogram::request_bounds()),
    buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i < routes_.size() * outcome_count; ++i)
    counts_[i] = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i)
    buckets_[i] = 0;
  for (size_t i = 0; i < routes_.size() * 3; ++i)
    upstream_[i] = 0;
  for (size_t i = 0; i < routes_.size(); ++i)
    reconcile_skipped_[i] = 0;
}

void gateway_metrics::count_reconcile_skipped(std::size_t route) {
  reconcile_skipped_[route].fetch_add(1, std::memory_order_relaxed);
}

void gateway_metrics::count_upstream(std::size_t route, std::size_t result) {
  upstream_[route * 3 + result].fetch_add(1, std::memory_order_relaxed);
}

void gateway_metrics::count(std::size_t route, outcome x) {
  counts_[route * outcome_count + static_cast<size_t>(x)].fetch_add(
    1, std::memory_order_relaxed);
}

uint64_t gateway_metrics::value(std::size_t route, outcome x) const {
  return counts_[route * outcome_count + static_cast<size_t>(x)].load();
}

void gateway_metrics::observe_request(double seconds) {
  size_t i = 0;
  while (i < bounds_.size() && seconds > bounds_[i])
    ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  latency_count_.fetch_add(1, std::memory_order_relaxed);
  latency_sum_ns_.fetch_add(static_cast<uint64_t>(seconds * 1e9),
                            std::memory_order_relaxed);
}

std::string gateway_metrics::render(const node_metrics& node) const {
  std::string out;
  out.reserve(8192);
  header(out, "oncegate_decisions_total", "counter",
         "Webhook requests by route and outcome.");
  for (size_t r = 0; r < routes_.size(); ++r)
    for (size_t o = 0; o < outcome_count; ++o) {
      out += "oncegate_decisions_total{route=\"";
      out += routes_[r];
      out += "\",outcome=\"";
      out += to_string(static_cast<outcome>(o));
      out += "\"} ";
      out += std::to_string(counts_[r * outcome_count + o].load());
      out += '\n';
    }
  header(out, "oncegate_upstream_results_total", "counter",
         "Forwarded requests by route and result: response, not_sent "
         "(released), maybe_sent (in doubt).");
  static constexpr const char* results[] = {"response", "not_sent",
                                            "maybe_sent"};
  for (size_t r = 0; r < routes_.size(); ++r)
    for (size_t k = 0; k < 3; ++k) {
      out += "oncegate_upstream_results_total{route=\"";
      out += routes_[r];
      out += "\",result=\"";
      out += results[k];
      out += "\"} ";
      out += std::to_string(upstream_[r * 3 + k].load());
      out += '\n';
    }
  header(out, "oncegate_reconcile_skipped_total", "counter",
         "In-doubt keys due for reconciliation that were not asked about: "
         "a key that is not safe in a URL path stays in doubt for the "
         "operator (counted at each pass).");
  for (size_t r = 0; r < routes_.size(); ++r) {
    out += "oncegate_reconcile_skipped_total{route=\"";
    out += routes_[r];
    out += "\"} ";
    out += std::to_string(reconcile_skipped_[r].load());
    out += '\n';
  }
  std::vector<uint64_t> counts(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i)
    counts[i] = buckets_[i].load();
  render_histogram(out, "oncegate_request_duration_seconds",
                   "Time from a complete webhook request to its response.",
                   bounds_, counts, latency_sum_ns_.load() / 1e9,
                   latency_count_.load());
  auto transport = transport_counters();
  metric(out, "oncegate_http_internal_errors_total", "counter",
         "Requests answered 500 because the handler threw or its answer "
         "could not be sent (a bug: see http.internal_error in the log).",
         transport.internal_errors);
  metric(out, "oncegate_http_accept_errors_total", "counter",
         "Failed accepts of new connections (out of descriptors and "
         "similar); the listener backs off up to 1 s between tries.",
         transport.accept_errors);
  metric(out, "oncegate_metrics_complete", "gauge",
         "1 when every actor answered the last scrape in time.",
         node.complete ? 1 : 0);
  metric(out, "oncegate_live_key_actors", "gauge",
         "Key actors in memory.", node.registry.live);
  metric(out, "oncegate_key_actors_spawned_total", "counter",
         "Key actors created (cold starts included).", node.registry.spawned);
  metric(out, "oncegate_key_actors_passivated_total", "counter",
         "Idle key actors that left memory.", node.registry.passivated);
  metric(out, "oncegate_keys_rejected_total", "counter",
         "Claims refused because the live key limit was reached.",
         node.registry.rejected);
  metric(out, "oncegate_store_commits_total", "counter",
         "Store transactions committed.", node.store.commits);
  metric(out, "oncegate_store_failed_commits_total", "counter",
         "Store transactions that failed (their requests got 503).",
         node.store.failed_commits);
  metric(out, "oncegate_store_operations_total", "counter",
         "Claims, updates and purges made durable.", node.store.committed_ops);
  auto& cs = node.store.commit_seconds;
  render_histogram(out, "oncegate_store_commit_duration_seconds",
                   "Store transaction time, BEGIN to end of COMMIT (fsync).",
                   cs.bounds, cs.counts, cs.sum, cs.count);
  auto& bs = node.store.batch_size;
  render_histogram(out, "oncegate_store_batch_size",
                   "Operations per store transaction (group commit).",
                   bs.bounds, bs.counts, bs.sum, bs.count);
  // Every configured route appears (0 when none), so an alert on
  // `oncegate_records{state="in_doubt"} > 0` needs no absent() guard.
  header(out, "oncegate_records", "gauge",
         "Unsettled records by route and state (in_flight: forward "
         "running; in_doubt: the upstream may have acted, an operator must "
         "settle it; queued: accepted, its delivery is retried; failed: "
         "not delivered by its deadline, an operator may redeliver it). "
         "Counted at the scrape from the store.");
  for (auto state : {record_state::in_flight, record_state::in_doubt,
                     record_state::queued, record_state::failed})
    for (size_t r = 0; r < routes_.size(); ++r) {
      uint64_t n = 0;
      for (auto& x : node.store.unsettled)
        if (x.state == state && x.route == routes_[r])
          n += x.count;
      out += "oncegate_records{route=\"";
      out += routes_[r];
      out += "\",state=\"";
      out += to_string(state);
      out += "\"} ";
      out += std::to_string(n);
      out += '\n';
    }
  header(out, "oncegate_route_paused_since_seconds", "gauge",
         "When the route was paused (Unix seconds, by the store's clock; 0 "
         "while it is not): its new signals are refused with 503 paused "
         "and its queued signals are held. As this node has applied it.");
  for (size_t r = 0; r < routes_.size(); ++r) {
    int64_t since = 0;
    for (auto& p : node.paused)
      if (p.route == routes_[r])
        since = std::max<int64_t>(p.since_ms / 1000, 1);
    out += "oncegate_route_paused_since_seconds{route=\"";
    out += routes_[r];
    out += "\"} ";
    out += std::to_string(since);
    out += '\n';
  }
  metric(out, "oncegate_purged_records_total", "counter",
         "Expired records deleted by the alarm.", node.alarm.purged);
  metric(out, "oncegate_purge_runs_total", "counter",
         "Purge chunks run by the alarm.", node.alarm.runs);
  if (auto& c = node.cluster; c.enabled) {
    // On a cluster node the store's commit histogram above is the proposal
    // latency: from proposing an entry to its local application.
    metric(out, "oncegate_raft_is_leader", "gauge",
           "1 while this node is the Raft leader.", c.role == "leader");
    metric(out, "oncegate_raft_leader_ready", "gauge",
           "1 while this node is the leader and has applied every earlier "
           "entry (it decides).",
           c.leader_ready);
    metric(out, "oncegate_raft_term", "gauge", "Current Raft term.", c.term);
    metric(out, "oncegate_raft_leader_id", "gauge",
           "Id of the known leader (0: none).", c.leader_id);
    metric(out, "oncegate_raft_commit_index", "gauge",
           "Highest log index known to be committed.", c.commit_index);
    metric(out, "oncegate_raft_applied_index", "gauge",
           "Highest log index applied here (a follower writes it to its "
           "SQLite a loop turn later).",
           c.applied_index);
    metric(out, "oncegate_raft_leader_changes_total", "counter",
           "Times this node saw the leader change.", c.leader_changes);
    metric(out, "oncegate_raft_proposals_applied_total", "counter",
           "Log entries this node proposed that were applied.",
           c.proposals_applied);
    metric(out, "oncegate_raft_proposals_failed_total", "counter",
           "Log entries this node proposed that failed (not leader, "
           "leadership lost, I/O).",
           c.proposals_failed);
    metric(out, "oncegate_raft_members", "gauge",
           "Members of the Raft configuration.", c.members.size());
    // Per partition (at most 256 series each, cluster.partitions).
    auto per_partition = [&out, &c](const char* name, const char* type,
                                    const char* help, auto value) {
      header(out, name, type, help);
      for (auto& p : c.partitions) {
        out += name;
        out += "{partition=\"";
        out += std::to_string(p.partition);
        out += "\"} ";
        out += std::to_string(value(p));
        out += '\n';
      }
    };
    per_partition("oncegate_partition_is_leader", "gauge",
                  "1 while this node leads the partition.",
                  [](const partition_info& p) { return p.role == "leader"; });
    per_partition("oncegate_partition_leader_ready", "gauge",
                  "1 while this node is the partition's ready leader.",
                  [](const partition_info& p) { return p.leader_ready; });
    per_partition("oncegate_partition_leader_id", "gauge",
                  "Id of the partition's known leader (0: none).",
                  [](const partition_info& p) { return p.leader_id; });
    per_partition("oncegate_partition_term", "gauge",
                  "The partition's current Raft term.",
                  [](const partition_info& p) { return p.term; });
    per_partition("oncegate_partition_commit_index", "gauge",
                  "The partition's highest log index known committed.",
                  [](const partition_info& p) { return p.commit_index; });
    per_partition("oncegate_partition_applied_index", "gauge",
                  "The partition's highest log index applied here.",
                  [](const partition_info& p) { return p.applied_index; });
    per_partition("oncegate_partition_leader_changes_total", "counter",
                  "Times this node saw the partition's leader change.",
                  [](const partition_info& p) { return p.leader_changes; });
    metric(out, "oncegate_background_retries", "gauge",
           "Record transitions retried in the background (no leader).",
           c.background_retries);
    metric(out, "oncegate_background_retry_bytes", "gauge",
           "Bytes held by background retries (bounded by "
           "cluster.max-background-bytes).",
           c.background_bytes);
    metric(out, "oncegate_background_retries_dropped_total", "counter",
           "Background retries dropped at the bound (their records turn "
           "in_doubt at their deadline).",
           c.background_dropped);
    metric(out, "oncegate_raft_follower_repairs_total", "counter",
           "Leadership handed over to repair a follower left behind.",
           c.follower_repairs);
    metric(out, "oncegate_peer_messages_refused_total", "counter",
           "Messages from other nodes refused as malformed (never applied).",
           c.peer_messages_refused);
    auto& l = c.link;
    metric(out, "oncegate_link_open", "gauge",
           "Node links open now (one per other node when healthy).", l.links);
    metric(out, "oncegate_link_streams", "gauge",
           "Raft streams open on the node links now.", l.streams);
    metric(out, "oncegate_link_buffered_bytes", "gauge",
           "Bytes the node links hold in their own writes now.",
           l.buffered_bytes);
    header(out, "oncegate_link_refused_total", "counter",
           "Connections to the node link's port closed, by reason.");
    const std::pair<const char*, uint64_t> refused[] = {
      {"handshake", l.refused_handshake}, {"identity", l.refused_identity},
      {"hello", l.refused_hello},         {"busy", l.refused_busy},
      {"source", l.refused_source},       {"frame", l.refused_frame}};
    for (auto& [reason, n] : refused) {
      out += "oncegate_link_refused_total{reason=\"";
      out += reason;
      out += "\"} ";
      out += std::to_string(n);
      out += '\n';
    }
    metric(out, "oncegate_link_requests_sent_total", "counter",
           "Requests this node sent other nodes over the link.",
           l.requests_sent);
    metric(out, "oncegate_link_requests_failed_total", "counter",
           "Requests that got no answer (no link, timeout, link lost).",
           l.requests_failed);
    metric(out, "oncegate_link_late_answers_total", "counter",
           "Answers that came after their request had failed.",
           l.late_answers);
    metric(out, "oncegate_link_requests_served_total", "counter",
           "Requests of other nodes this node served.", l.requests_served);
    metric(out, "oncegate_link_requests_overloaded_total", "counter",
           "Requests of other nodes answered overloaded at the bound.",
           l.requests_overloaded);
  }
  return out;
}

void render_clock_offset(std::string& out, const clock_offset_reading& off) {
  header(out, "oncegate_clock_offset_exceeded", "gauge",
         "1 while this node's clock is off the cluster's by more than "
         "cluster.max-clock-offset (not ready; see /readyz).");
  sample(out, "oncegate_clock_offset_exceeded", off.exceeded ? 1 : 0);
  if (!off.measured)
    return;
  header(out, "oncegate_clock_offset_seconds", "gauge",
         "This node's wall clock minus the cluster's (the leader's), as "
         "measured on the log: an upper bound, by the least delay of an "
         "entry. Absent on the leader and until measured.");
  // Milliseconds written as exact decimal seconds, from integers.
  auto ms = off.offset_ms;
  uint64_t mag = ms < 0 ? 0 - static_cast<uint64_t>(ms)
                        : static_cast<uint64_t>(ms);
  std::string text = ms < 0 ? "-" : "";
  text += std::to_string(mag / 1000);
  if (auto frac = mag % 1000; frac != 0) {
    char digits[8];
    std::snprintf(digits, sizeof(digits), ".%03u",
                  static_cast<unsigned>(frac));
    std::string f = digits;
    while (f.back() == '0')
      f.pop_back();
    text += f;
  }
  out += "oncegate_clock_offset_seconds ";
  out += text;
  out += '\n';
}

} // namespace oncegate::gateway
