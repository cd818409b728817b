// The `oncegate keys ...` commands: one record (get, release, complete,
// redeliver) and the unsettled records of a route (list, following the
// API's pages). Requests and answers are docs/http-api.md's "/v1/keys".
#include "cli/command_context.hpp"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include "cli/admin_paths.hpp"
#include "cli/output.hpp"

namespace oncegate::cli {

namespace {

namespace json = boost::json;

// A record's members in the order a person reads them; others follow.
constexpr std::string_view record_order[] = {
  "route", "key", "state", "status", "first_seen", "expires_at",
  "fingerprint", "attempts", "reconciles", "deliver_by", "next_attempt",
  "response"};
// A stored answer is shown up to this size in tables (--json: all of it).
constexpr std::size_t response_shown = 1024;
// The API's page size at most (GET /v1/keys?limit=).
constexpr uint32_t max_page = 1000;
// A --body-file at most: far above any node's body limit.
constexpr std::size_t max_body_file = 16 * 1024 * 1024;

std::string member_cell(const json::object& obj, std::string_view name) {
  auto it = obj.find(name);
  return it == obj.end() ? std::string{"-"} : cell(it->value());
}

void print_record(command_context& ctx, const json::object& rec) {
  std::vector<std::pair<std::string, std::string>> fields;
  for (auto name : record_order) {
    auto it = rec.find(name);
    if (it == rec.end())
      continue;
    auto& v = it->value();
    if (name == "response" && v.is_string())
      fields.emplace_back(std::string{name},
                          safe_text_cut(std::string_view{v.get_string().data(),
                                                       v.get_string().size()},
                                      response_shown));
    else
      fields.emplace_back(std::string{name}, cell(v));
  }
  for (auto& [name, v] : rec) {
    std::string_view n{name.data(), name.size()};
    if (std::find(std::begin(record_order), std::end(record_order), n)
        == std::end(record_order))
      fields.emplace_back(display(n), cell(v));
  }
  print_fields(ctx.out, fields);
}

// The checks every ROUTE KEY command makes; empty when fine.
std::string check_route_key(const parsed_args& args) {
  if (args.positional[0].empty())
    return "ROUTE is empty (the default route is \"default\")";
  auto& key = args.positional[1];
  if (key.empty() || key.size() > 255)
    return "KEY must be 1..255 bytes";
  return {};
}

// Sends one request about a record and prints the record it answers with.
exit_code record_change(command_context& ctx, const node_request& req,
                        std::string_view done_line) {
  auto got = call_for_object(ctx, req, "the record");
  if (auto code = std::get_if<exit_code>(&got))
    return *code;
  auto rec = std::get<json_answer>(got).doc.if_object();
  if (!done_line.empty())
    ctx.out << done_line << '\n';
  print_record(ctx, *rec);
  return exit_code::ok;
}

exit_code run_get(command_context& ctx, const command_spec& self,
                  const parsed_args& args) {
  if (auto why = check_route_key(args); !why.empty())
    return usage_error(ctx.err, self, why);
  node_request req;
  req.target = record_target(args.positional[0], args.positional[1]);
  return record_change(ctx, req, {});
}

exit_code run_release(command_context& ctx, const command_spec& self,
                      const parsed_args& args) {
  if (auto why = check_route_key(args); !why.empty())
    return usage_error(ctx.err, self, why);
  node_request req;
  req.method = "DELETE";
  req.target = record_target(args.positional[0], args.positional[1], {},
                             args.has("force") ? "force=true" : "");
  auto got = call(ctx, req);
  if (auto code = std::get_if<exit_code>(&got))
    return *code;
  auto& ans = std::get<json_answer>(got);
  if (ctx.json) {
    print_json(ctx, ans.raw);
    return exit_code::ok;
  }
  ctx.out << "released " << display(args.positional[1]) << " on route "
          << display(args.positional[0])
          << ": the next request with this key executes\n";
  return exit_code::ok;
}

// The body of --body-file (`-`: standard input), at most max_body_file.
std::optional<std::string> read_body_file(const std::string& path,
                                          std::string& why) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) {
      why = "cannot read --body-file " + display(path);
      return std::nullopt;
    }
    in = &file;
  }
  std::string body;
  char buf[8192];
  while (in->read(buf, sizeof buf) || in->gcount() > 0) {
    body.append(buf, static_cast<std::size_t>(in->gcount()));
    if (body.size() > max_body_file) {
      why = "--body-file is larger than 16 MiB";
      return std::nullopt;
    }
  }
  if (in->bad()) {
    why = "cannot read --body-file " + display(path);
    return std::nullopt;
  }
  return body;
}

