// raft_idle: what an idle cluster node costs per Raft group (partition).
// One process is one node: it runs `--groups` Raft groups on its one Raft
// thread and node link (`cluster::raft_node`, a SQLite store each, plain TCP
// between the nodes), waits until every group has a leader it knows of,
// then does nothing for `--seconds` and reports the CPU it spent meanwhile
// (getrusage: its Raft thread's timers, heartbeats in and out, the link).
// It waits for the leaderships to have spread over the nodes first.
//
//   raft_idle --id=N --peers=1=127.0.0.1:P1,2=127.0.0.1:P2,... --dir=DIR
//             [--groups=1] [--seconds=60] [--heartbeat-ms=50]
//             [--election-ms=500] [--ready-seconds=60] [--linger=15]
//
// Prints one line: RESULT id=N groups=G seconds=S cpu_ms=C cpu_pct=P
// led=L (groups this node leads at the end); exit 0. No leader in every
// group within --ready-seconds: a message on stderr, exit 1. After the
// line it stays up for --linger seconds, so that the others' measurements
// end before it leaves (bench/raft_idle.sh starts the nodes of a cluster
// together and stops them once each printed its line).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "persistence/sqlite_store.hpp"
#include "replication/raft_node.hpp"

namespace {

using namespace oncegate;
using clock_type = std::chrono::steady_clock;

bool starts_with(const char* arg, const char* prefix, std::string& value) {
  auto n = std::strlen(prefix);
  if (std::strncmp(arg, prefix, n) != 0)
    return false;
  value = arg + n;
  return true;
}

double cpu_ms() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto ms = [](const timeval& tv) {
    return tv.tv_sec * 1000.0 + tv.tv_usec / 1000.0;
  };
  return ms(ru.ru_utime) + ms(ru.ru_stime);
}

int fail(const std::string& why) {
  std::fprintf(stderr, "raft_idle: %s\n", why.c_str());
  return 1;
}

} // namespace

int main(int argc, char** argv) {
  uint64_t id = 0;
  std::string peers, dir, v;
  long groups = 1, seconds = 60, heartbeat = 50, election = 500, ready = 60,
       linger = 15;
  for (int i = 1; i < argc; ++i) {
    if (starts_with(argv[i], "--id=", v))
      id = std::strtoull(v.c_str(), nullptr, 10);
    else if (starts_with(argv[i], "--peers=", v))
      peers = v;
    else if (starts_with(argv[i], "--dir=", v))
      dir = v;
    else if (starts_with(argv[i], "--groups=", v))
      groups = std::strtol(v.c_str(), nullptr, 10);
    else if (starts_with(argv[i], "--seconds=", v))
      seconds = std::strtol(v.c_str(), nullptr, 10);
    else if (starts_with(argv[i], "--heartbeat-ms=", v))
      heartbeat = std::strtol(v.c_str(), nullptr, 10);
    else if (starts_with(argv[i], "--election-ms=", v))
      election = std::strtol(v.c_str(), nullptr, 10);
    else if (starts_with(argv[i], "--ready-seconds=", v))
      ready = std::strtol(v.c_str(), nullptr, 10);
    else if (starts_with(argv[i], "--linger=", v))
      linger = std::strtol(v.c_str(), nullptr, 10);
    else
      return fail(std::string{"unknown argument "} + argv[i]);
  }
  if (id == 0 || peers.empty() || dir.empty() || groups < 1
      || groups > link::max_groups || seconds < 1 || heartbeat < 1
      || election <= heartbeat || ready < 1 || linger < 0)
    return fail("usage: --id=N --peers=ID=HOST:PORT,... --dir=DIR "
                "[--groups=1..256] [--seconds=60] [--heartbeat-ms=50] "
                "[--election-ms=500] [--ready-seconds=60]");
  cluster::raft_node_options ro;
  ro.id = id;
  ro.dir = dir + "/raft";
  ro.heartbeat_timeout_ms = static_cast<uint32_t>(heartbeat);
  ro.election_timeout_ms = static_cast<uint32_t>(election);
  for (size_t pos = 0; pos < peers.size();) {
    auto end = peers.find(',', pos);
    auto item = peers.substr(pos, end == std::string::npos ? std::string::npos
                                                           : end - pos);
    auto eq = item.find('=');
    if (eq == std::string::npos)
      return fail("bad peer " + item);
    auto pid = std::strtoull(item.substr(0, eq).c_str(), nullptr, 10);
    auto address = item.substr(eq + 1);
    ro.link.peers[pid] = address;
    ro.initial.push_back({pid, address});
    if (pid == id)
      ro.address = address;
    pos = end == std::string::npos ? peers.size() : end + 1;
  }
  if (ro.address.empty())
    return fail("--id is not among --peers");
  std::vector<std::shared_ptr<persistence::sqlite_store>> dbs;
  for (long g = 0; g < groups; ++g) {
    persistence::store_options so;
    so.path = dir + "/p" + std::to_string(g) + ".db";
    so.sync_commits = false;
    auto db = persistence::sqlite_store::open(so);
    if (!db)
      return fail("cannot open " + so.path);
    dbs.push_back(std::move(*db));
  }
  auto node = cluster::raft_node::start(
    ro, std::move(dbs), std::vector<cluster::raft_hooks>(groups));
  if (!node)
    return fail("raft_node::start failed");
  auto& raft = **node;
  // Every group led, and the leaderships spread (raft_node balances them:
  // each node leads floor(P/N) or ceil(P/N)), as this node sees them.
  auto all_led = [&] {
    std::map<uint64_t, long> led;
    for (auto& m : ro.initial)
      led[m.id] = 0;
    for (uint16_t g = 0; g < raft.groups(); ++g) {
      auto l = raft.brief(g).leader_id;
      if (l == 0)
        return false;
      ++led[l];
    }
    long lo = groups, hi = 0;
    for (auto& [node, n] : led) {
      lo = std::min(lo, n);
      hi = std::max(hi, n);
    }
    return hi - lo <= 1;
  };
  auto until = clock_type::now() + std::chrono::seconds(ready);
  while (!all_led() && clock_type::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!all_led())
    return fail("not every group has a leader, spread over the nodes, "
                "within --ready-seconds");
  auto cpu0 = cpu_ms();
  auto t0 = clock_type::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  auto cpu = cpu_ms() - cpu0;
  auto secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  int led = 0;
  for (uint16_t g = 0; g < raft.groups(); ++g)
    led += raft.brief(g).leader_id == id;
  std::printf("RESULT id=%llu groups=%ld seconds=%.1f cpu_ms=%.0f "
              "cpu_pct=%.2f led=%d\n",
              static_cast<unsigned long long>(id), groups, secs, cpu,
              cpu / (secs * 10.0), led);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(linger));
  raft.stop();
  return 0;
}
