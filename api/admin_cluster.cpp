#include "api/admin_cluster.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "api/json_text.hpp"
#include "api/responses.hpp"
#include "api/url.hpp"

namespace oncegate::gateway {

namespace {

std::string cluster_json(const cluster_info& c) {
  std::string out = R"({"mode":"cluster","id":)";
  out += std::to_string(c.id);
  out += R"(,"role":")";
  out += c.role;
  out += R"(","term":)";
  out += std::to_string(c.term);
  out += R"(,"leader_id":)";
  out += std::to_string(c.leader_id);
  out += R"(,"leader_address":)";
  append_json_string(out, c.leader_address);
  out += R"(,"leader_ready":)";
  out += c.leader_ready ? "true" : "false";
  out += R"(,"commit_index":)";
  out += std::to_string(c.commit_index);
  out += R"(,"applied_index":)";
  out += std::to_string(c.applied_index);
  out += R"(,"last_index":)";
  out += std::to_string(c.last_index);
  out += R"(,"leader_changes":)";
  out += std::to_string(c.leader_changes);
  out += R"(,"members":[)";
  for (size_t i = 0; i < c.members.size(); ++i) {
    if (i > 0)
      out += ',';
    out += R"({"id":)";
    out += std::to_string(c.members[i].id);
    out += R"(,"address":)";
    append_json_string(out, c.members[i].address);
    out += R"(,"role":")";
    out += c.members[i].role;
    out += "\"}";
  }
  out += R"(],"partitions":[)";
  for (size_t i = 0; i < c.partitions.size(); ++i) {
    auto& p = c.partitions[i];
    if (i > 0)
      out += ',';
    out += R"({"partition":)";
    out += std::to_string(p.partition);
    out += R"(,"role":")";
    out += p.role;
    out += R"(","leader_id":)";
    out += std::to_string(p.leader_id);
    out += R"(,"leader_ready":)";
    out += p.leader_ready ? "true" : "false";
    out += R"(,"term":)";
    out += std::to_string(p.term);
    out += R"(,"commit_index":)";
    out += std::to_string(p.commit_index);
    out += R"(,"applied_index":)";
    out += std::to_string(p.applied_index);
    out += R"(,"last_index":)";
    out += std::to_string(p.last_index);
    out += R"(,"lag":)";
    out += std::to_string(p.commit_index > p.applied_index
                            ? p.commit_index - p.applied_index
                            : 0);
    out += R"(,"leader_changes":)";
    out += std::to_string(p.leader_changes);
    out += R"(,"voters":[)";
    for (size_t v = 0; v < p.voters.size(); ++v) {
      if (v > 0)
        out += ',';
      out += std::to_string(p.voters[v]);
    }
    out += "]}";
  }
  out += "]}";
  return out;
}

// Parses a node id (a positive decimal number).
std::optional<uint64_t> parse_node_id(std::string_view text) {
  auto value = parse_digits(text, 18);
  if (value == uint64_t{0})
    return std::nullopt;
  return value;
}

http_response bad_request(std::string detail) {
  return make_problem({400, "bad-request", "Bad request", std::move(detail)});
}

// The answer to a cluster change the node tried.
http_response change_answer(const reply<uint64_t>& rep) {
  if (rep.ok) {
    std::string body = R"({"status":"ok","leader_id":)";
    body += std::to_string(rep.value);
    body += '}';
    return json_response(200, std::move(body));
  }
  if (rep.error == errc::invalid_argument)
    return make_problem({409, "cluster-change-refused",
                         "Cluster change refused", rep.detail});
  auto res = make_problem({503, "no-leader", "No leader",
                           "no ready raft leader answered: " + rep.detail});
  res.set("Retry-After", "1");
  return res;
}

} // namespace

void serve_cluster_admin(node_service& node, const http_request& req,
                         responder& done) {
  auto path = req.path();
  auto info = node.cluster();
  if (path == "/v1/cluster") {
    if (req.method != "GET" && req.method != "HEAD")
      return done(method_not_allowed("GET, HEAD"));
    if (!info.enabled)
      return done(json_response(200, R"({"mode":"single"})"));
    return done(json_response(200, cluster_json(info)));
  }
  cluster_op op;
  std::optional<uint64_t> id;
  uint16_t partition = 0;
  constexpr std::string_view members = "/v1/cluster/members/";
  if (path == "/v1/cluster/transfer") {
    if (req.method != "POST")
      return done(method_not_allowed("POST"));
    op = cluster_op::transfer;
    id = 0;
    if (auto to = query_param(req.target, "to")) {
      id = *to == "0" ? std::optional<uint64_t>{0} : parse_node_id(*to);
      if (!id)
        return done(bad_request("to must be a node id"));
    }
    if (auto which = query_param(req.target, "partition")) {
      auto value = parse_digits(*which, 3);
      if (!value || *value > 255)
        return done(bad_request("partition must be 0..255"));
      partition = static_cast<uint16_t>(*value);
    }
  } else if (path.substr(0, members.size()) == members) {
    id = parse_node_id(path.substr(members.size()));
    if (!id)
      return done(bad_request("the path must end in a node id"));
    if (req.method == "POST")
      op = cluster_op::add;
    else if (req.method == "DELETE")
      op = cluster_op::remove;
    else
      return done(method_not_allowed("POST, DELETE"));
  } else {
    return done(not_found());
  }
  if (!info.enabled)
    return done(make_problem({409, "not-a-cluster", "Not a cluster",
                              "this node runs without cluster.id"}));
  node.change_cluster(op, *id, partition, [done](reply<uint64_t> rep) {
    done(change_answer(rep));
  });
}

} // namespace oncegate::gateway
