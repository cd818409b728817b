// The `oncegate routes ...` commands: every route and whether it is paused
// (status), and the kill switch (pause, resume). Requests and answers are
// docs/http-api.md's "/v1/routes".
#include "cli/command_context.hpp"

#include <string>
#include <string_view>

#include "cli/output.hpp"

namespace oncegate::cli {

namespace {

// Route names as the node names them: a-z, 0-9, - and _, 1-64 bytes.
bool route_name(std::string_view name) {
  if (name.empty() || name.size() > 64)
    return false;
  for (auto c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'
          || c == '_'))
      return false;
  return true;
}

exit_code run_status(command_context& ctx, const command_spec&,
                     const parsed_args&) {
  node_request req;
  req.target = "/v1/routes";
  auto got = call_for_object(ctx, req, "the list of routes");
  if (auto code = std::get_if<exit_code>(&got))
    return *code;
  auto routes = std::get<json_answer>(got).doc.get_object().if_contains(
    "routes");
  if (!routes || !routes->is_array())
    return malformed_answer(ctx, "no routes list");
  table t{{"ROUTE", "PATH", "STATE", "SINCE"}};
  for (auto& r : routes->get_array()) {
    auto route = r.if_object();
    if (!route)
      return malformed_answer(ctx, "a route is not a JSON object");
    auto paused = route->if_contains("paused");
    bool is_paused = paused && paused->is_bool() && paused->get_bool();
    t.add({member_cell(*route, "name"), member_cell(*route, "path"),
           is_paused ? "paused" : "open",
           is_paused ? member_cell(*route, "paused_since") : ""});
  }
  t.print(ctx.out);
  return exit_code::ok;
}

exit_code switch_route(command_context& ctx, const command_spec& self,
                       const parsed_args& args, std::string_view action) {
  auto& name = args.positional[0];
  if (!route_name(name))
    return usage_error(ctx.err, self,
                       "NAME must be a route's name (a-z, 0-9, - and _)");
  node_request req;
  req.method = "POST";
  req.target = "/v1/routes/" + name + "/" + std::string{action};
  auto got = call_for_object(ctx, req, "the route");
  if (auto code = std::get_if<exit_code>(&got))
    return *code;
  auto obj = std::get<json_answer>(got).doc.if_object();
  if (action == "pause")
    ctx.out << "route " << name << " paused since "
            << member_cell(*obj, "paused_since")
            << ": new signals get 503, queued ones are held\n";
  else
    ctx.out << "route " << name << " open\n";
  return exit_code::ok;
}

exit_code run_pause(command_context& ctx, const command_spec& self,
                    const parsed_args& args) {
  return switch_route(ctx, self, args, "pause");
}

exit_code run_resume(command_context& ctx, const command_spec& self,
                     const parsed_args& args) {
  return switch_route(ctx, self, args, "resume");
}

} // namespace

const std::vector<command_spec>& routes_commands() {
  static const std::vector<command_spec> commands{
    {"routes", "status", "", "every route and whether it is paused", 0, 0, {},
     run_status},
    {"routes", "pause", "NAME",
     "refuse NAME's new signals (503 paused) and hold its queued ones, on "
     "every node, until it is resumed",
     1, 1, {}, run_pause},
    {"routes", "resume", "NAME",
     "accept NAME's new signals again and deliver what it held", 1, 1, {},
     run_resume},
  };
  return commands;
}

} // namespace oncegate::cli
