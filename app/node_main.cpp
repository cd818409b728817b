#include "app/node_main.hpp"

#include "app/cache_coherence.hpp"

#include <atomic>
#include <csignal>
#include <malloc.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
#include <thread>

#include <caf/actor_system.hpp>

#include "actors/node.hpp"
#include "routing/cluster_node.hpp"
#include "common/clock_offset.hpp"
#include "common/errc.hpp"
#include "common/inline_execution.hpp"
#include "common/logging.hpp"
#include "persistence/wal_check.hpp"
#include "routing/routed_service.hpp"
#include "persistence/command.hpp"
#include "service/local_service.hpp"
#include "http/http_server.hpp"
#include "app/node_config.hpp"
#include "api/webhook_handler.hpp"

namespace oncegate::gateway {

namespace {

/// The exit code that asks the supervisor for a restart (EX_TEMPFAIL): the
/// node cannot go on in this process, a fresh one can (systemd's
/// `Restart=on-failure` restarts it; so does the drill runner).
constexpr int exit_restart = 75;

/// The exit code of a start refused because the WAL holds committed
/// transactions SQLite would drop (EX_DATAERR): a restart does not help,
/// the operator must restore or accept the loss (`--accept-wal-loss`).
constexpr int exit_wal_damaged = 65;

// The exit code of a failed start.
int start_failed(const caf::error& err) {
  return errc_of(err) == errc::wal_damaged ? exit_wal_damaged : 1;
}

// Stops the node from any thread with an exit code, also before the HTTP
// server exists (it then stops as soon as it is attached).
class node_stopper {
public:
  void attach(http_server* server) {
    std::lock_guard<std::mutex> guard{mtx_};
    server_ = server;
    if (server_ && code_)
      server_->stop();
  }

  void stop(int code) {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!code_)
      code_ = code;
    if (server_)
      server_->stop();
  }

