#include "api/admin_routes.hpp"

#include <string>
#include <string_view>
#include <utility>

#include "api/json_text.hpp"
#include "api/responses.hpp"

namespace oncegate::gateway {

namespace {

constexpr std::string_view prefix = "/v1/routes/";

const route_pause* find(const route_pauses& xs, const std::string& name) {
  for (auto& p : xs)
    if (p.route == name)
      return &p;
  return nullptr;
}

void append_route(std::string& out, const route_config& r,
                  const route_pauses& paused) {
  out += R"({"name":)";
  append_json_string(out, r.name);
  out += R"(,"path":)";
  append_json_string(out, r.path);
  auto p = find(paused, r.name);
  out += R"(,"paused":)";
  out += p ? "true" : "false";
  if (p) {
    out += R"(,"paused_since":")";
    append_timestamp(out, p->since_ms);
    out += R"(","paused_since_ms":)";
    out += std::to_string(p->since_ms);
  }
  out += '}';
}

http_response failed(const reply<route_pauses>& rep) {
  if (rep.error == errc::invalid_argument)
    return make_problem({409, "pause-refused", "Pause refused", rep.detail});
  auto res = make_problem({503, "unavailable", "Service unavailable",
                           "the pause is not known to be durable everywhere ("
                             + rep.detail + "); send it again"});
  res.set("Retry-After", "1");
  return res;
}

} // namespace

void serve_routes_admin(node_service& node, const route_table& routes,
                        int64_t now_ms, const http_request& req,
                        responder& done) {
  auto path = req.path();
  if (path == "/v1/routes") {
    if (req.method != "GET" && req.method != "HEAD")
      return done(method_not_allowed("GET, HEAD"));
    node.pause({}, pause_op::read, now_ms,
               [&routes, done = std::move(done)](reply<route_pauses> rep) {
                 if (!rep.ok)
                   return done(failed(rep));
                 std::string out = R"({"routes":[)";
                 for (size_t i = 0; i < routes.routes.size(); ++i) {
                   if (i > 0)
                     out += ',';
                   append_route(out, routes.routes[i], rep.value);
                 }
                 out += "]}";
                 done(json_response(200, std::move(out)));
               });
    return;
  }
  // /v1/routes/NAME/pause, /v1/routes/NAME/resume
  auto rest = path.substr(prefix.size());
  auto slash = rest.find('/');
  auto action = slash == std::string_view::npos ? std::string_view{}
                                                : rest.substr(slash + 1);
  if (path.substr(0, prefix.size()) != prefix
      || (action != "pause" && action != "resume"))
    return done(not_found("no such endpoint: POST /v1/routes/NAME/pause or "
                          "/v1/routes/NAME/resume"));
  if (req.method != "POST")
    return done(method_not_allowed("POST"));
  auto route = routes.by_name(rest.substr(0, slash));
  if (route == nullptr)
    return done(make_problem({404, "unknown-route", "Unknown route",
                              "no route of that name on this node"}));
  auto op = action == "pause" ? pause_op::pause : pause_op::resume;
  node.pause(route->name, op, now_ms,
             [route, done = std::move(done)](reply<route_pauses> rep) {
               if (!rep.ok)
                 return done(failed(rep));
               std::string out;
               append_route(out, *route, rep.value);
               done(json_response(200, std::move(out)));
             });
}

} // namespace oncegate::gateway
