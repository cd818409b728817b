#define CAF_SUITE replication.raft_fsm
#include "caf/test/unit_test.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include <sqlite3.h>

extern "C" {
#include <raft.h>
#include <raft/fixture.h>
}

#include "replication/raft_fsm.hpp"
#include "common/logging.hpp"
#include "persistence/command.hpp"
#include "persistence/sqlite_store.hpp"
#include "tests/common/fixture.hpp"

using namespace oncegate;
using namespace oncegate::persistence;
using oncegate::test::make_claim;

namespace {

// A positive integer from the environment, or `fallback` when unset (or
// not a positive number).
long env_number(const char* name, long fallback) {
  auto str = std::getenv(name);
  if (str == nullptr || *str == '\0')
    return fallback;
  auto value = std::strtol(str, nullptr, 10);
  return value > 0 ? value : fallback;
}

// Every row of the records table plus the applied index, read through a
// connection of its own: what replicas must agree on.
std::vector<std::string> dump(const std::string& path) {
  std::vector<std::string> rows;
  sqlite3* db = nullptr;
  CAF_REQUIRE_EQUAL(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY,
                                    nullptr),
                    SQLITE_OK);
  auto sql = "SELECT route, key, state, hex(fingerprint), first_seen_ms,"
             "  expires_at_ms, status, hex(response), hex(signal),"
             "  hex(headers), owner, request_id FROM records"
             "  UNION ALL SELECT 'meta', name, value, '', 0, 0, 0, '', '',"
             "  '', 0, 0 FROM meta WHERE name = 'applied_index'"
             "  ORDER BY 1, 2";
  sqlite3_stmt* st = nullptr;
  CAF_REQUIRE_EQUAL(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK);
  while (sqlite3_step(st) == SQLITE_ROW) {
    std::string row;
    for (int i = 0; i < sqlite3_column_count(st); ++i) {
      auto text = sqlite3_column_text(st, i);
      row += text ? reinterpret_cast<const char*>(text) : "NULL";
      row += '|';
    }
    rows.push_back(std::move(row));
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return rows;
}

// The records and the applied index of a snapshot image, restored into a
// file of its own.
std::pair<uint64_t, uint64_t> image_state(const raft_buffer& image) {
  test::temp_dir dir;
  store_options opts;
  opts.path = dir.file("image.db");
  auto db = sqlite_store::open(opts);
  CAF_REQUIRE(db);
  CAF_REQUIRE(!(*db)->restore_image(
    {static_cast<const char*>(image.base), image.len}));
  auto count = (*db)->count();
  auto applied = (*db)->applied_index();
  CAF_REQUIRE(count && applied);
  return {*count, *applied};
}

// Silences info lines (migrations, restores) for many seeded runs.
struct quiet_logs {
  quiet_logs() {
    log::init("warn");
  }
  ~quiet_logs() {
    log::init("info");
  }
};

// libraft 0.15's fixture io keeps the entries that follow an installed
// snapshot from the start of its array, but truncates by absolute index (it
// keeps `index - 1` entries): a follower that installed a snapshot and then
// has to drop conflicting entries reads past the array (a heap overflow under
// AddressSanitizer, a crash in raft_fixture_close otherwise; seed 1635 of the
// fault runs). This shim translates the index by the installed snapshot's.
class fixture_io_shim {
public:
  static void install(raft_io* io) {
    shims()[io] = {io->truncate, io->snapshot_put, 0, 0};
    io->truncate = &truncate;
    io->snapshot_put = &snapshot_put;
  }

  static void remove(raft_io* io) {
    shims().erase(io);
  }

private:
  struct state {
    int (*truncate)(raft_io*, raft_index);
    int (*snapshot_put)(raft_io*, unsigned, raft_io_snapshot_put*,
                        const raft_snapshot*, raft_io_snapshot_put_cb);
    raft_index installing; // index of a snapshot being installed
    raft_index base;       // index of the last installed snapshot
  };

  static std::map<raft_io*, state>& shims() {
    static std::map<raft_io*, state> instance;
    return instance;
  }

  static int truncate(raft_io* io, raft_index index) {
    auto& st = shims().at(io);
    // The fixture's own truncate(1) when it stores an installed snapshot
    // (trailing 0) empties the array: later entries start after the base.
    if (index == 1 && st.installing != 0) {
      st.base = st.installing;
      st.installing = 0;
      return st.truncate(io, 1);
    }
    return st.truncate(io, index > st.base ? index - st.base : 1);
  }

