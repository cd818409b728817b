// raft_floor: what one Raft commit costs on this machine, without oncegate.
//
// Three (or --voters) libraft servers in one process, each on its own
// thread and libuv loop with its own data directory under --dir (so the
// appends hit the same disk as a cluster's would), an FSM that does
// nothing. Once a leader is elected it proposes --entries entries of
// --bytes bytes, one at a time (the next from the previous one's apply
// callback), and prints the apply -> committed latencies: the floor under
// an unloaded cluster decision (leader's append and a follower's append,
// both fsynced, and the round trip between them).
//
//   raft_floor --dir=DIR --port=P [--voters=3] [--entries=2000]
//              [--bytes=112] [--transport=tcp|link] [--apply-us=0]
//
// Server i listens on 127.0.0.1:P+i-1. --transport=tcp is libraft's own
// TCP transport; link is oncegate's node link (link/node_link.hpp) in
// plain TCP: the difference is the link's own cost. --apply-us=N makes
// every apply busy its loop for N us, like an FSM that writes SQLite
// there. Prints one RESULT line. Every run is bounded by --entries and a
// 120 s deadline.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "link/node_link.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct options {
  std::string dir;
  unsigned voters = 3;
  unsigned entries = 2000;
  unsigned bytes = 112;
  std::string transport = "tcp";
};

struct server;

struct shared_state {
  options opts;
  std::map<uint64_t, std::string> peers;
  std::atomic<bool> started{false};
  std::atomic<bool> done{false};
  std::vector<double> latencies_us;
  int failures = 0;
};

// --apply-us=N: each apply busies its loop thread for N us, like an FSM
// that writes its entry to SQLite inside libraft's apply.
unsigned apply_us = 0;

int fsm_apply(raft_fsm*, const raft_buffer*, void** result) {
  *result = nullptr;
  if (apply_us > 0) {
    auto until = clock_type::now() + std::chrono::microseconds(apply_us);
    while (clock_type::now() < until) {
    }
  }
  return 0;
}

int fsm_snapshot(raft_fsm*, raft_buffer* bufs[], unsigned* n) {
  *bufs = static_cast<raft_buffer*>(raft_malloc(sizeof(raft_buffer)));
  (*bufs)[0].len = 8;
  (*bufs)[0].base = raft_calloc(1, 8);
  *n = 1;
  return 0;
}

int fsm_restore(raft_fsm*, raft_buffer* buf) {
  raft_free(buf->base);
  return 0;
}

struct server {
  shared_state* st = nullptr;
  uint64_t id = 0;
  uv_loop_t loop{};
  uv_timer_t poll{};
  raft_uv_transport transport{};
  raft_io io{};
  raft_fsm fsm{};
  raft r{};
  struct raft_apply req{};
  clock_type::time_point sent;
  unsigned proposed = 0;
  std::thread thread;

  void propose() {
    raft_buffer buf;
    buf.len = st->opts.bytes;
    buf.base = raft_calloc(1, buf.len);
    req.data = this;
    sent = clock_type::now();
    if (raft_apply(&r, &req, &buf, 1, &server::applied) != 0) {
      raft_free(buf.base);
      ++st->failures;
      st->done = true;
    }
  }

  static void applied(struct raft_apply* req, int status, void*) {
    auto* s = static_cast<server*>(req->data);
    auto us = std::chrono::duration<double, std::micro>(clock_type::now()
                                                        - s->sent)
                .count();
    if (status != 0) {
      ++s->st->failures;
      s->st->done = true;
      return;
    }
    s->st->latencies_us.push_back(us);
    if (++s->proposed >= s->st->opts.entries) {
      s->st->done = true;
      return;
    }
    s->propose();
  }

  static void tick(uv_timer_t* t) {
    auto* s = static_cast<server*>(t->data);
    if (s->st->done) {
      uv_timer_stop(&s->poll);
      raft_close(&s->r, [](raft* r) {
        auto* s = static_cast<server*>(r->data);
        raft_uv_close(&s->io);
        if (s->st->opts.transport == "tcp")
          raft_uv_tcp_close(&s->transport);
        else
          oncegate::link::close(&s->transport);
        uv_close(reinterpret_cast<uv_handle_t*>(&s->poll), nullptr);
      });
      return;
    }
    if (raft_state(&s->r) == RAFT_LEADER && !s->st->started.exchange(true))
      s->propose();
  }

