// The admin CLI's entry point: the command words, the global options (node,
// token, timeout, --json), help texts, and the dispatch to a command of
// cli/keys_commands.cpp or cli/cluster_commands.cpp. Nothing here speaks
// HTTP (cli/transport.cpp) or knows an endpoint (cli/admin_paths.cpp).
#include "cli/admin_cli.hpp"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/arguments.hpp"
#include "cli/command_context.hpp"
#include "cli/exit_code.hpp"
#include "cli/output.hpp"
#include "cli/transport.hpp"

namespace oncegate::cli {

namespace {

constexpr std::string_view default_node = "http://127.0.0.1:8080";
constexpr std::string_view node_env = "ONCEGATE_NODE";
constexpr std::string_view token_env = "ONCEGATE_TOKEN";
constexpr std::string_view ca_file_env = "ONCEGATE_CA_FILE";

// Options every command takes.
const std::vector<option_spec> global_options{
  {"node"}, {"token"}, {"token-file"}, {"ca-file"}, {"timeout"},
  {"json", false}, {"help", false}};

constexpr std::string_view options_help =
  "Options (any command):\n"
  "  --node=URL         the node: http://HOST:PORT, https://HOST:PORT or\n"
  "                     HOST:PORT (env ONCEGATE_NODE; default\n"
  "                     http://127.0.0.1:8080; port 8080 when left out)\n"
  "  --ca-file=FILE     https: the CA certificates (PEM) the node's\n"
  "                     certificate must chain to (env ONCEGATE_CA_FILE;\n"
  "                     default the system's CA store)\n"
  "  --token-file=FILE  the admin token: the first line of FILE\n"
  "                     (or env ONCEGATE_TOKEN; both keep it out of ps)\n"
  "  --token=TOKEN      the admin token on the command line: visible to\n"
  "                     other users in ps, prefer the two above\n"
  "  --timeout=DUR      bound on each request, e.g. 10s, 500ms (default 30s;\n"
  "                     connecting at most 5s of it)\n"
  "  --json             print the node's JSON instead of tables\n"
  "  -h, --help         this help\n"
  "Put a KEY that starts with - after --: oncegate keys get default -- -k1\n";

constexpr std::string_view exit_help =
  "Exit codes: 0 done; 1 refused by the node (400, 405, 415, 422, 500, ...);\n"
  "2 usage error, nothing sent; 3 not found (404); 4 the state does not\n"
  "allow it (409); 5 node unreachable or unavailable (no answer, timeout,\n"
  "malformed answer, a certificate that does not verify, 502/503/504);\n"
  "6 token or caller refused (401, 403).\n";

const std::vector<command_spec>* group_commands(std::string_view group) {
  if (group == "keys")
    return &keys_commands();
  if (group == "cluster")
    return &cluster_commands();
  if (group == "routes")
    return &routes_commands();
  return nullptr;
}

void print_group(std::ostream& out, std::string_view group) {
  out << "usage: oncegate " << group << " COMMAND [ARGS] [OPTIONS]\n\n";
  for (auto& cmd : *group_commands(group)) {
    out << "  oncegate " << cmd.group << ' ' << cmd.name;
    if (!cmd.synopsis.empty())
      out << ' ' << cmd.synopsis;
    out << "\n      " << cmd.summary << '\n';
  }
  out << '\n' << options_help << '\n' << exit_help
      << "More: docs/cli.md.\n";
}

void print_overview(std::ostream& out, std::string_view version) {
  out << "oncegate " << version
      << ": webhook idempotency gateway\n\n"
         "usage: oncegate [NODE OPTIONS]         run a node (oncegate --help "
         "lists them)\n"
         "       oncegate keys COMMAND ...       get, list, release, "
         "complete, redeliver\n"
         "       oncegate cluster COMMAND ...    status, transfer, add, "
         "remove\n"
         "       oncegate routes COMMAND ...     status, pause, resume\n"
         "       oncegate help keys|cluster|routes  a group's commands\n\n"
      << options_help << '\n' << exit_help << "More: docs/cli.md.\n";
}

// A usage error above a command: why, and where the commands are.
exit_code group_usage_error(std::ostream& err, std::string_view group,
                            std::string_view why) {
  err << "oncegate: " << why << "\nusage: oncegate " << group << ' ';
  const char* sep = "";
  for (auto& cmd : *group_commands(group)) {
    err << sep << cmd.name;
    sep = "|";
  }
  err << " ARGS... (oncegate " << group << " --help)\n";
  return exit_code::usage;
}

// Overwrites a --token value in argv once it was copied, so that `ps` shows
// it only for the first moments of the process.
void scrub_token(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--")
      return;
    if (arg.rfind("--token=", 0) == 0) {
      std::memset(argv[i] + 8, 'x', arg.size() - 8);
    } else if (arg == "--token" && i + 1 < argc) {
      std::memset(argv[i + 1], 'x', std::strlen(argv[i + 1]));
      ++i;
    }
  }
}

// Where the token comes from: --token, --token-file or ONCEGATE_TOKEN
// (in that order; none: no token). A token must fit a header line.
bool find_token(const parsed_args& args, std::string& token,
                std::string& why) {
  if (args.has("token") && args.has("token-file")) {
    why = "give --token or --token-file, not both";
    return false;
  }
  std::string source;
  if (auto t = args.value("token")) {
    token = *t;
    source = "--token";
  } else if (auto path = args.value("token-file")) {
    // The first line, as the node reads admin.token-file.
    std::ifstream in{*path};
    if (!in || !std::getline(in, token)) {
      why = "cannot read a token from --token-file " + display(*path);
      return false;
    }
    if (!token.empty() && token.back() == '\r')
      token.pop_back();
    source = "--token-file " + display(*path);
  } else if (auto env = std::getenv(token_env.data()); env && *env) {
    token = env;
    source = std::string{token_env};
  } else {
    return true;
  }
  if (token.empty()) {
    why = "the token from " + source + " is empty";
    return false;
  }
  // Far beyond any node's header limit (16 KiB by default), and below the
  // 64 KiB the HTTP library takes for one field.
  constexpr size_t max_token = 32 * 1024;
  if (token.size() > max_token) {
    why = "the token from " + source + " is longer than "
          + std::to_string(max_token) + " bytes";
    return false;
  }
  for (char c : token)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      why = "the token from " + source
            + " holds a control character, which no header can carry";
      return false;
    }
  return true;
}

} // namespace