  static int snapshot_put(raft_io* io, unsigned trailing,
                          raft_io_snapshot_put* req, const raft_snapshot* snap,
                          raft_io_snapshot_put_cb cb) {
    auto& st = shims().at(io);
    if (trailing == 0)
      st.installing = snap->index;
    return st.snapshot_put(io, trailing, req, snap, cb);
  }
};

// One replica: its own SQLite file and FSM, and what its hooks saw.
struct replica {
  test::temp_dir dir;
  std::unique_ptr<sqlite_store> db;
  std::unique_ptr<cluster::raft_fsm_adapter> fsm;
  uint64_t hook_commands = 0;
  uint64_t hook_restores = 0;
  /// The index of every entry the hook reported, in the order it did.
  std::vector<uint64_t> hook_indices;
  struct raft* raft = nullptr;
  unsigned id = 0;
};

// One applied entry as a replica's hook reported it.
struct applied_entry {
  std::vector<command> cmds;
  std::vector<command_result> results;
  unsigned replica = 0;  // the first replica that reported it
  uint64_t restores = 0; // snapshots it had installed then
};

// What must be the same on every replica that applied an entry.
std::string describe(const applied_entry& e) {
  std::string out;
  for (size_t i = 0; i < e.cmds.size() && i < e.results.size(); ++i) {
    auto& c = e.cmds[i];
    auto& r = e.results[i];
    out += std::to_string(static_cast<int>(c.type)) + ":";
    switch (c.type) {
      case command::kind::claim:
        out += c.claim.key + "," + to_string(r.claim.outcome) + ","
               + std::to_string(r.claim.rec.first_seen_ms) + ","
               + std::to_string(r.claim.rec.expires_at_ms) + ","
               + std::to_string(r.claim.rec.request_id) + ","
               + std::to_string(static_cast<int>(r.claim.rec.state));
        break;
      case command::kind::update:
        out += c.update.key + "," + std::to_string(r.update.applied) + ","
               + std::to_string(r.update.current.found) + ","
               + std::to_string(r.update.current.rec.first_seen_ms) + ","
               + std::to_string(
                 static_cast<int>(r.update.current.rec.state));
        break;
      case command::kind::purge:
        out += std::to_string(r.purged);
        break;
      case command::kind::doubt:
        out += std::to_string(r.doubted);
        break;
      case command::kind::pause:
        out += c.route + "," + std::to_string(r.pauses.size());
        break;
    }
    out += ";";
  }
  return out;
}

// One proposed command and what the proposer learned about it.
struct proposal {
  struct raft_apply req;
  command cmd;
  int status = -1;
  bool done = false;
  bool answered = false;
  command_result result;
};

void on_applied(struct raft_apply* req, int status, void* result) {
  auto p = static_cast<proposal*>(req->data);
  p->done = true;
  p->status = status;
  // Owned by the FSM adapter, valid during this call.
  auto res = static_cast<std::vector<command_result>*>(result);
  if (status == 0 && res && res->size() == 1) {
    p->answered = true;
    p->result = std::move((*res)[0]);
    // The results are this entry's, not another's.
    if (p->cmd.type == command::kind::claim)
      CAF_CHECK_EQUAL(p->result.claim.rec.key, p->cmd.claim.key);
  }
}

// Whether `p` is an acknowledged grant of a claim.
bool granted(const proposal& p) {
  return p.answered && p.cmd.type == command::kind::claim
         && grants(p.result.claim.outcome);
}

struct cluster_options {
  unsigned nodes = 3;
  bool async_snapshots = false;
  unsigned snapshot_threshold = 1u << 30;
  unsigned snapshot_trailing = 128;
  /// Followers defer their applies (raft_fsm_adapter::defer_follower_applies);
  /// each replica then writes them after a random number of the fixture's
  /// steps (drawn from `flush_seed`), as a node's loop turn ends sooner or
  /// later, so that entries also wait across elections, snapshots, installs
  /// and kills.
  bool defer = false;
  unsigned flush_seed = 1;
  uint32_t busy_timeout_ms = 5000;
};

// A libraft fixture cluster (in-memory network and log, simulated time)
// whose replicas apply entries to real SQLite files through the real FSM.
struct raft_cluster {
  raft_fixture f{}; // libraft expects zeroed memory
  std::vector<std::unique_ptr<replica>> replicas;
  std::vector<std::unique_ptr<proposal>> proposals;
  /// Every entry any replica applied, by log index (an entry covered by a
  /// snapshot that a replica installed is reported by the ones that applied
  /// it); the first replica whose report differed from another's.
  std::map<uint64_t, applied_entry> applied_log;
  std::string apply_mismatch;
  /// Leadership handed over by `settle` to get a follower unstuck.
  struct raft_transfer transfer {};
  int handovers = 0;

  bool defer = false;
  std::minstd_rand flush_rng;

  explicit raft_cluster(cluster_options opts)
    : defer(opts.defer), flush_rng(opts.flush_seed) {
    CAF_REQUIRE_EQUAL(raft_fixture_initialize(&f), 0);
    for (unsigned i = 0; i < opts.nodes; ++i) {
      auto r = std::make_unique<replica>();
      store_options store;
      store.path = r->dir.file("node.db");
      store.busy_timeout_ms = opts.busy_timeout_ms;
      auto db = sqlite_store::open(store);
      CAF_REQUIRE(db);
      r->db = std::move(*db);
      r->fsm = std::make_unique<cluster::raft_fsm_adapter>(
        *r->db, opts.async_snapshots);
      auto rp = r.get();
      r->fsm->on_applied([this, rp](uint64_t index,
                                    const std::vector<command>& cmds,
                                    const std::vector<command_result>& res) {
        CAF_CHECK_EQUAL(cmds.size(), res.size());
        rp->hook_commands += cmds.size();
        rp->hook_indices.push_back(index);
        if (rp->raft == nullptr)
          return;
        applied_entry e{cmds, res};
        e.replica = rp->id;
        if (std::getenv("ONCEGATE_RAFT_TRACE"))
          std::fprintf(stderr, "apply replica=%u index=%llu term=%llu "
                       "state=%d commit=%llu last=%llu %s\n", rp->id,
                       (unsigned long long) index,
                       (unsigned long long) rp->raft->current_term,
                       raft_state(rp->raft),
                       (unsigned long long) rp->raft->commit_index,
                       (unsigned long long) raft_last_index(rp->raft),
                       describe(e).c_str());
        e.restores = rp->fsm->restores();
        auto [i, fresh] = applied_log.emplace(index, e);
        if (!fresh && apply_mismatch.empty()
            && describe(i->second) != describe(e))
          apply_mismatch = "entry " + std::to_string(index)
                           + " applied as " + describe(i->second)
                           + " (replica " + std::to_string(i->second.replica)
                           + ", after " + std::to_string(i->second.restores)
                           + " restores) and as " + describe(e)
                           + " (replica " + std::to_string(e.replica)
                           + ", after " + std::to_string(e.restores)
                           + " restores)";
      });
      r->fsm->on_restored([rp] { ++rp->hook_restores; });
      r->fsm->defer_follower_applies(opts.defer);
      // The fixture's io implements async work but reports version 0 (as
      // raft_uv reports 1), so raft_init inside grow refuses a version 3
      // FSM: grow it as version 2, then restore both versions.
      auto fsm = r->fsm->fsm();
      auto version = fsm->version;
      fsm->version = 2;
      CAF_REQUIRE_EQUAL(raft_fixture_grow(&f, fsm), 0);
      fsm->version = version;
      auto raft = raft_fixture_get(&f, i);
      if (version == 3) {
        CAF_REQUIRE(raft->io->async_work != nullptr);
        raft->io->version = 2;
      }
      fixture_io_shim::install(raft->io);
      r->fsm->attach(raft);
      r->raft = raft;
      r->id = i;
      raft_set_snapshot_threshold(raft, opts.snapshot_threshold);
      raft_set_snapshot_trailing(raft, opts.snapshot_trailing);
      replicas.push_back(std::move(r));
    }
    raft_configuration conf;
    CAF_REQUIRE_EQUAL(raft_fixture_configuration(&f, opts.nodes, &conf), 0);
    CAF_REQUIRE_EQUAL(raft_fixture_bootstrap(&f, &conf), 0);
    raft_configuration_close(&conf);
    CAF_REQUIRE_EQUAL(raft_fixture_start(&f), 0);
  }

  ~raft_cluster() {
    std::vector<raft_io*> ios;
    for (unsigned i = 0; i < size(); ++i)
      ios.push_back(raft_fixture_get(&f, i)->io);
    raft_fixture_close(&f);
    for (auto io : ios)
      fixture_io_shim::remove(io);
  }

  unsigned size() {
    return raft_fixture_n(&f);
  }

  // What a node's check handle does at the end of its loop turns: each
  // replica writes its deferred entries after one step in four.
  void flush_some() {
    if (defer)
      for (auto& r : replicas)
        if (flush_rng() % 4 == 0)
          CAF_CHECK(!r->fsm->flush());
  }

