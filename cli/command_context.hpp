#pragma once

// What every admin command shares: the client, the output mode and
// streams, one request with its answer judged (exit code, messages), and
// the table of commands the entry point dispatches on.

#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <boost/json/value.hpp>

#include "cli/arguments.hpp"
#include "cli/exit_code.hpp"
#include "cli/transport.hpp"

namespace oncegate::cli {

/// Where a command sends and prints.
struct command_context {
  const node_client& client;
  /// `--json`: the node's JSON on stdout instead of tables.
  bool json = false;
  std::ostream& out;
  std::ostream& err;
};

/// A successful (2xx) answer: its JSON document and its text as sent.
struct json_answer {
  boost::json::value doc;
  std::string raw;
};

/// Sends `req` and judges the answer. A 2xx answer with a JSON body is
/// returned. Anything else is reported on `err` (with `--json`, a problem
/// document the node sent is also printed on `out`) and its exit code is
/// returned: `exit_for_status`, or `unavailable` when no (usable) answer
/// came.
std::variant<json_answer, exit_code> call(command_context& ctx,
                                          const node_request& req);

/// Prints the node's JSON text as it came, with a newline.
void print_json(command_context& ctx, std::string_view raw);

/// `call` for a command that shows one JSON object: with `--json` the
/// answer is printed as it came and `exit_code::ok` returned instead;
/// an answer that is no object is reported (`what` names it) and
/// `unavailable` returned. Otherwise the answer, whose `doc` is an object.
std::variant<json_answer, exit_code>
call_for_object(command_context& ctx, const node_request& req,
                std::string_view what);

/// Reports a malformed successful answer (a member missing or of the wrong
/// type); returns `unavailable`.
exit_code malformed_answer(command_context& ctx, std::string_view what);

/// One admin command: `oncegate GROUP NAME ARGS...`.
struct command_spec {
  std::string_view group;
  std::string_view name;
  /// The arguments and options after the name, for usage lines.
  std::string_view synopsis;
  /// One line for `--help`.
  std::string_view summary;
  std::size_t min_args = 0;
  std::size_t max_args = 0;
  /// The command's own options (the global ones are added).
  std::vector<option_spec> options;
  /// Runs it (`self` is this spec); the number of positional arguments is
  /// checked before.
  exit_code (*run)(command_context& ctx, const command_spec& self,
                   const parsed_args& args) = nullptr;
};

/// `keys get`, `keys list`, `keys release`, `keys complete`,
/// `keys redeliver` (`cli/keys_commands.cpp`).
const std::vector<command_spec>& keys_commands();

/// `cluster status`, `cluster transfer`, `cluster add`, `cluster remove`
/// (`cli/cluster_commands.cpp`).
const std::vector<command_spec>& cluster_commands();

/// `routes status`, `routes pause`, `routes resume`
/// (`cli/routes_commands.cpp`).
const std::vector<command_spec>& routes_commands();

/// Reports a usage error of a command (why, then its usage line) on
/// `err`; returns `exit_code::usage`.
exit_code usage_error(std::ostream& err, const command_spec& cmd,
                      std::string_view why);

} // namespace oncegate::cli
