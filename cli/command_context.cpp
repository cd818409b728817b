#include "cli/command_context.hpp"

#include <boost/json/parse.hpp>

#include "cli/output.hpp"

namespace oncegate::cli {

namespace {

constexpr std::string_view problem_prefix = "https://oncegate.dev/problems/";

std::string string_member(const boost::json::value& doc, std::string_view name) {
  auto obj = doc.if_object();
  if (!obj)
    return {};
  auto it = obj->find(name);
  if (it == obj->end() || !it->value().is_string())
    return {};
  auto& s = it->value().get_string();
  return std::string{s.data(), s.size()};
}

// What to do next, where the answer alone does not say it.
std::string hint(const command_context& ctx, const node_answer& ans,
                 std::string_view type) {
  if (ans.status == 401)
    return ctx.client.has_token()
             ? "the node refused the admin token"
             : "give the admin token: ONCEGATE_TOKEN or --token-file=FILE";
  if (type == "admin-token-required")
    return "the node has no admin token configured (admin.token-env or "
           "admin.token-file), so it accepts no changes";
  if (type == "forbidden" && !ctx.client.has_token())
    return "without an admin token the node answers reads from its own "
           "host only";
  if (!ans.retry_after.empty())
    return "retry after " + safe_text(ans.retry_after) + " s";
  return {};
}

// One line (and a hint) for an answer that is not a success.
void report(command_context& ctx, const node_answer& ans,
            const boost::json::value* doc) {
  std::string type;
  std::string detail;
  if (doc) {
    type = string_member(*doc, "type");
    if (type.compare(0, problem_prefix.size(), problem_prefix) == 0)
      type.erase(0, problem_prefix.size());
    detail = string_member(*doc, "detail");
    if (detail.empty())
      detail = string_member(*doc, "title");
  }
  if (type.empty() && detail.empty()) {
    // Not a problem document: perhaps not an oncegate node at all.
    ctx.err << "oncegate: " << ctx.client.address().url() << " answered "
            << ans.status;
    if (!ans.body.empty())
      ctx.err << ": " << safe_text(ans.body.substr(0, 200));
    ctx.err << '\n';
  } else {
    ctx.err << "oncegate: " << ans.status;
    if (!type.empty())
      ctx.err << ' ' << safe_text(type);
    if (!detail.empty())
      ctx.err << ": " << safe_text(detail);
    ctx.err << '\n';
  }
  if (auto h = hint(ctx, ans, type); !h.empty())
    ctx.err << "oncegate: " << h << '\n';
}

} // namespace

std::variant<json_answer, exit_code> call(command_context& ctx,
                                          const node_request& req) {
  auto sent = ctx.client.send(req);
  if (auto failed = std::get_if<transport_failure>(&sent)) {
    ctx.err << "oncegate: cannot reach " << ctx.client.address().url() << ": "
            << safe_text(failed->what) << '\n';
    return exit_code::unavailable;
  }
  auto& ans = std::get<node_answer>(sent);
  boost::json::error_code ec;
  auto doc = ans.body.empty() ? boost::json::value{}
                              : boost::json::parse(ans.body, ec);
  bool is_json = !ans.body.empty() && !ec;
  auto code = exit_for_status(ans.status);
  if (code == exit_code::ok) {
    if (!is_json) {
      ctx.err << "oncegate: " << ctx.client.address().url() << " answered "
              << ans.status << " without a JSON document; is it an oncegate "
              << "node?\n";
      return exit_code::unavailable;
    }
    return json_answer{std::move(doc), std::move(ans.body)};
  }
  if (ctx.json && is_json)
    print_json(ctx, ans.body);
  report(ctx, ans, is_json ? &doc : nullptr);
  return code;
}

void print_json(command_context& ctx, std::string_view raw) {
  ctx.out << raw;
  if (raw.empty() || raw.back() != '\n')
    ctx.out << '\n';
}

std::variant<json_answer, exit_code>
call_for_object(command_context& ctx, const node_request& req,
                std::string_view what) {
  auto got = call(ctx, req);
  if (std::holds_alternative<exit_code>(got))
    return got;
  auto& ans = std::get<json_answer>(got);
  if (ctx.json) {
    print_json(ctx, ans.raw);
    return exit_code::ok;
  }
  if (!ans.doc.is_object())
    return malformed_answer(ctx, std::string{what} + " is not a JSON object");
  return got;
}

exit_code malformed_answer(command_context& ctx, std::string_view what) {
  ctx.err << "oncegate: unexpected answer from " << ctx.client.address().url()
          << ": " << what << '\n';
  return exit_code::unavailable;
}

exit_code usage_error(std::ostream& err, const command_spec& cmd,
                      std::string_view why) {
  err << "oncegate: " << cmd.group << ' ' << cmd.name << ": " << why << '\n'
      << "usage: oncegate " << cmd.group << ' ' << cmd.name;
  if (!cmd.synopsis.empty())
    err << ' ' << cmd.synopsis;
  err << "\n(oncegate " << cmd.group << " --help lists the commands)\n";
  return exit_code::usage;
}

} // namespace oncegate::cli