exit_code run_complete(command_context& ctx, const command_spec& self,
                       const parsed_args& args) {
  if (auto why = check_route_key(args); !why.empty())
    return usage_error(ctx.err, self, why);
  auto status_text = args.value("status");
  if (!status_text)
    return usage_error(ctx.err, self,
                       "--status is required: the final status the upstream "
                       "answered (200..599)");
  auto status = parse_number(*status_text, 999);
  if (!status)
    return usage_error(ctx.err, self, "--status must be a number (200..599)");
  if (args.has("body") && args.has("body-file"))
    return usage_error(ctx.err, self, "give --body or --body-file, not both");
  json::object doc;
  doc["status"] = *status;
  if (auto body = args.value("body")) {
    doc["body"] = *body;
  } else if (auto path = args.value("body-file")) {
    std::string why;
    auto text = read_body_file(*path, why);
    if (!text)
      return usage_error(ctx.err, self, why);
    doc["body"] = *text;
  }
  if (auto ct = args.value("content-type"))
    doc["content_type"] = *ct;
  node_request req;
  req.method = "POST";
  req.target = record_target(args.positional[0], args.positional[1],
                             "/complete");
  req.json_body = json::serialize(doc);
  return record_change(ctx, req, {});
}

exit_code run_redeliver(command_context& ctx, const command_spec& self,
                        const parsed_args& args) {
  if (auto why = check_route_key(args); !why.empty())
    return usage_error(ctx.err, self, why);
  node_request req;
  req.method = "POST";
  req.target = record_target(args.positional[0], args.positional[1],
                             "/redeliver");
  return record_change(ctx, req, "queued again, due now:");
}

bool listable(std::string_view state) {
  return state == "in_doubt" || state == "in_flight" || state == "queued"
         || state == "failed";
}

void print_list(command_context& ctx, const std::string& route,
                const std::string& state, const json::array& records,
                const std::string* more) {
  if (records.empty()) {
    ctx.out << "no " << state << " records on route " << display(route)
            << '\n';
  } else {
    bool durable = std::any_of(records.begin(), records.end(),
                               [](const json::value& v) {
                                 return v.as_object().contains("attempts");
                               });
    std::vector<std::string> header{"KEY", "STATE", "FIRST_SEEN",
                                    "EXPIRES_AT"};
    if (durable)
      header.insert(header.end(), {"ATTEMPTS", "DELIVER_BY", "NEXT_ATTEMPT"});
    table t{header};
    for (auto& v : records) {
      auto& rec = v.as_object();
      std::vector<std::string> row{
        member_cell(rec, "key"), member_cell(rec, "state"),
        member_cell(rec, "first_seen"), member_cell(rec, "expires_at")};
      if (durable)
        row.insert(row.end(), {member_cell(rec, "attempts"),
                               member_cell(rec, "deliver_by"),
                               member_cell(rec, "next_attempt")});
      t.add(std::move(row));
    }
    t.print(ctx.out);
  }
  if (more)
    ctx.out << "more records: add --after=" << display(*more) << '\n';
}