  void flush_all() {
    for (auto& r : replicas)
      CAF_CHECK(!r->fsm->flush());
  }

  // The fixture's step_until_* with `flush_some` after every step.
  bool step_until(const std::function<bool()>& done, unsigned max_ms) {
    struct goal {
      raft_cluster* c;
      const std::function<bool()>* done;
    } g{this, &done};
    return raft_fixture_step_until(
      &f,
      [](raft_fixture*, void* arg) {
        auto g = static_cast<goal*>(arg);
        g->c->flush_some();
        return (*g->done)();
      },
      &g, max_ms);
  }

  void step_for(unsigned ms) {
    step_until([] { return false; }, ms);
  }

  bool step_until_has_leader(unsigned max_ms) {
    return step_until([this] { return raft_fixture_leader_index(&f) < size(); },
                      max_ms);
  }

  // Until replica `i` (all: `size()`) applied `index`, as libraft counts
  // it; then every deferred entry is written, as the loop turn would.
  bool step_until_applied(unsigned i, raft_index index, unsigned max_ms) {
    auto ok = step_until(
      [&] {
        for (unsigned k = 0; k < size(); ++k)
          if ((i == size() || k == i)
              && raft_last_applied(raft_fixture_get(&f, k)) < index)
            return false;
        return true;
      },
      max_ms);
    flush_all();
    return ok;
  }