  int code_or(int fallback) {
    std::lock_guard<std::mutex> guard{mtx_};
    return code_ ? *code_ : fallback;
  }

private:
  std::mutex mtx_;
  http_server* server_ = nullptr;
  std::optional<int> code_;
};

// CAF reports a bad value in the config file by line and column only:
// quote that line, which names the option.
std::string config_file_context(const node_config& cfg,
                                 const std::string& rendered) {
  auto pos = rendered.find("\"line\" = ");
  if (pos == std::string::npos || cfg.config_file_path.empty())
    return {};
  auto line_no = std::atoi(rendered.c_str() + pos + 9);
  std::ifstream in{cfg.config_file_path};
  std::string line;
  for (int i = 1; i <= line_no && std::getline(in, line); ++i)
    if (i == line_no) {
      // Never echo a secret: name the key, not its value.
      if (line.find("token") != std::string::npos
          || line.find("secret") != std::string::npos)
        line = line.substr(0, line.find('=')) + "= ***";
      return " in " + cfg.config_file_path + " line "
             + std::to_string(line_no) + ": `" + line + "`";
    }
  return {};
}

// `--check-config FILE` (or `--check-config=FILE`): the same as
// `--config-file=FILE` plus the check mode. Other arguments are kept.
std::vector<std::string> expand_check_config(int argc, char** argv,
                                             bool& check) {
  std::vector<std::string> args{argv, argv + argc};
  for (size_t i = 1; i < args.size(); ++i) {
    // CAF's own `--dump-config` prints secrets in clear: it means the
    // check mode here, which masks them.
    if (args[i] == "--dump-config") {
      check = true;
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
      --i;
      continue;
    }
    if (args[i] == "--check-config" && i + 1 < args.size()
        && args[i + 1].rfind("--", 0) != 0) {
      check = true;
      args[i] = "--config-file=" + args[i + 1];
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    } else if (args[i].rfind("--check-config=", 0) == 0) {
      check = true;
      args[i] = "--config-file=" + args[i].substr(15);
    }
  }
  return args;
}

// The printed form of `value`; a secret (`admin.token`, a route's
// `secret`) is masked unless it is empty.
std::string printable(const std::string& name, const caf::config_value& value) {
  auto last = name.substr(name.rfind('.') + 1);
  // A duration in the largest unit that holds it exactly, one the parser
  // reads back (CAF prints days, "3d", which neither flags nor the file
  // accept).
  if (auto span = caf::get_if<caf::timespan>(&value)) {
    auto ns = span->count();
    if (ns == 0)
      return "0s";
    struct unit {
      int64_t ns;
      const char* name;
    };
    for (auto u : {unit{3600'000'000'000, "h"}, unit{60'000'000'000, "min"},
                   unit{1'000'000'000, "s"}, unit{1'000'000, "ms"},
                   unit{1'000, "us"}})
      if (ns % u.ns == 0)
        return std::to_string(ns / u.ns) + u.name;
    return std::to_string(ns) + "ns";
  }
  auto text = caf::to_string(value);
  if ((last == "token" || last == "secret") && text != "\"\"")
    return "***";
  return text;
}

// Prints every option with its effective value (default or set) as
// `group.key=value`, secrets masked; then what else the file set (routes).
void print_effective(const node_config& cfg) {
  for (auto& opt : cfg.options()) {
    auto value = opt.get();
    if (!value)
      continue;
    auto text = [](caf::string_view x) {
      return std::string{x.data(), x.size()};
    };
    auto name = text(opt.category()) == "global"
                  ? text(opt.long_name())
                  : text(opt.category()) + "." + text(opt.long_name());
    std::cout << name << '=' << printable(name, *value) << '\n';
  }
  if (auto routes = caf::get_if<caf::settings>(&cfg.content, "route"))
    for (auto& [route, section] : *routes)
      if (auto xs = caf::get_if<caf::settings>(&section))
        for (auto& [key, value] : *xs) {
          auto name = "route." + route + "." + key;
          std::cout << name << '=' << printable(name, value) << '\n';
        }
}

std::string text(caf::string_view x) {
  return std::string{x.data(), x.size()};
}

// `group.key`, or `key` for a top-level option.
std::string full_name(const caf::config_option& opt) {
  auto category = text(opt.category());
  return category == "global" ? text(opt.long_name())
                              : category + "." + text(opt.long_name());
}

const caf::config_option* find_option(const node_config& cfg,
                                      const std::string& name) {
  auto dot = name.find('.');
  if (dot == std::string::npos)
    return cfg.options().qualified_name_lookup("global", name);
  return cfg.options().qualified_name_lookup(name.substr(0, dot),
                                             name.substr(dot + 1));
}

// `--NAME=<type>  (default: X)`, the default left out when there is none
// (an empty string or list, a flag that is off). Secrets masked.
std::string option_head(const caf::config_option& opt) {
  auto name = full_name(opt);
  std::string res = "--" + name;
  if (!opt.is_flag())
    res += "=<" + text(opt.type_name()) + '>';
  std::string def;
  if (auto value = opt.get())
    def = printable(name, *value);
  if (!def.empty() && def != "\"\"" && def != "[]"
      && !(opt.is_flag() && def == "false"))
    res += "  (default: " + def + ')';
  return res;
}

void print_usage(const std::string& version) {
  std::cout
    << "oncegate " << version
    << ": webhook idempotency gateway (one node or a Raft cluster)\n"
       "usage: oncegate [--config-file=FILE] [--OPTION=VALUE ...]\n"
       "       oncegate --check-config FILE [--OPTION=VALUE ...]  (or "
       "--dump-config)\n"
       "       oncegate --data-dir=DIR --backup-to=FILE | --version\n"
       "INI file: [group] key=value ([keys] ttl=72h is --keys.ttl=72h); the "
       "command line wins.\n";
}

// `--help`: oncegate's own options, one line each, by what an operator
// configures; tuning options by name. Short: `--long-help` has the rest.
void print_help(const node_config& cfg, const std::string& version) {
  print_usage(version);
  std::cout << "--long-help: every option in full, the actor framework's "
               "(CAF) too. No secret is printed.\n";
  constexpr size_t width = 99;
  for (auto& group : node_config::help_groups()) {
    std::cout << '\n' << group.title << ":\n";
    for (auto note : group.notes)
      std::cout << "  " << note << '\n';
    for (auto& entry : group.options) {
      auto opt = find_option(cfg, entry.name);
      if (opt == nullptr) // a name in the table that is no option: a bug
        continue;
      std::cout << "  " << option_head(*opt) << "  " << entry.words << '\n';
    }
    if (group.tuning.empty())
      continue;
    std::string line = "  tuning:";
    for (auto name : group.tuning) {
      auto word = std::string{" --"} + name;
      if (line.size() + word.size() > width) {
        std::cout << line << '\n';
        line = "         ";
      }
      line += word;
    }
    std::cout << line << '\n';
  }
}

// `--long-help`: every option with its type, default and meaning, by
// group; oncegate's first, then CAF's.
void print_long_help(const node_config& cfg, const std::string& version) {
  print_usage(version);
  auto print = [&](bool own) {
    std::string group;
    for (auto& opt : cfg.options()) {
      if (node_config::own_option(full_name(opt)) != own)
        continue;
      auto category = text(opt.category());
      if (category != group) {
        group = category;
        std::cout << '\n' << group << ":\n";
      }
      std::cout << "  " << option_head(opt) << "\n      "
                << text(opt.description()) << '\n';
    }
  };
  std::cout << "\noncegate's options:\n";
  print(true);
  std::cout << "\nThe actor framework's (CAF 0.17) options, with oncegate's "
               "defaults:\n";
  print(false);
}

// Copies the database at `opts.path` into `cfg.backup_to` in one read
// transaction and says what the copy holds.
int copy_database(const persistence::store_options& opts,
                  const std::string& to) {
  auto db = persistence::sqlite_store::open_reader(opts);
  if (!db) {
    std::cerr << "oncegate: backup failed: " << describe(db.error()) << '\n';
    return 1;
  }
  // One read transaction for the numbers and the copy: the message
  // describes exactly the moment the file holds, writers going on or not.
  auto applied = (*db)->begin_read();
  auto count = (*db)->count();
  auto err = (*db)->backup_to(to);
  (*db)->rollback(); // ends the read transaction
  if (err || !applied || !count) {
    std::cerr << "oncegate: backup failed: "
              << describe(err ? err : !applied ? applied.error()
                                               : count.error())
              << '\n';
    return 1;
  }
  std::cout << "oncegate: backup of " << opts.path << " written to "
            << to << " (" << *count
            << " records, applied index " << *applied
            << ")\n";
  return 0;
}

// Whether a node runs on `dir`: it holds the data dir's lock
// (`oncegate.lock`, actors/node.cpp) for as long as it lives.
bool node_running(const std::string& dir) {
  auto path = (std::filesystem::path{dir} / "oncegate.lock").string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return false;
  bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd); // drops our shared lock, if we got it
  return held;
}

// Copies the database file `from` into `to` (see `backup`).
int backup_file(const node_config& cfg, const std::string& from,
                const std::string& to) {
  auto opts = cfg.node_opts().store;
  opts.path = from;
  // The reader would copy what SQLite reads of a damaged WAL without a word.
  // Only a stopped node's WAL is judged: a running node checked its own at
  // start, and frames it is writing now read as torn or damaged (a backup
  // under writes was refused with exit 65: process.backup).
  if (node_running(cfg.data_dir))
    return copy_database(opts, to);
  auto wal = persistence::check_wal(opts.path);
  if (!wal) {
    std::cerr << "oncegate: backup failed: " << describe(wal.error()) << '\n';
    return 1;
  }
  if (wal->loss) {
    std::cerr << "oncegate: backup refused: "
              << persistence::describe_wal_loss(opts.path, *wal)
              << "; a backup would lack them (docs/operations.md, \"A "
                 "damaged WAL\")\n";
    return exit_wal_damaged;
  }
  return copy_database(opts, to);
}

// `--backup-to=FILE`: copies the database of `data-dir` (running node or
// not) into FILE through a read-only connection; a cluster node's
// partitions beyond the first (`oncegate-p<g>.db`) into `FILE.p<g>`, one
// after the other (each consistent as of its own moment: a partition's
// records are its own).
int backup(const node_config& cfg) {
  auto code = backup_file(cfg, cluster::partition_db(cfg.data_dir, 0),
                          cfg.backup_to);
  for (uint16_t g = 1; code == 0 && g < link::max_groups; ++g) {
    auto from = cluster::partition_db(cfg.data_dir, g);
    std::error_code ec;
    if (!std::filesystem::exists(from, ec))
      break;
    code = backup_file(cfg, from, cfg.backup_to + ".p" + std::to_string(g));
  }
  return code;
}

} // namespace

int run_node(int argc, char** argv, const run_options& ro) {
  // A peer that closes early must cost an error code, not the process.
  std::signal(SIGPIPE, SIG_IGN);
  // SIGHUP reloads the listener's TLS files once the listener catches
  // signals (`http_server::handle_signals`); before and after that it must
  // not end the node (the default action), e.g. a `systemctl reload` while
  // it starts or stops.
  std::signal(SIGHUP, SIG_IGN);
  // Everything the node writes (database, WAL, Raft log, backups, log
  // files) is for its owner only.
  ::umask(077);
  // Large buffers (signals, answers, snapshot images) go straight to mmap
  // and back to the system when freed: glibc's default threshold grows
  // with every freed large buffer until they stay in the heap, and the
  // process keeps the peak of a flood for good.
  ::mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  node_config cfg;
  bool check = false;
  auto args = expand_check_config(argc, argv, check);
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h" || args[i] == "-?") {
      print_help(cfg, ro.version);
      return 0;
    }
    if (args[i] == "--long-help") {
      print_long_help(cfg, ro.version);
      return 0;
    }
  }
  // A directory reads as an empty file and a FIFO blocks the reader:
  // refuse anything but a regular file (or a link to one), and /dev/null
  // (no file).
  for (auto& arg : args)
    if (arg.rfind("--config-file=", 0) == 0) {
      auto path = arg.substr(14);
      struct stat st {};
      struct stat null_st {};
      if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)
          && !(S_ISCHR(st.st_mode) && ::stat("/dev/null", &null_st) == 0
               && st.st_rdev == null_st.st_rdev)) {
        std::cerr << "oncegate: bad configuration: config file " << path
                  << " is not a regular file\n";
        return 2;
      }
    }
  if (auto problem = cfg.oversized_number(args); !problem.empty()) {
    std::cerr << "oncegate: bad configuration: bad value for " << problem
              << '\n';
    return 2;
  }
  std::vector<char*> arg_ptrs;
  for (auto& arg : args)
    arg_ptrs.push_back(arg.data());
  if (auto err = cfg.parse(static_cast<int>(arg_ptrs.size()),
                           arg_ptrs.data())) {
    std::cerr << "oncegate: bad configuration: " << cfg.render(err)
              << config_file_context(cfg, cfg.render(err)) << '\n';
    return 2;
  }
  if (cfg.cli_helptext_printed)
    return 0;
  if (cfg.version) {
    std::cout << "oncegate " << ro.version << '\n';
    return 0;
  }
  if (auto problem = cfg.validate(); !problem.empty()) {
    std::cerr << "oncegate: bad configuration: " << problem << '\n';
    return 2;
  }
  std::string error;
  auto web = cfg.webhook_opts(process_env, error);
  if (!web) {
    std::cerr << "oncegate: bad configuration: " << error << '\n';
    return 2;
  }
  std::vector<std::string> warnings;
  if (auto problem = cfg.check_route_ttls(*web, warnings); !problem.empty()) {
    std::cerr << "oncegate: bad configuration: " << problem << '\n';
    return 2;
  }
  cfg.check_admin(*web, warnings);
  auto in_flight_deadline = cfg.in_flight_deadline_ms(*web);
  std::optional<cluster::cluster_options> copts;
  if (cfg.clustered()) {
    copts = cfg.cluster_opts(error);
    if (!copts) {
      std::cerr << "oncegate: bad configuration: " << error << '\n';
      return 2;
    }
    copts->store.in_flight_deadline_ms = in_flight_deadline;
  }
  if (!cfg.backup_to.empty())
    return backup(cfg);
  auto listener_tls = cfg.listener_tls(error);
  if (!listener_tls) {
    std::cerr << "oncegate: bad configuration: " << error << '\n';
    return 2;
  }
  if (*listener_tls && (*listener_tls)->out_of_validity())
    warnings.push_back("http.tls-certificate: " + cfg.tls_certificate
                       + " is outside its validity (not after "
                       + (*listener_tls)->not_after()
                       + "): clients refuse it");
  if (check) {
    // Everything that can be checked without starting: print the result.
    std::cout << "# oncegate " << ro.version << ": configuration OK ("
              << (cfg.config_file_path.empty() ? std::string{"no file"}
                                               : cfg.config_file_path)
              << ")\n";
    for (auto& w : warnings)
      std::cout << "# warning: " << w << '\n';
    if (*listener_tls)
      std::cout << "# https: certificate serial "
                << (*listener_tls)->serial() << ", not after "
                << (*listener_tls)->not_after() << '\n';
    print_effective(cfg);
    return 0;
  }
  if (auto problem = log::init(cfg.log_opts()); !problem.empty()) {
    std::cerr << "oncegate: bad configuration: " << problem << '\n';
    return 2;
  }
  for (auto& w : warnings)
    log::gateway()->warn("config.warning {}", w);
  if (cfg.clustered() && cfg.cluster_insecure)
    log::cluster()->warn("cluster.insecure: the nodes talk in plain text "
                         "without authentication; anyone who reaches the "
                         "cluster ports can release keys and take over the "
                         "cluster (set cluster.tls-*, docs/cluster.md)");
  caf::actor_system sys{cfg};
  // One clock for the whole node (see `node_clock`).
  auto node_time = std::make_shared<node_clock>();
  auto clock = read_clock(node_time);
  auto caches = std::make_shared<cache_coherence>();
  auto stopper = std::make_shared<node_stopper>();
  std::optional<node> single;
  std::unique_ptr<cluster::cluster_node> clustered;
  std::unique_ptr<node_service> service;
  // A cluster node's clock against the leader's (see clock_offset_monitor),
  // from the stamps of the entries it applies as a follower.
  std::shared_ptr<clock_offset_monitor> offsets;
  auto raft_ref
    = std::make_shared<std::atomic<const cluster::raft_node*>>(nullptr);
  if (copts) {
    offsets = std::make_shared<clock_offset_monitor>(cfg.clock_offset_opts());
    web->clock_offset = offsets;
    cluster::cluster_hooks hooks;
    hooks.on_applied = [caches, offsets, raft_ref,
                        off = std::make_shared<bool>(false)](
                         uint16_t group,
                         const std::vector<persistence::command>& cmds,
                         const std::vector<persistence::command_result>&) {
      caches->applied(cmds);
      // Runs on the Raft thread only, hence the plain `off`. The entries
      // of a partition this node leads carry its own stamps: they measure
      // nothing; a node that leads every partition is the cluster's clock.
      auto r = raft_ref->load(std::memory_order_acquire);
      if (r != nullptr && r->brief(group).role == cluster::raft_role::leader) {
        bool all = true;
        for (uint16_t g = 0; all && g < r->groups(); ++g)
          all = r->brief(g).role == cluster::raft_role::leader;
        if (all)
          offsets->lead();
      } else if (auto stamp = persistence::leader_stamp(cmds); stamp > 0)
        offsets->observe(stamp);
      auto now = offsets->read();
      if (now.exceeded != *off) {
        *off = now.exceeded;
        if (now.exceeded)
          log::cluster()->error("clock.offset_exceeded offset_ms={} max_ms={} "
                                "(not ready; fix this node's clock)",
                                now.offset_ms,
                                offsets->options().max_offset_ms);
        else
          log::cluster()->info("clock.offset_ok offset_ms={}", now.offset_ms);
      }
    };
    hooks.on_restored = [caches](uint16_t) { caches->restored(); };
    hooks.on_unavailable = [stopper] {
      log::cluster()->critical("node.exiting code={} reason=raft_unavailable "
                               "(the supervisor restarts it)",
                               exit_restart);
      stopper->stop(exit_restart);
    };
    auto nopts = cfg.node_opts();
    if (ro.tweak)
      ro.tweak(nopts, &*copts);
    auto n = cluster::start_cluster_node(sys, std::move(nopts), *copts,
                                         std::move(hooks), clock);
    if (!n) {
      log::store()->critical("node.start_failed error={}",
                             sys.render(n.error()));
      return start_failed(n.error());
    }
    clustered = std::move(*n);
    raft_ref->store(clustered->raft.get(), std::memory_order_release);
    service = make_routed_service(*clustered, cfg.service_opts());
  } else {
    auto nopts = cfg.node_opts();
    nopts.store_actor.in_flight_deadline_ms = in_flight_deadline;
    nopts.on_store_clock = [node_time](int64_t store_clock) {
      if (store_clock > node_time->now())
        log::store()->warn("clock.behind_store by_ms={} (the clock was set "
                           "back; time runs on from the store's)",
                           store_clock - node_time->now());
      node_time->raise(store_clock);
    };
    if (ro.tweak)
      ro.tweak(nopts, nullptr);
    auto n = start_node(sys, std::move(nopts), clock);
    if (!n) {
      log::store()->critical("node.start_failed error={}",
                             sys.render(n.error()));
      return start_failed(n.error());
    }
    single = std::move(*n);
    service = make_local_service(sys, *single, cfg.service_opts().service);
  }
  auto exit_code = 0;
  {
    auto hopts = cfg.http_opts();
    hopts.tls = std::move(*listener_tls);
    // Descriptors besides the listener's connections: SQLite, Raft, logs
    // (about 15 measured) and every upstream pool's connections.
    for (auto& r : web->routes.routes)
      if (r.upstream)
        hopts.fd_reserve += r.upstream->max_connections;
    // The HTTP threads run the actors their requests wake from their own
    // loop, where the service lets them (common/inline_execution.hpp).
    hopts.on_loop_start = [&sys](inline_exec::deferrer defer) {
      inline_exec::run_woken_actors_here(sys, std::move(defer));
    };
    hopts.on_loop_end = [] { inline_exec::stop_running_here(); };
    webhook_handler handler{std::move(*web), *service, clock, wall_clock_ms};
    caches->attach(&handler);
    auto server = http_server::listen(hopts, handler, error);
    if (!server) {
      log::gateway()->critical("node.listen_failed error={}", error);
      exit_code = 1;
    } else {
      // Before the ready line: a signal sent after it meets the server.
      server->handle_signals();
      if (hopts.tls)
        log::gateway()->info("http.tls certificate={} serial={} not_after={}",
                             hopts.tls->files().certificate,
                             hopts.tls->serial(), hopts.tls->not_after());
      log::gateway()->info("node.ready http={}:{} tls={} data_dir={} "
                           "store={}",
                           cfg.http_host, server->port(),
                           server->tls() ? "on" : "off", cfg.data_dir,
                           cfg.store_on_scheduler ? "scheduler"
                                                  : "own-thread");
      // One machine-readable line on stdout for scripts and tests.
      std::cout << "oncegate ready http=" << cfg.http_host << ':'
                << server->port() << std::endl;
      stopper->attach(server.get());
      server->run(true);
      stopper->attach(nullptr);
      handler.stop_delivery();
      exit_code = stopper->code_or(exit_code);
      // Forwards answered 202 (`respond-after`) may still run: record their
      // outcomes before the actors stop, bounded by the shutdown grace (a
      // forward ends within its upstream timeouts).
      if (auto n = handler.forwards_in_flight(); n > 0) {
        log::gateway()->info("node.waiting_for_forwards count={}", n);
        auto left = handler.wait_for_forwards(hopts.shutdown_grace);
        if (left > 0)
          log::gateway()->warn("node.forwards_abandoned count={} (in doubt "
                               "at the next start)",
                               left);
        else
          log::gateway()->info("node.forwards_recorded");
      }
    }
    caches->attach(nullptr);
  }
  // The server is gone, and with it the SIGHUP handler: back to ignoring.
  std::signal(SIGHUP, SIG_IGN);
  // Every HTTP request is answered; now stop the actors. The store commits
  // what it holds before it exits, and the actor system waits for it.
  service.reset();
  if (single)
    single->shutdown();
  if (clustered)
    clustered->shutdown();
  log::gateway()->info("node.stopped");
  // What remains is the actor system's teardown. Everything acknowledged is
  // durable by now. The watchdog stays as a last resort; its log line is
  // counted by the tests (process.shutdown, process.cluster), which expect
  // none.
  std::thread{[exit_code, grace = cfg.shutdown_grace] {
    std::this_thread::sleep_for(grace);
    log::gateway()->critical("node.exit_forced after={}ms",
                             std::chrono::duration_cast<
                               std::chrono::milliseconds>(grace)
                               .count());
    std::_Exit(exit_code);
  }}.detach();
  return exit_code;
}

} // namespace oncegate::gateway