  bool start(shared_state& shared, uint64_t my_id) {
    st = &shared;
    id = my_id;
    uv_loop_init(&loop);
    auto dir = st->opts.dir + "/" + std::to_string(id);
    std::filesystem::create_directories(dir);
    int rv = 0;
    if (st->opts.transport == "tcp") {
      rv = raft_uv_tcp_init(&transport, &loop);
    } else {
      oncegate::link::options lo;
      lo.peers = st->peers;
      std::string error;
      rv = oncegate::link::init(&transport, &loop, lo, error);
      if (rv != 0)
        std::fprintf(stderr, "link: %s\n", error.c_str());
    }
    if (rv != 0)
      return false;
    if (raft_uv_init(&io, &loop, dir.c_str(), &transport) != 0)
      return false;
    fsm.version = 1;
    fsm.apply = fsm_apply;
    fsm.snapshot = fsm_snapshot;
    fsm.restore = fsm_restore;
    if (raft_init(&r, &io, &fsm, id, st->peers.at(id).c_str()) != 0)
      return false;
    r.data = this;
    raft_set_election_timeout(&r, 300);
    raft_set_heartbeat_timeout(&r, 30);
    raft_set_snapshot_threshold(&r, 1u << 30);
    raft_configuration conf;
    raft_configuration_init(&conf);
    for (auto& [pid, addr] : st->peers)
      raft_configuration_add(&conf, pid, addr.c_str(), RAFT_VOTER);
    rv = raft_bootstrap(&r, &conf);
    raft_configuration_close(&conf);
    if (rv != 0 && rv != RAFT_CANTBOOTSTRAP)
      return false;
    if (raft_start(&r) != 0)
      return false;
    uv_timer_init(&loop, &poll);
    poll.data = this;
    uv_timer_start(&poll, &server::tick, 5, 5);
    thread = std::thread([this] { uv_run(&loop, UV_RUN_DEFAULT); });
    return true;
  }
};

bool value_of(const char* arg, const char* name, std::string& out) {
  auto n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=')
    return false;
  out = arg + n + 1;
  return true;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  auto i = static_cast<size_t>(p / 100.0 * (v.size() - 1));
  return v[i];
}

} // namespace

int main(int argc, char** argv) {
  shared_state st;
  auto& o = st.opts;
  unsigned base_port = 0;
  for (int i = 1; i < argc; ++i) {
    std::string v;
    if (value_of(argv[i], "--dir", v))
      o.dir = v;
    else if (value_of(argv[i], "--voters", v))
      o.voters = static_cast<unsigned>(std::stoul(v));
    else if (value_of(argv[i], "--entries", v))
      o.entries = static_cast<unsigned>(std::stoul(v));
    else if (value_of(argv[i], "--bytes", v))
      o.bytes = static_cast<unsigned>(std::stoul(v));
    else if (value_of(argv[i], "--transport", v))
      o.transport = v;
    else if (value_of(argv[i], "--apply-us", v))
      apply_us = static_cast<unsigned>(std::stoul(v));
    else if (value_of(argv[i], "--port", v))
      base_port = static_cast<unsigned>(std::stoul(v));
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (o.dir.empty() || base_port == 0 || o.voters < 1 || o.voters > 7
      || o.entries == 0 || o.bytes == 0 || o.bytes % 8 != 0
      || (o.transport != "tcp" && o.transport != "link")) {
    std::fprintf(stderr, "usage: raft_floor --dir=DIR --port=P [--voters=3] "
                         "[--entries=2000] [--bytes=112 (multiple of 8)] "
                         "[--transport=tcp|link]\n");
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);
  for (unsigned i = 1; i <= o.voters; ++i)
    st.peers[i] = "127.0.0.1:" + std::to_string(base_port + i - 1);
  std::vector<std::unique_ptr<server>> servers;
  for (unsigned i = 1; i <= o.voters; ++i) {
    servers.push_back(std::make_unique<server>());
    if (!servers.back()->start(st, i)) {
      std::fprintf(stderr, "server %u did not start\n", i);
      return 1;
    }
  }
  auto deadline = clock_type::now() + std::chrono::seconds(120);
  while (!st.done && clock_type::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  st.done = true;
  for (auto& s : servers)
    s->thread.join();
  if (st.latencies_us.empty() || st.failures > 0) {
    std::fprintf(stderr, "no commits (%d failures)\n", st.failures);
    return 1;
  }
  std::printf("RESULT transport=%s voters=%u entries=%zu p50_us=%.0f "
              "p90_us=%.0f p99_us=%.0f\n",
              o.transport.c_str(), o.voters, st.latencies_us.size(),
              percentile(st.latencies_us, 50), percentile(st.latencies_us, 90),
              percentile(st.latencies_us, 99));
  return 0;
}