  // Claims k<from> .. k<to - 1> through the leader, server 0, and steps the
  // fixture itself (which writes no deferred entry) until replica `until`
  // (all: `size()`) applied them; returns the last entry's index.
  raft_index claim_and_apply(int from, int to, unsigned until) {
    for (int i = from; i < to; ++i)
      propose_claim(0, "k" + std::to_string(i), 1000 + i);
    auto last = raft_last_index(raft_fixture_get(&f, 0));
    CAF_REQUIRE(raft_fixture_step_until_applied(&f, until, last, 10'000));
    return last;
  }

  // The live leader, or -1.
  int leader() {
    for (unsigned i = 0; i < size(); ++i)
      if (raft_fixture_alive(&f, i)
          && raft_state(raft_fixture_get(&f, i)) == RAFT_LEADER)
        return static_cast<int>(i);
    return -1;
  }

  // Proposes one command through server `i`; returns null when it is not
  // the leader (nothing proposed).
  proposal* propose(unsigned i, command cmd) {
    auto p = std::make_unique<proposal>();
    p->cmd = std::move(cmd);
    p->req.data = p.get();
    auto entry = encode_batch({p->cmd});
    raft_buffer buf;
    buf.len = entry.size();
    buf.base = raft_malloc(buf.len);
    std::memcpy(buf.base, entry.data(), buf.len);
    if (raft_apply(raft_fixture_get(&f, i), &p->req, &buf, 1, on_applied)
        != 0) {
      raft_free(buf.base);
      return nullptr;
    }
    proposals.push_back(std::move(p));
    return proposals.back().get();
  }

  proposal* propose_claim(unsigned i, const std::string& key, int64_t now) {
    command cmd;
    cmd.claim = make_claim(key, now, "{}", 3'600'000);
    return propose(i, std::move(cmd));
  }

  // Heals every fault, then commits a last entry through the stable leader
  // until every replica applied it; returns whether they did.
  bool settle(std::string& why) {
    for (unsigned i = 0; i < size(); ++i) {
      if (!raft_fixture_alive(&f, i))
        raft_fixture_revive(&f, i);
      for (unsigned j = 0; j < size(); ++j)
        if (i != j)
          raft_fixture_reconnect(&f, i, j);
    }
    step_for(5'000);
    if (commit_everywhere(why))
      return true;
    // libraft 0.15 can leave a follower behind for good: when an install of
    // the leader's snapshot failed and the follower meanwhile took a
    // snapshot of its own past the leader's, the leader ignores the
    // follower's rejections and probes only below what the follower kept
    // (seed 3270). A new leader probes afresh: hand leadership over once.
    ++handovers;
    raft_transfer(raft_fixture_get(&f, raft_fixture_leader_index(&f)),
                  &transfer, 0, nullptr);
    return commit_everywhere(why);
  }

  // Commits a claim through the stable leader and steps until every
  // replica applied it (which commits all before it).
  bool commit_everywhere(std::string& why) {
    if (!step_until_has_leader(30'000)) {
      why = "no leader";
      return false;
    }
    // The fixture's stable leader (a deposed one may still think it leads).
    auto l = raft_fixture_leader_index(&f);
    propose_claim(l, "final", 99'999'999);
    auto last = raft_last_index(raft_fixture_get(&f, l));
    if (step_until_applied(size(), last, 30'000))
      return true;
    why = "entry " + std::to_string(last) + " not applied everywhere";
    for (unsigned i = 0; i < size(); ++i) {
      auto r = raft_fixture_get(&f, i);
      why += "; node " + std::to_string(i) + ": state "
             + std::to_string(raft_state(r)) + " last_applied "
             + std::to_string(raft_last_applied(r)) + " last_index "
             + std::to_string(raft_last_index(r)) + " fsm_failures "
             + std::to_string(replicas[i]->fsm->failures());
    }
    return false;
  }

  // Returns the first difference between replica 0 and another, if any.
  std::string divergence() {
    auto expected = dump(replicas[0]->db->options().path);
    for (size_t i = 1; i < replicas.size(); ++i) {
      auto rows = dump(replicas[i]->db->options().path);
      if (rows == expected)
        continue;
      size_t n = 0;
      while (n < rows.size() && n < expected.size() && rows[n] == expected[n])
        ++n;
      return "replica " + std::to_string(i) + " differs at row "
             + std::to_string(n) + ": "
             + (n < rows.size() ? rows[n] : "(none)") + " vs "
             + (n < expected.size() ? expected[n] : "(none)");
    }
    return {};
  }
};

// Replays the applied log (index order) against a model of the records
// table: which record each key holds, with the store's clock (the latest
// time a claim or purge carried). Returns the first decision that the log's
// history does not allow, if any:
// - a grant while a live record of another request attempt holds the key
//   (a release, or the record's expiry and purge, must come in between);
// - a refusal (duplicate, mismatch) of a key that holds no live record;
// - a release that leaves the record, a gateway's release (request id) of
//   another attempt's record, an operator's release of an in-flight record
//   or one that spares a settled record;
// - a purge that deletes another number of records than the completed ones
//   expired at its time (in-flight and in-doubt records never expire);
// - a doubt that turns another number of records in doubt than the in-flight
//   ones of its owner first seen before its bound;
// - an update whose result disagrees with the model (record present or not).
// Counts what the runs exercised in `stats`.
struct model_stats {
  uint64_t regrants = 0;  // grants after a release or an expiry
  uint64_t released = 0;  // releases that removed a record
  uint64_t spared = 0;    // operator releases that spared an in-flight one
  uint64_t purged = 0;    // records purged
};

std::string check_history(const raft_cluster& c, model_stats& stats,
                          std::map<std::string, record>& model) {
  int64_t clock = 0;
  for (auto& [index, e] : c.applied_log) {
    auto at = "entry " + std::to_string(index) + ": ";
    for (size_t k = 0; k < e.cmds.size(); ++k) {
      auto& cmd = e.cmds[k];
      auto& res = e.results[k];
      switch (cmd.type) {
        case command::kind::claim: {
          clock = std::max(clock, cmd.claim.now_ms);
          auto& key = cmd.claim.key;
          auto i = model.find(key);
          auto held = i != model.end() && live(i->second, clock);
          if (refused(res.claim.outcome)) {
            // A guard or a pause writes nothing, and only instead of a
            // new record.
            if (held)
              return at + "key " + key + " refused ("
                     + to_string(res.claim.outcome) + ") while live";
            break;
          }
          if (grants(res.claim.outcome)) {
            auto same_attempt = held && cmd.claim.request_id != 0
                                && i->second.request_id
                                     == cmd.claim.request_id
                                && i->second.owner == cmd.claim.owner;
            if (held && !same_attempt)
              return at + "key " + key + " granted to request "
                     + std::to_string(cmd.claim.request_id)
                     + " while the live record of request "
                     + std::to_string(i->second.request_id) + " holds it";
            if (!held && i != model.end())
              ++stats.regrants;
          } else if (!held) {
            return at + "key " + key + " refused ("
                   + to_string(res.claim.outcome)
                   + ") although it holds no live record";
          }
          model[key] = res.claim.rec;
          break;
        }
        case command::kind::update: {
          auto& upd = cmd.update;
          auto& out = res.update;
          auto i = model.find(upd.key);
          auto had = i != model.end();
          auto removal = upd.op == transition::release
                         || upd.op == transition::release_settled;
          if (removal && out.applied && out.current.found)
            return at + "a release of " + upd.key + " left its record";
          if (removal && out.applied && !had)
            return at + "a release of " + upd.key
                   + " applied to no record";
          if (upd.op == transition::release && out.applied
              && upd.request_id != 0 && i->second.request_id != upd.request_id)
            return at + "request " + std::to_string(upd.request_id)
                   + " released the record of request "
                   + std::to_string(i->second.request_id) + " of "
                   + upd.key;
          if (upd.op == transition::release_settled && had) {
            auto in_flight = i->second.state == record_state::in_flight;
            if (out.applied == in_flight)
              return at + "an operator release of " + upd.key + " in state "
                     + to_string(i->second.state)
                     + (out.applied ? " applied" : " did not apply");
            stats.spared += in_flight ? 1 : 0;
          }
          if (out.current.found != (out.applied && removal ? false : had))
            return at + "the update of " + upd.key
                   + " disagrees with the log: found "
                   + std::to_string(out.current.found);
          if (out.current.found)
            model[upd.key] = out.current.rec;
          else if (had) {
            model.erase(i);
            ++stats.released;
          }
          break;
        }
        case command::kind::purge: {
          clock = std::max(clock, cmd.now_ms);
          uint64_t expired = 0;
          for (auto& [key, rec] : model)
            expired += live(rec, clock) ? 0 : 1;
          if (cmd.limit < expired)
            return at + "purge limit below the expired records: the test "
                        "cannot tell which ones go";
          if (res.purged != expired)
            return at + "a purge at " + std::to_string(clock) + " deleted "
                   + std::to_string(res.purged) + " records, "
                   + std::to_string(expired) + " had expired";
          for (auto i = model.begin(); i != model.end();)
            i = live(i->second, clock) ? std::next(i) : model.erase(i);
          stats.purged += expired;
          break;
        }
        case command::kind::doubt: {
          uint64_t n = 0;
          for (auto& [key, rec] : model)
            if (rec.state == record_state::in_flight
                && (cmd.owner == 0 || rec.owner == cmd.owner)
                && rec.first_seen_ms < cmd.before_ms) {
              rec.state = record_state::in_doubt;
              ++n;
            }
          if (res.doubted != n)
            return at + "a doubt turned " + std::to_string(res.doubted)
                   + " records in doubt, the log has " + std::to_string(n);
          break;
        }
        case command::kind::pause:
          break; // no record changes
      }
    }
  }
  return {};
}

} // namespace

CAF_TEST(a three node cluster applies claims on every replica) {
  for (auto defer : {false, true}) {
    CAF_MESSAGE("followers defer their applies: " << defer);
    cluster_options opts;
    opts.defer = defer;
    raft_cluster c{opts};
    raft_fixture_elect(&c.f, 0);
    for (int i = 0; i < 20; ++i)
      c.propose_claim(0, "k" + std::to_string(i % 5), 1000 + i);
    auto last = raft_last_index(raft_fixture_get(&c.f, 0));
    CAF_REQUIRE(c.step_until_applied(3, last, 10'000));
    int granted_claims = 0;
    for (auto& p : c.proposals) {
      CAF_CHECK(p->done);
      CAF_CHECK_EQUAL(p->status, 0);
      granted_claims += granted(*p) ? 1 : 0;
    }
    CAF_CHECK_EQUAL(granted_claims, 5);
    for (auto& r : c.replicas) {
      CAF_CHECK_EQUAL(r->db->count(), 5u);
      CAF_CHECK_EQUAL(r->db->applied_index(), last);
      // Every node (followers too) reported each applied command.
      CAF_CHECK_EQUAL(r->hook_commands, 20u);
    }
  }
}

CAF_TEST(a lagging replica catches up from a snapshot) {
  for (auto [async, defer] : {std::pair{false, false}, std::pair{true, false},
                              std::pair{false, true}, std::pair{true, true}}) {
    CAF_MESSAGE("async snapshots: " << async << ", deferred applies: "
                                    << defer);
    cluster_options opts;
    opts.async_snapshots = async;
    opts.defer = defer;
    opts.snapshot_threshold = 16;
    opts.snapshot_trailing = 4;
    raft_cluster c{opts};
    raft_fixture_elect(&c.f, 0);
    raft_fixture_kill(&c.f, 2);
    // One proposal per 50 ms: with one every 20 ms the fixture committed
    // nothing until they stopped.
    for (int i = 0; i < 100; ++i) {
      c.propose_claim(0, "k" + std::to_string(i), 1000 + i);
      c.step_for(50);
    }
    // Node 2's next entry is gone from the leader's log: only a snapshot
    // can bring it up to date.
    CAF_CHECK(c.replicas[0]->fsm->snapshots() > 0);
    CAF_CHECK_EQUAL(c.replicas[2]->db->count(), 0u);
    raft_fixture_revive(&c.f, 2);
    auto last = raft_last_index(raft_fixture_get(&c.f, 0));
    CAF_REQUIRE(c.step_until_applied(3, last, 30'000));
    CAF_CHECK(c.replicas[2]->fsm->restores() > 0);
    CAF_CHECK_EQUAL(c.replicas[2]->hook_restores,
                    c.replicas[2]->fsm->restores());
    CAF_CHECK_EQUAL(c.replicas[2]->db->count(), 100u);
    CAF_CHECK_EQUAL(c.replicas[2]->db->applied_index(), last);
    CAF_CHECK_EQUAL(c.divergence(), "");
    for (auto& r : c.replicas)
      CAF_CHECK_EQUAL(r->fsm->failures(), 0u);
  }
}

CAF_TEST(a follower writes its deferred entries before a snapshot and before it applies as leader) {
  cluster_options opts;
  opts.defer = true;
  raft_cluster c{opts};
  // The fixture's own stepping: nothing writes the deferred entries unless
  // the test (or the FSM itself) does.
  raft_fixture_elect(&c.f, 0);
  auto last = c.claim_and_apply(0, 5, 3);
  // The leader wrote each entry as it applied it (its proposer has the
  // results); the followers queued theirs.
  CAF_CHECK_EQUAL(c.replicas[0]->db->count(), 5u);
  CAF_CHECK_EQUAL(c.replicas[0]->fsm->deferred(), 0u);
  for (auto& p : c.proposals)
    CAF_CHECK(granted(*p));
  for (unsigned i : {1u, 2u}) {
    CAF_CHECK_EQUAL(c.replicas[i]->db->count(), 0u);
    CAF_CHECK_EQUAL(c.replicas[i]->fsm->deferred(), 5u);
    CAF_CHECK_EQUAL(c.replicas[i]->hook_commands, 0u);
  }
  // Flushed: written in one go, hooks in log order.
  CAF_REQUIRE(!c.replicas[1]->fsm->flush());
  CAF_CHECK_EQUAL(c.replicas[1]->db->count(), 5u);
  CAF_CHECK_EQUAL(c.replicas[1]->db->applied_index(), last);
  CAF_CHECK_EQUAL(c.replicas[1]->hook_commands, 5u);
  CAF_CHECK_EQUAL(c.replicas[1]->hook_indices, c.replicas[0]->hook_indices);
  // A snapshot pins the state at libraft's applied index: the queued
  // entries are written first, and the image holds them.
  auto fsm2 = c.replicas[2]->fsm->fsm();
  raft_buffer* bufs = nullptr;
  unsigned n = 0;
  CAF_REQUIRE_EQUAL(fsm2->snapshot(fsm2, &bufs, &n), 0);
  CAF_REQUIRE_EQUAL(n, 1u);
  CAF_CHECK_EQUAL(c.replicas[2]->fsm->deferred(), 0u);
  CAF_CHECK_EQUAL(image_state(bufs[0]),
                  (std::pair<uint64_t, uint64_t>{5u, last}));
  CAF_REQUIRE_EQUAL(fsm2->snapshot_finalize(fsm2, &bufs, &n), 0);
  // Three more, queued on the followers; then follower 1 is elected. Its
  // first apply as leader writes the queued entries before its own.
  last = c.claim_and_apply(5, 8, 3);
  CAF_CHECK_EQUAL(c.replicas[1]->fsm->deferred(), 3u);
  raft_fixture_depose(&c.f);
  CAF_REQUIRE(raft_fixture_step_until_has_no_leader(&c.f, 10'000));
  raft_fixture_elect(&c.f, 1);
  CAF_CHECK_EQUAL(c.replicas[1]->fsm->deferred(), 3u);
  // k6 was claimed in a queued entry: its claim through the new leader
  // is decided against it.
  auto again = c.propose_claim(1, "k6", 2000);
  auto p = c.propose_claim(1, "k8", 2000);
  CAF_REQUIRE(again != nullptr && p != nullptr);
  CAF_REQUIRE(raft_fixture_step_until_applied(
    &c.f, 1, raft_last_index(raft_fixture_get(&c.f, 1)), 10'000));
  CAF_REQUIRE(again->answered);
  CAF_CHECK_EQUAL(again->result.claim.outcome, decision::duplicate);
  CAF_CHECK(granted(*p));
  CAF_CHECK_EQUAL(c.replicas[1]->fsm->deferred(), 0u);
  CAF_CHECK_EQUAL(c.replicas[1]->db->count(), 9u);
  auto& seen = c.replicas[1]->hook_indices;
  CAF_CHECK_EQUAL(seen.size(), 10u);
  CAF_CHECK(std::is_sorted(seen.begin(), seen.end())
            && std::adjacent_find(seen.begin(), seen.end()) == seen.end());
  CAF_REQUIRE(c.step_until_applied(
    3, raft_last_index(raft_fixture_get(&c.f, 1)), 10'000));
  CAF_CHECK_EQUAL(c.divergence(), "");
  for (auto& r : c.replicas)
    CAF_CHECK_EQUAL(r->fsm->failures(), 0u);
}

CAF_TEST(a follower that cannot write keeps its entries queued and fails its next apply) {
  cluster_options opts;
  opts.defer = true;
  opts.busy_timeout_ms = 1;
  raft_cluster c{opts};
  raft_fixture_elect(&c.f, 0);
  auto first = c.claim_and_apply(0, 3, 3);
  auto& f1 = *c.replicas[1];
  CAF_REQUIRE_EQUAL(f1.fsm->deferred(), 3u);
  // Another connection holds the write lock of follower 1's file.
  sqlite3* lock = nullptr;
  CAF_REQUIRE_EQUAL(sqlite3_open(f1.db->options().path.c_str(), &lock),
                    SQLITE_OK);
  CAF_REQUIRE_EQUAL(sqlite3_exec(lock, "BEGIN IMMEDIATE", nullptr, nullptr,
                                 nullptr),
                    SQLITE_OK);
  CAF_CHECK(f1.fsm->flush());
  CAF_CHECK_EQUAL(f1.fsm->deferred(), 3u);
  CAF_CHECK_EQUAL(f1.fsm->failures(), 1u);
  CAF_CHECK_EQUAL(f1.db->count(), 0u);
  // The node's check holds off before it tries again.
  CAF_CHECK(!f1.fsm->flush_due());
  // No snapshot of a state that lacks what libraft counts as applied.
  auto fsm1 = f1.fsm->fsm();
  raft_buffer* bufs = nullptr;
  unsigned n = 0;
  CAF_CHECK_EQUAL(fsm1->snapshot(fsm1, &bufs, &n), RAFT_BUSY);
  auto failed_before = f1.fsm->failures();
  // The next entry does not queue up behind the failure: its apply fails
  // as a failed write inside `apply` always did. Here it came with a
  // heartbeat, and libraft stops the replica (unavailable: a node restarts
  // and replays its log); with an append it would skip that answer. The
  // others go on deciding.
  auto second = c.claim_and_apply(3, 5, 0);
  CAF_REQUIRE(raft_fixture_step_until_applied(&c.f, 2, second, 10'000));
  CAF_CHECK_EQUAL(raft_state(f1.raft), RAFT_UNAVAILABLE);
  CAF_CHECK_EQUAL(raft_last_applied(f1.raft), first);
  CAF_CHECK_EQUAL(f1.fsm->deferred(), 3u);
  CAF_CHECK(f1.fsm->failures() > failed_before);
  // The lock goes; what was queued is written (as a node's stop does), in
  // order, and the file says where a restart resumes.
  CAF_REQUIRE_EQUAL(sqlite3_exec(lock, "ROLLBACK", nullptr, nullptr, nullptr),
                    SQLITE_OK);
  sqlite3_close(lock);
  CAF_REQUIRE(!f1.fsm->flush());
  CAF_CHECK_EQUAL(f1.db->count(), 3u);
  CAF_CHECK_EQUAL(f1.db->applied_index(), first);
  auto& lead = c.replicas[0]->hook_indices;
  CAF_CHECK_EQUAL(f1.hook_indices,
                  std::vector<uint64_t>(lead.begin(), lead.begin() + 3));
}

CAF_TEST(an async snapshot copies its pinned state while entries apply) {
  // One node, so that the test can call the FSM itself: the pinning step
  // here, the copy on another thread (as libuv's thread pool would) while
  // this thread goes on applying entries through the writer.
  cluster_options opts;
  opts.nodes = 1;
  opts.async_snapshots = true;
  raft_cluster c{opts};
  CAF_REQUIRE(raft_fixture_step_until_has_leader(&c.f, 10'000));
  for (int i = 0; i < 50; ++i)
    c.propose_claim(0, "k" + std::to_string(i), 1000);
  auto pinned_index = raft_last_index(raft_fixture_get(&c.f, 0));
  CAF_REQUIRE(raft_fixture_step_until_applied(&c.f, 0, pinned_index, 10'000));
  auto fsm = c.replicas[0]->fsm->fsm();
  raft_buffer* bufs = nullptr;
  unsigned n = 0;
  CAF_REQUIRE_EQUAL(fsm->snapshot(fsm, &bufs, &n), 0);
  CAF_CHECK_EQUAL(n, 0u); // the copy comes from snapshot_async
  // Entries applied after the pinning step, before the copy and during it.
  auto apply_claims = [&](int from, int to) {
    for (int i = from; i < to; ++i)
      c.propose_claim(0, "k" + std::to_string(i), 1000);
    auto last = raft_last_index(raft_fixture_get(&c.f, 0));
    CAF_REQUIRE(raft_fixture_step_until_applied(&c.f, 0, last, 10'000));
  };
  apply_claims(50, 100);
  int async_rc = -1;
  std::thread pool{[&] { async_rc = fsm->snapshot_async(fsm, &bufs, &n); }};
  apply_claims(100, 150);
  pool.join();
  CAF_REQUIRE_EQUAL(async_rc, 0);
  CAF_REQUIRE_EQUAL(n, 1u);
  CAF_CHECK_EQUAL(c.replicas[0]->db->count(), 150u);
  // The image is the state at the pinned index, whatever applied since.
  CAF_CHECK_EQUAL(image_state(bufs[0]),
                  (std::pair<uint64_t, uint64_t>{50u, pinned_index}));
  CAF_REQUIRE_EQUAL(fsm->snapshot_finalize(fsm, &bufs, &n), 0);
  CAF_CHECK(bufs == nullptr);
  CAF_CHECK_EQUAL(c.replicas[0]->fsm->snapshots(), 1u);
  // The snapshot connection is free again for the next snapshot.
  CAF_REQUIRE_EQUAL(fsm->snapshot(fsm, &bufs, &n), 0);
  CAF_REQUIRE_EQUAL(fsm->snapshot_async(fsm, &bufs, &n), 0);
  CAF_CHECK_EQUAL(image_state(bufs[0]).first, 150u);
  fsm->snapshot_finalize(fsm, &bufs, &n);
}

namespace {

// Totals over the seeded fault runs: what they exercised.
struct fault_totals {
  uint64_t snapshots = 0, restores = 0; // taken and restored, all replicas
  uint64_t reasked = 0;   // grants asked again with their request id
  uint64_t handovers = 0; // leader handovers to unstick a follower
  uint64_t doubted = 0;   // records doubted
  uint64_t releases = 0, purges = 0; // release and purge commands proposed
  model_stats model;
  std::vector<long> diverged; // seeds that met the libraft bug (below)
};

// One seeded run of kills, revivals and partitions while claims (some asking
// again with their request id), completions and doubts are proposed, with
// snapshots every 64 entries so that lagging and revived replicas catch up
// from them. With `removals`, claims also get short TTLs and the leader is
// sent purges, gateways' releases of abandoned attempts (by request id) and
// operators' releases (which spare in-flight records); the random sequence
// of a seed without them is the one the earlier runs used (seeds named in
// comments still reproduce). Odd seeds take snapshots synchronously (FSM
// version 2), even ones asynchronously (version 3); followers defer their
// applies in seeds 2-3, 6-7, ... (seed / 2 odd). ONCEGATE_RAFT_TRACE=1
// prints every applied entry and each replica's Raft state after each step
// (with LIBRAFT_TRACE=1, libraft's own trace too).
void run_faults(long seed, bool removals, fault_totals& totals) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  cluster_options opts;
  opts.async_snapshots = seed % 2 == 0;
  opts.defer = seed / 2 % 2 == 1;
  opts.flush_seed = static_cast<unsigned>(seed);
  opts.snapshot_threshold = 64;
  opts.snapshot_trailing = 16;
  raft_cluster c{opts};
  raft_fixture_elect(&c.f, 0);
  uint64_t next_request_id = 1;
  // Picks 0-6 as before; with removals, 7-11 (new claims otherwise) are
  // shared with purges, releases and operator releases.
  for (int step = 0; step < 100; ++step) {
    int64_t now = 1000 + step;
    auto pick = rng() % 12;
    unsigned node = rng() % 3;
    auto l = c.leader();
    if (pick == 0 && raft_fixture_alive(&c.f, node)) {
      unsigned alive = 0;
      for (unsigned i = 0; i < 3; ++i)
        alive += raft_fixture_alive(&c.f, i) ? 1 : 0;
      if (alive == 3)
        raft_fixture_kill(&c.f, node); // a minority at most
    } else if (pick == 1 && !raft_fixture_alive(&c.f, node)) {
      raft_fixture_revive(&c.f, node);
    } else if (pick == 2) {
      unsigned other = (node + 1) % 3;
      raft_fixture_disconnect(&c.f, node, other);
      raft_fixture_disconnect(&c.f, other, node);
    } else if (pick == 3) {
      for (unsigned i = 0; i < 3; ++i)
        for (unsigned j = 0; j < 3; ++j)
          if (i != j)
            raft_fixture_reconnect(&c.f, i, j);
    } else if (l >= 0 && pick == 4) {
      // An attempt asks again: mostly one whose answer did not come (lost
      // with its leader), sometimes one that was answered (a retry racing
      // the answer).
      std::vector<const command*> attempts;
      auto unanswered_only = rng() % 4 != 0;
      for (auto& p : c.proposals)
        if (p->cmd.type == command::kind::claim
            && p->cmd.claim.request_id != 0
            && (!unanswered_only || !p->answered))
          attempts.push_back(&p->cmd);
      if (!attempts.empty()) {
        auto cmd = *attempts[rng() % attempts.size()];
        cmd.claim.now_ms = now;
        c.propose(static_cast<unsigned>(l), std::move(cmd));
      }
    } else if (l >= 0 && pick == 5) {
      command cmd;
      cmd.type = command::kind::doubt;
      cmd.owner = rng() % 4;
      cmd.before_ms = rng() % 2 ? now : std::numeric_limits<int64_t>::max();
      c.propose(static_cast<unsigned>(l), std::move(cmd));
    } else if (l >= 0 && pick == 6 && !c.proposals.empty()) {
      // The owner of a grant completes it.
      auto& earlier = c.proposals[rng() % c.proposals.size()];
      if (granted(*earlier)) {
        command cmd;
        cmd.type = command::kind::update;
        cmd.update.route = "default";
        cmd.update.key = earlier->cmd.claim.key;
        cmd.update.op = transition::complete;
        cmd.update.first_seen_ms = earlier->result.claim.rec.first_seen_ms;
        cmd.update.status = 201;
        cmd.update.response = "done";
        c.propose(static_cast<unsigned>(l), std::move(cmd));
      }
    } else if (removals && l >= 0 && pick == 7) {
      // The leader's alarm: purge what expired (limit above the keys).
      command cmd;
      cmd.type = command::kind::purge;
      cmd.now_ms = now;
      cmd.limit = 1000;
      c.propose(static_cast<unsigned>(l), std::move(cmd));
      ++totals.purges;
    } else if (removals && l >= 0 && pick == 8 && !c.proposals.empty()) {
      // A gateway gave up on a claim attempt (answered or not): it
      // releases the record if it is this attempt's.
      auto& earlier = c.proposals[rng() % c.proposals.size()];
      if (earlier->cmd.type == command::kind::claim
          && earlier->cmd.claim.request_id != 0) {
        command cmd;
        cmd.type = command::kind::update;
        cmd.update.route = "default";
        cmd.update.key = earlier->cmd.claim.key;
        cmd.update.op = transition::release;
        cmd.update.request_id = earlier->cmd.claim.request_id;
        c.propose(static_cast<unsigned>(l), std::move(cmd));
        ++totals.releases;
      }
    } else if (removals && l >= 0 && pick == 9) {
      // An operator releases a key (DELETE /v1/keys/KEY).
      command cmd;
      cmd.type = command::kind::update;
      cmd.update.route = "default";
      cmd.update.key = "k" + std::to_string(rng() % 24);
      cmd.update.op = transition::release_settled;
      c.propose(static_cast<unsigned>(l), std::move(cmd));
      ++totals.releases;
    } else if (l >= 0) {
      // New claims, as gateways of any node forward them to the leader.
      for (auto n = rng() % 3 + 1; n > 0; --n) {
        // With removals, most records expire within a few steps.
        int64_t ttl = 3'600'000;
        if (removals && rng() % 4 != 0)
          ttl = static_cast<int64_t>(rng() % 30) + 1;
        command cmd;
        cmd.claim = make_claim("k" + std::to_string(rng() % 24), now,
                               rng() % 8 == 0 ? "{\"b\":2}" : "{}", ttl);
        cmd.claim.initial_state = rng() % 3 == 0 ? record_state::completed
                                                 : record_state::in_flight;
        cmd.claim.owner = rng() % 3 + 1;
        cmd.claim.request_id = rng() % 5 == 0 ? 0 : next_request_id++;
        c.propose(static_cast<unsigned>(l), std::move(cmd));
      }
    }
    c.step_for(50 + static_cast<unsigned>(rng() % 200));
    if (std::getenv("ONCEGATE_RAFT_TRACE")) {
      std::fprintf(stderr, "step %d pick %u node %u:", step, static_cast<unsigned>(pick),
                   static_cast<unsigned>(node));
      for (unsigned i = 0; i < 3; ++i) {
        auto r = raft_fixture_get(&c.f, i);
        std::fprintf(stderr, " [%u alive=%d state=%d term=%llu vote=%llu "
                     "commit=%llu last=%llu applied=%llu conn=%d%d]", i,
                     raft_fixture_alive(&c.f, i), raft_state(r),
                     (unsigned long long) r->current_term,
                     (unsigned long long) r->voted_for,
                     (unsigned long long) r->commit_index,
                     (unsigned long long) raft_last_index(r),
                     (unsigned long long) raft_last_applied(r),
                     raft_fixture_saturated(&c.f, i, (i + 1) % 3) ? 0 : 1,
                     raft_fixture_saturated(&c.f, i, (i + 2) % 3) ? 0 : 1);
      }
      std::fprintf(stderr, "\n");
    }
  }
  std::string why;
  if (!c.settle(why))
    CAF_FAIL("seed " << seed << ": " << why);
  totals.handovers += static_cast<uint64_t>(c.handovers);
  // Every replica that applied an entry applied the same entry. KNOWN BUG
  // (libraft 0.15): a leader takes a follower's last index from its answer
  // to an empty AppendEntries as matched, although the follower's entries
  // past prev_log_index are a deposed leader's, never checked against the
  // new leader's: it commits (and its FSM applies, and the proposer is
  // answered) an entry that only it holds, and a later leader commits
  // another one at that index (seed 334: "new commit index 55" right after
  // "last_log_index:57 rejected:0" for a heartbeat with prev_log_index 54).
  // Counted and reported; ONCEGATE_KNOWN_BUGS=1 makes it fail.
  auto diverged = !c.apply_mismatch.empty();
  if (diverged) {
    if (std::getenv("ONCEGATE_KNOWN_BUGS"))
      CAF_FAIL("seed " << seed << ": " << c.apply_mismatch);
    totals.diverged.push_back(seed);
    CAF_MESSAGE("KNOWN BUG seed " << seed << ": " << c.apply_mismatch);
  }
  // The committed history allows every decision: no key granted while
  // another attempt's live record held it, releases and purges removed
  // exactly what they may. (Not when replicas applied different entries:
  // there is no one history then.)
  std::map<std::string, record> model;
  if (!diverged)
    if (auto err = check_history(c, totals.model, model); !err.empty())
      CAF_FAIL("seed " << seed << ": " << err);
  // Each grant carries its own attempt's record. Without removals, the
  // grants of one key are one request attempt (asking again is the same
  // grant) and carry one record; with them, the history check above allows
  // a new attempt only after a release or an expiry.
  std::map<std::string, std::vector<const proposal*>> grants_per_key;
  for (auto& p : c.proposals)
    if (granted(*p))
      grants_per_key[p->cmd.claim.key].push_back(p.get());
  for (auto& [key, ps] : grants_per_key) {
    auto& one = *ps.front();
    for (auto p : ps) {
      auto& rec = p->result.claim.rec;
      if (rec.request_id != p->cmd.claim.request_id
          || rec.owner != p->cmd.claim.owner)
        CAF_FAIL("seed " << seed << ": key " << key
                         << " granted with another attempt's record");
      if (removals)
        continue;
      auto same_attempt = p->cmd.claim.request_id != 0
                          && p->cmd.claim.request_id
                               == one.cmd.claim.request_id
                          && p->cmd.claim.owner == one.cmd.claim.owner;
      if (p != &one && !same_attempt)
        CAF_FAIL("seed " << seed << ": key " << key << " granted to "
                         << "request " << one.cmd.claim.request_id
                         << " and request " << p->cmd.claim.request_id);
      if (rec.first_seen_ms != one.result.claim.rec.first_seen_ms)
        CAF_FAIL("seed " << seed << ": key " << key
                         << " granted with another record");
    }
    totals.reasked += ps.size() - 1;
  }
  // Every acknowledged grant is in the committed history: an entry that
  // granted this attempt this record.
  for (auto& p : c.proposals) {
    if (!granted(*p))
      continue;
    bool found = false;
    for (auto& [index, e] : c.applied_log)
      for (size_t k = 0; k < e.cmds.size() && !found; ++k)
        found = e.cmds[k].type == command::kind::claim
                && e.cmds[k].claim.key == p->cmd.claim.key
                && grants(e.results[k].claim.outcome)
                && e.results[k].claim.rec.request_id
                     == p->cmd.claim.request_id
                && e.results[k].claim.rec.first_seen_ms
                     == p->result.claim.rec.first_seen_ms;
    if (!found)
      CAF_FAIL("seed " << seed << ": acknowledged " << p->cmd.claim.key
                       << " not in the committed log");
  }
  // Every replica holds what the history left: the model's records and no
  // other (a purge or release applied on one replica only, or a record the
  // log does not explain, would differ).
  for (auto& r : c.replicas)
    for (int k = 0; k <= 24 && !diverged; ++k) {
      auto key = k < 24 ? "k" + std::to_string(k) : std::string{"final"};
      auto rec = r->db->load("default", key);
      CAF_REQUIRE(rec);
      auto i = model.find(key);
      auto expected = i != model.end();
      if (rec->found != expected
          || (expected
              && (rec->rec.first_seen_ms != i->second.first_seen_ms
                  || rec->rec.request_id != i->second.request_id
                  || rec->rec.state != i->second.state
                  || rec->rec.expires_at_ms != i->second.expires_at_ms)))
        CAF_FAIL("seed " << seed << ": key " << key
                         << (rec->found ? " stored" : " missing")
                         << " on a replica, against the history");
    }
  for (auto& p : c.proposals)
    if (p->answered && p->cmd.type == command::kind::doubt)
      totals.doubted += p->result.doubted;
  // Replicas converge: the same rows and applied index everywhere.
  if (auto diff = c.divergence(); !diff.empty())
    CAF_FAIL("seed " << seed << ": " << diff);
  for (auto& r : c.replicas) {
    if (r->fsm->failures() != 0)
      CAF_FAIL("seed " << seed << ": " << r->fsm->failures()
                       << " FSM failures");
    totals.snapshots += r->fsm->snapshots();
    totals.restores += r->fsm->restores();
  }
}

// Seeds 1 to ONCEGATE_RAFT_RUNS (default `runs`), or ONCEGATE_RAFT_SEED.
void run_fault_seeds(long runs, bool removals) {
  quiet_logs quiet;
  long first = 1;
  long last_seed = env_number("ONCEGATE_RAFT_RUNS", runs);
  if (auto seed = env_number("ONCEGATE_RAFT_SEED", 0); seed > 0)
    first = last_seed = seed;
  fault_totals t;
  for (auto seed = first; seed <= last_seed; ++seed)
    run_faults(seed, removals, t);
  CAF_MESSAGE("seeds " << first << ".." << last_seed << ": " << t.snapshots
                       << " snapshots taken, " << t.restores << " restored, "
                       << t.reasked << " grants asked again, " << t.doubted
                       << " records doubted, " << t.handovers
                       << " leader handovers to unstick a follower, "
                       << t.releases << " releases and " << t.purges
                       << " purges proposed, " << t.model.released
                       << " records released, " << t.model.spared
                       << " in-flight records spared by an operator's "
                          "release, "
                       << t.model.purged << " purged, " << t.model.regrants
                       << " keys granted again after a removal or expiry");
  if (!t.diverged.empty()) {
    std::string seeds;
    for (auto x : t.diverged)
      seeds += " " + std::to_string(x);
    CAF_MESSAGE("KNOWN BUG (libraft 0.15, committed entry replaced): "
                << t.diverged.size() << " seeds:" << seeds);
  }
  // The runs exercised what they are meant to (not checked for a few).
  if (last_seed - first >= 50) {
    CAF_CHECK(t.snapshots > 0);
    CAF_CHECK(t.restores > 0);
    CAF_CHECK(t.reasked > 0);
    CAF_CHECK(t.doubted > 0);
    if (removals) {
      CAF_CHECK(t.model.released > 0);
      CAF_CHECK(t.model.spared > 0);
      CAF_CHECK(t.model.purged > 0);
      CAF_CHECK(t.model.regrants > 0);
    }
  }
}

} // namespace

// ONCEGATE_RAFT_RUNS sets the number of runs, ONCEGATE_RAFT_SEED reruns one
// seed (of either case).
CAF_TEST(random crashes and partitions never grant a key twice) {
  run_fault_seeds(1500, false);
}

// The same faults while purges and releases are proposed: a key is granted
// again only after a release or its expiry, releases and purges remove
// exactly what they may, on every replica alike.
CAF_TEST(random crashes and partitions with purges and releases) {
  run_fault_seeds(500, true);
}