exit_code run_list(command_context& ctx, const command_spec& self,
                   const parsed_args& args) {
  auto& route = args.positional[0];
  if (route.empty())
    return usage_error(ctx.err, self,
                       "ROUTE is empty (the default route is \"default\")");
  auto state = args.value("state").value_or("in_doubt");
  if (!listable(state))
    return usage_error(ctx.err, self,
                       "--state must be in_doubt, in_flight, queued or failed"
                       " (the node lists unsettled records only; show a "
                       "completed one with keys get)");
  uint64_t limit = 0; // 0: every record
  if (auto text = args.value("limit")) {
    auto n = parse_number(*text, 1'000'000'000);
    if (!n || *n == 0)
      return usage_error(ctx.err, self, "--limit must be a positive number");
    limit = *n;
  }
  uint32_t page = max_page;
  if (auto text = args.value("page-size")) {
    auto n = parse_number(*text, max_page);
    if (!n || *n == 0)
      return usage_error(ctx.err, self, "--page-size must be 1..1000");
    page = static_cast<uint32_t>(*n);
  }
  std::string after = args.value("after").value_or("");
  json::array records;
  bool more = false;
  for (;;) {
    uint32_t want = page;
    if (limit != 0)
      want = static_cast<uint32_t>(
        std::min<uint64_t>(want, limit - records.size()));
    node_request req;
    req.target = list_target(route, state, want, after);
    auto got = call(ctx, req);
    if (auto code = std::get_if<exit_code>(&got))
      return *code;
    auto& doc = std::get<json_answer>(got).doc;
    auto obj = doc.if_object();
    auto recs = obj ? obj->if_contains("records") : nullptr;
    auto next = obj ? obj->if_contains("next_after") : nullptr;
    if (!recs || !recs->is_array() || !next
        || !(next->is_null() || next->is_string()))
      return malformed_answer(ctx, "expected {\"records\":[...],"
                                   "\"next_after\":...}");
    for (auto& rec : recs->get_array()) {
      if (!rec.is_object())
        return malformed_answer(ctx, "a record is not a JSON object");
      records.push_back(rec);
    }
    if (next->is_null())
      break;
    std::string next_after{next->get_string().data(),
                           next->get_string().size()};
    // A node that does not move on would be asked for ever.
    if (recs->get_array().empty() || next_after == after)
      return malformed_answer(ctx, "its pages do not advance");
    after = std::move(next_after);
    if (limit != 0 && records.size() >= limit) {
      more = true;
      break;
    }
  }
  if (ctx.json) {
    json::object out;
    out["records"] = std::move(records);
    out["next_after"] = more ? json::value(after) : json::value(nullptr);
    print_json(ctx, json::serialize(out));
    return exit_code::ok;
  }
  print_list(ctx, route, state, records, more ? &after : nullptr);
  return exit_code::ok;
}

} // namespace

const std::vector<command_spec>& keys_commands() {
  static const std::vector<command_spec> commands{
    {"keys", "get", "ROUTE KEY", "show the record of KEY on ROUTE", 2, 2, {},
     run_get},
    {"keys", "list",
     "ROUTE [--state=in_doubt|in_flight|queued|failed] [--limit=N] "
     "[--after=KEY] [--page-size=N]",
     "list a route's unsettled records in key order (default in_doubt; "
     "every page unless --limit)",
     1, 1,
     {{"state"}, {"limit"}, {"after"}, {"page-size"}},
     run_list},
    {"keys", "release", "ROUTE KEY [--force]",
     "release the record: the next request with KEY executes (--force: "
     "also while in flight)",
     2, 2, {{"force", false}}, run_release},
    {"keys", "complete",
     "ROUTE KEY --status=N [--body=TEXT | --body-file=FILE] "
     "[--content-type=TYPE]",
     "record the outcome you verified upstream; duplicates get it", 2, 2,
     {{"status"}, {"body"}, {"body-file"}, {"content-type"}},
     run_complete},
    {"keys", "redeliver", "ROUTE KEY",
     "queue a failed record (durable delivery) again, due now", 2, 2, {},
     run_redeliver},
  };
  return commands;
}

} // namespace oncegate::cli