bool wants_admin_cli(int argc, char** argv) {
  if (argc < 2)
    return false;
  std::string_view first = argv[1];
  if (first == "keys" || first == "cluster" || first == "routes"
      || first == "help")
    return true;
  for (std::string_view opt : {"--node", "--token", "--token-file",
                               "--ca-file", "--timeout"})
    if (first == opt
        || (first.size() > opt.size() && first.substr(0, opt.size()) == opt
            && first[opt.size()] == '='))
      return true;
  return first == "--json";
}

int run_admin_cli(int argc, char** argv, std::string_view version) {
  std::vector<std::string> all{argv + 1, argv + argc};
  scrub_token(argc, argv);
  // The command words (group, name) may follow global options; every
  // other argument is the command's.
  std::vector<std::string> words;
  std::vector<std::string> rest;
  for (size_t i = 0; i < all.size(); ++i) {
    auto& arg = all[i];
    if (words.size() >= 2 || arg == "--") {
      rest.insert(rest.end(), all.begin() + static_cast<long>(i), all.end());
      break;
    }
    if (arg.size() > 1 && arg[0] == '-') {
      rest.push_back(arg);
      bool takes_value = arg == "--node" || arg == "--token"
                         || arg == "--token-file" || arg == "--ca-file"
                         || arg == "--timeout";
      if (takes_value && i + 1 < all.size())
        rest.push_back(all[++i]);
      continue;
    }
    words.push_back(arg);
  }
  auto& out = std::cout;
  auto& err = std::cerr;
  auto wants_help = [&rest] {
    for (auto& a : rest) {
      if (a == "--")
        return false;
      if (a == "--help" || a == "-h")
        return true;
    }
    return false;
  };
  if (words.empty()) {
    if (wants_help()) {
      print_overview(out, version);
      return to_int(exit_code::ok);
    }
    err << "oncegate: no command given (oncegate help)\n";
    return to_int(exit_code::usage);
  }
  auto& group = words[0];
  if (group == "help") {
    if (words.size() > 1 && group_commands(words[1])) {
      print_group(out, words[1]);
      return to_int(exit_code::ok);
    }
    if (words.size() > 1) {
      err << "oncegate: no help on " << display(words[1])
          << " (keys, cluster, routes)\n";
      return to_int(exit_code::usage);
    }
    print_overview(out, version);
    return to_int(exit_code::ok);
  }
  auto commands = group_commands(group);
  if (!commands) {
    err << "oncegate: unknown command " << display(group)
        << " (oncegate help)\n";
    return to_int(exit_code::usage);
  }
  // `oncegate keys help`, `oncegate keys --help`.
  if (words.size() >= 2 ? words[1] == "help" : wants_help()) {
    print_group(out, group);
    return to_int(exit_code::ok);
  }
  if (words.size() < 2)
    return to_int(group_usage_error(err, group, group + ": which command?"));
  const command_spec* cmd = nullptr;
  for (auto& c : *commands)
    if (c.name == words[1])
      cmd = &c;
  if (!cmd)
    return to_int(group_usage_error(err, group,
                                    "unknown command " + group + " "
                                      + display(words[1])));
  auto specs = cmd->options;
  specs.insert(specs.end(), global_options.begin(), global_options.end());
  auto parsed = parse_args(rest, specs);
  if (auto why = std::get_if<std::string>(&parsed))
    return to_int(usage_error(err, *cmd, *why));
  auto& args = std::get<parsed_args>(parsed);
  if (args.has("help")) {
    print_group(out, group);
    return to_int(exit_code::ok);
  }
  auto n = args.positional.size();
  if (n < cmd->min_args || n > cmd->max_args) {
    std::string why = n < cmd->min_args ? "missing arguments"
                                        : "too many arguments";
    return to_int(usage_error(err, *cmd, why));
  }
  std::string node_text{default_node};
  std::string node_source = "the default";
  if (auto v = args.value("node")) {
    node_text = *v;
    node_source = "--node";
  } else if (auto env = std::getenv(node_env.data()); env && *env) {
    node_text = env;
    node_source = std::string{node_env};
  }
  auto where = parse_node_address(node_text);
  if (auto why = std::get_if<std::string>(&where)) {
    // A user part may hold a password: never echo it.
    auto shown = node_text;
    if (auto at = shown.rfind('@'); at != std::string::npos) {
      auto scheme = shown.find("://");
      auto start = scheme == std::string::npos || scheme > at ? 0 : scheme + 3;
      shown.replace(start, at - start, "***");
    }
    return to_int(usage_error(err, *cmd,
                              "bad node address " + display(shown) + " from "
                                + node_source + ": " + *why));
  }
  auto& node = std::get<node_address>(where);
  // The trust for an https:// node; ONCEGATE_CA_FILE is ignored for
  // http://, which a shell that sets it for one node may also use.
  std::shared_ptr<const gateway::upstream_tls> tls;
  auto ca_file = args.value("ca-file");
  if (ca_file && !node.tls)
    return to_int(usage_error(err, *cmd,
                              "--ca-file is for an https:// node, and "
                                + node.url() + " is not one"));
  std::string ca_source = "--ca-file";
  if (!ca_file)
    if (auto env = std::getenv(ca_file_env.data()); env && *env) {
      ca_file = env;
      ca_source = std::string{ca_file_env};
    }
  if (node.tls) {
    auto made = make_client_tls(ca_file.value_or(""));
    if (auto why = std::get_if<std::string>(&made))
      return to_int(usage_error(err, *cmd,
                                (ca_file ? ca_source + ": " : std::string{})
                                  + safe_text(*why)));
    tls = std::get<0>(std::move(made));
  }
  std::string token;
  std::string why;
  if (!find_token(args, token, why))
    return to_int(usage_error(err, *cmd, why));
  if (args.has("token"))
    err << "oncegate: warning: --token is visible to other users of this "
           "host (ps); prefer ONCEGATE_TOKEN or --token-file\n";
  transport_limits limits;
  if (auto text = args.value("timeout")) {
    auto d = parse_duration(*text);
    if (!d)
      return to_int(usage_error(err, *cmd,
                                "--timeout must be a duration of 1ms..1h, "
                                "e.g. 10s or 500ms"));
    limits.request = *d;
  }
  node_client client{std::move(node), std::move(token), limits,
                     "oncegate-cli/" + std::string{version}, std::move(tls)};
  command_context ctx{client, args.has("json"), out, err};
  auto code = cmd->run(ctx, *cmd, args);
  out.flush();
  return to_int(code);
}

} // namespace oncegate::cli
