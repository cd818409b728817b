// The `oncegate cluster ...` commands: the node's Raft view (status) and
// the changes any node takes and runs on the leader (transfer, add,
// remove). Requests and answers are docs/http-api.md's "/v1/cluster".
#include "cli/command_context.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>

#include "cli/admin_paths.hpp"
#include "cli/output.hpp"

namespace oncegate::cli {

namespace {

// Node ids as the API takes them: positive, at most 18 digits.
std::optional<uint64_t> node_id(std::string_view text) {
  auto id = parse_number(text, 999'999'999'999'999'999);
  if (!id || *id == 0)
    return std::nullopt;
  return id;
}

exit_code run_status(command_context& ctx, const command_spec&,
                     const parsed_args&) {
  node_request req;
  req.target = "/v1/cluster";
  auto got = call_for_object(ctx, req, "the status");
  if (auto code = std::get_if<exit_code>(&got))
    return *code;
  auto st = std::get<json_answer>(got).doc.if_object();
  auto mode = st->if_contains("mode");
  if (mode && mode->is_string() && mode->get_string() == "single") {
    ctx.out << "mode  single (a node without a cluster: cluster.id is 0)\n";
    return exit_code::ok;
  }
  auto leader = member_cell(*st, "leader_id");
  std::string leader_line = leader;
  if (leader == "0") {
    leader_line = "none known";
  } else {
    leader_line += " at " + member_cell(*st, "leader_address");
    // `leader_ready` is the node's own: a follower always says false.
    if (member_cell(*st, "role") == "leader") {
      auto ready = st->if_contains("leader_ready");
      leader_line += ready && ready->is_bool() && ready->get_bool()
                       ? " (this node, ready)"
                       : " (this node, not ready yet)";
    }
  }
  print_fields(ctx.out, {{"mode", member_cell(*st, "mode")},
                         {"id", member_cell(*st, "id")},
                         {"role", member_cell(*st, "role")},
                         {"term", member_cell(*st, "term")},
                         {"leader", leader_line},
                         {"commit_index", member_cell(*st, "commit_index")},
                         {"applied_index", member_cell(*st, "applied_index")},
                         {"last_index", member_cell(*st, "last_index")},
                         {"leader_changes",
                          member_cell(*st, "leader_changes")}});
  auto members = st->if_contains("members");
  if (!members || !members->is_array())
    return malformed_answer(ctx, "no members list");
  ctx.out << '\n';
  table t{{"ID", "ADDRESS", "ROLE", "LEADER"}};
  for (auto& m : members->get_array()) {
    auto obj = m.if_object();
    if (!obj)
      return malformed_answer(ctx, "a member is not a JSON object");
    auto id = member_cell(*obj, "id");
    t.add({id, member_cell(*obj, "address"), member_cell(*obj, "role"),
           id == leader ? "*" : ""});
  }
  t.print(ctx.out);
  // Every partition (a cluster without partitions has one, partition 0,
  // whose fields are the ones above).
  auto parts = st->if_contains("partitions");
  if (parts && parts->is_array() && parts->get_array().size() > 1) {
    ctx.out << '\n';
    table pt{{"PARTITION", "LEADER", "ROLE", "TERM", "APPLIED", "LAG"}};
    for (auto& p : parts->get_array()) {
      auto obj = p.if_object();
      if (!obj)
        return malformed_answer(ctx, "a partition is not a JSON object");
      pt.add({member_cell(*obj, "partition"), member_cell(*obj, "leader_id"),
              member_cell(*obj, "role"), member_cell(*obj, "term"),
              member_cell(*obj, "applied_index"), member_cell(*obj, "lag")});
    }
    pt.print(ctx.out);
  }
  return exit_code::ok;
}

// Sends a membership change; prints `done`.
exit_code change(command_context& ctx, const node_request& req,
                 const std::string& done) {
  auto got = call(ctx, req);
  if (auto code = std::get_if<exit_code>(&got))
    return *code;
  auto& ans = std::get<json_answer>(got);
  if (ctx.json)
    print_json(ctx, ans.raw);
  else
    ctx.out << done << '\n';
  return exit_code::ok;
}

exit_code run_transfer(command_context& ctx, const command_spec& self,
                       const parsed_args& args) {
  uint64_t to = 0;
  if (auto text = args.value("to")) {
    auto id = *text == "0" ? std::optional<uint64_t>{0} : node_id(*text);
    if (!id)
      return usage_error(ctx.err, self,
                         "--to must be a node id (0: any voter)");
    to = *id;
  }
  uint16_t partition = 0;
  if (auto text = args.value("partition")) {
    auto value = parse_number(*text, 255);
    if (!value)
      return usage_error(ctx.err, self, "--partition must be 0..255");
    partition = static_cast<uint16_t>(*value);
  }
  node_request req;
  req.method = "POST";
  req.target = transfer_target(to, partition);
  auto got = call(ctx, req);
  if (auto code = std::get_if<exit_code>(&got))
    return *code;
  auto& ans = std::get<json_answer>(got);
  auto obj = ans.doc.if_object();
  auto lid = obj ? obj->if_contains("leader_id") : nullptr;
  if (!lid || !lid->is_number())
    return malformed_answer(ctx, "no leader_id");
  if (ctx.json)
    print_json(ctx, ans.raw);
  // The node answers 200 with the leader after the attempt, 0 when the
  // attempt did not run (another transfer running, the target leads
  // already): for scripts, only the asked-for outcome is success.
  auto leader = cell(*lid);
  if (leader == "0") {
    ctx.err << "oncegate: leadership not transferred: the node knows no "
               "leader after the attempt (a transfer already running, or "
               "the target leads already: oncegate cluster status)\n";
    return exit_code::conflict;
  }
  if (to != 0 && leader != std::to_string(to)) {
    ctx.err << "oncegate: leadership not transferred: node " << leader
            << " leads, not node " << to << '\n';
    return exit_code::conflict;
  }
  if (!ctx.json)
    ctx.out << "node " << leader << " leads\n";
  return exit_code::ok;
}

exit_code run_add(command_context& ctx, const command_spec& self,
                  const parsed_args& args) {
  if (args.positional.size() > 1)
    return usage_error(ctx.err, self,
                       "give only the id: the node's addresses come from "
                       "cluster.peers, which must list it on every node "
                       "(docs/cluster.md, \"Membership\")");
  auto id = node_id(args.positional[0]);
  if (!id)
    return usage_error(ctx.err, self, "ID must be a positive node id");
  node_request req;
  req.method = "POST";
  req.target = member_target(*id);
  return change(ctx, req, "node " + std::to_string(*id) + " added as a voter");
}

exit_code run_remove(command_context& ctx, const command_spec& self,
                     const parsed_args& args) {
  auto id = node_id(args.positional[0]);
  if (!id)
    return usage_error(ctx.err, self, "ID must be a positive node id");
  node_request req;
  req.method = "DELETE";
  req.target = member_target(*id);
  return change(ctx, req,
                "node " + std::to_string(*id)
                  + " removed (its in-flight records are in doubt now)");
}

} // namespace

const std::vector<command_spec>& cluster_commands() {
  static const std::vector<command_spec> commands{
    {"cluster", "status", "",
     "this node's Raft view: role, term, leader, indexes, members, "
     "partitions",
     0, 0, {},
     run_status},
    {"cluster", "transfer", "[--to=ID] [--partition=K]",
     "hand leadership of partition K (default 0) to node ID (default: any "
     "up-to-date voter)",
     0, 0, {{"to"}, {"partition"}}, run_transfer},
    {"cluster", "add", "ID",
     "add node ID of cluster.peers (started with cluster.join=true) as a "
     "voter",
     1, 2, {}, run_add},
    {"cluster", "remove", "ID",
     "remove node ID from the cluster", 1, 1, {}, run_remove},
  };
  return commands;
}

} // namespace oncegate::cli
