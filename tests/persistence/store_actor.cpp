#define CAF_SUITE persistence.store_actor
#include "caf/test/dsl.hpp"

#include <algorithm>
#include <limits>
#include <optional>

#include <sqlite3.h>

#include "common/errc.hpp"
#include "persistence/local_sink.hpp"
#include "persistence/sqlite_store.hpp"
#include "persistence/store_actor.hpp"
#include "tests/common/fixture.hpp"
#include "tests/common/own_loop.hpp"
#include "tests/common/sqlite_query.hpp"

using namespace oncegate;
using namespace oncegate::persistence;
using oncegate::test::ask;
using oncegate::test::make_claim;
using oncegate::test::reply_slot;

namespace {

// An asynchronous sink under the test's control: it holds each batch until
// the test settles it (applied to `db`, as a replica would), or refuses
// everything while `refuse` is set.
class held_sink final : public commit_sink {
public:
  held_sink(std::shared_ptr<sqlite_store> db, sink_traits traits)
    : db_(std::move(db)), traits_(traits) {
    // nop
  }

  sink_traits traits() const override {
    return traits_;
  }

  sqlite_store& reader() override {
    return *db_;
  }

  int64_t stamp(int64_t requested_ms) override {
    return requested_ms;
  }

  caf::error refusal() override {
    if (refuse)
      return make_error(errc::not_leader, "refused by the test");
    return {};
  }

  std::optional<batch_outcome> commit(std::vector<command>& batch,
                                      commit_callback done) override {
    held.emplace_back(batch, std::move(done));
    return std::nullopt;
  }

  /// Applies the oldest held batch and reports its outcome.
  void settle_oldest() {
    CAF_REQUIRE(!held.empty());
    auto [batch, done] = std::move(held.front());
    held.erase(held.begin());
    done(apply_batch(*db_, ++index_, batch));
  }

  bool refuse = false;
  std::vector<std::pair<std::vector<command>, commit_callback>> held;

private:
  std::shared_ptr<sqlite_store> db_;
  sink_traits traits_;
  uint64_t index_ = 0;
};

struct fixture : test_coordinator_fixture<test::test_config> {
  test::temp_dir dir;
  /// Before the store opens: its connections get the commit hook.
  test::commit_fault fault;
  std::shared_ptr<sqlite_store> db;
  store_actor store;

  fixture() {
    store_options opts;
    opts.path = dir.file("store.db");
    auto res = sqlite_store::open(opts);
    CAF_REQUIRE(res);
    db = std::move(*res);
    store = spawn_local();
    sched.run();
  }

  /// The store actor over the local sink on `db`.
  store_actor spawn_local(store_actor_options opts = {}) {
    return spawn_store(sys, std::make_shared<local_sink>(db), opts, false);
  }

  ~fixture() {
    anon_send_exit(store, caf::exit_reason::user_shutdown);
    sched.run();
  }

  /// Claims keys k0 .. k(n-1) at `now_ms`, one client each.
  std::vector<reply_slot<claim_result>> claim_keys(int n,
                                                   int64_t now_ms = 1000) {
    std::vector<reply_slot<claim_result>> replies;
    for (int i = 0; i < n; ++i)
      replies.push_back(ask<claim_result>(sys, store, claim_atom::value,
                                          make_claim("k" + std::to_string(i),
                                                     now_ms)));
    return replies;
  }

  uint64_t records() {
    auto res = ask<uint64_t>(sys, store, count_atom::value);
    sched.run();
    CAF_REQUIRE(*res && **res);
    return ***res;
  }

  /// Records committed, as a second connection to the file sees them.
  int committed_rows() {
    return test::query_int(dir.file("store.db"),
                           "SELECT COUNT(*) FROM records");
  }

  /// Whether `hdl` has a message to handle: it is in the job queue.
  template <class Handle>
  bool has_mail(const Handle& hdl) {
    auto ptr = dynamic_cast<caf::resumable*>(
      caf::actor_cast<caf::abstract_actor*>(hdl));
    return std::find(sched.jobs.begin(), sched.jobs.end(), ptr)
           != sched.jobs.end();
  }

  /// Replaces the store by one over a `held_sink` holding up to
  /// `in_flight` batches of one command each (of up to `batch_bytes`).
  std::shared_ptr<held_sink> respawn_held(uint32_t in_flight,
                                          store_actor_options opts = {},
                                          uint64_t batch_bytes = 1) {
    anon_send_exit(store, caf::exit_reason::user_shutdown);
    sched.run();
    sink_traits traits;
    traits.max_in_flight = in_flight;
    traits.max_batch_bytes = batch_bytes; // 1: a batch per command
    traits.commit_on_exit = false;
    auto sink = std::make_shared<held_sink>(db, traits);
    store = spawn_store(sys, sink, opts, false);
    sched.run();
    return sink;
  }

  store_stats stats() {
    auto res = ask<store_stats>(sys, store, stats_atom::value);
    sched.run();
    CAF_REQUIRE(*res && **res);
    return ***res;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(store_actor_tests, fixture)

CAF_TEST(claims that arrive together share one transaction) {
  auto replies = claim_keys(64);
  sched.run();
  for (auto& r : replies) {
    CAF_REQUIRE(*r && **r);
    CAF_CHECK_EQUAL((**r)->outcome, decision::accepted);
  }
  auto st = stats();
  CAF_CHECK_EQUAL(st.commits, 1u);
  CAF_CHECK_EQUAL(st.max_batch, 64u);
  CAF_CHECK_EQUAL(st.committed_ops, 64u);
  CAF_CHECK_EQUAL(records(), 64u);
}

// Another node's buggy or hostile message: out-of-range enums, sizes past
// `record_bounds`. Refused one by one; the batch it arrives with commits.
CAF_TEST(malformed commands are refused and never join a batch) {
  auto good = claim_keys(2);
  std::vector<claim_request> bad(6, make_claim("bad", 1000));
  reinterpret_cast<uint8_t&>(bad[0].initial_state) = 7;
  bad[1].fingerprint = "short";
  bad[2].key.assign(record_bounds::key + 1, 'k');
  bad[3].route.clear();
  bad[4].status = 1000;
  bad[5].ttl_ms = 0;
  std::vector<reply_slot<claim_result>> refused;
  for (auto& req : bad)
    refused.push_back(ask<claim_result>(sys, store, claim_atom::value, req));
  record_update upd;
  upd.route = "default";
  upd.key = "k0";
  upd.op = transition::complete;
  reinterpret_cast<uint8_t&>(upd.op) = 9;
  auto bad_update = ask<update_result>(sys, store, update_atom::value, upd);
  sched.run();
  for (auto& r : good) {
    CAF_REQUIRE(*r && **r);
    CAF_CHECK_EQUAL((**r)->outcome, decision::accepted);
  }
  for (auto& r : refused) {
    CAF_REQUIRE(*r && !**r);
    CAF_CHECK_EQUAL(errc_of((**r).error()), errc::invalid_argument);
  }
  CAF_REQUIRE(*bad_update && !**bad_update);
  CAF_CHECK_EQUAL(errc_of((**bad_update).error()), errc::invalid_argument);
  CAF_CHECK_EQUAL(stats().failed_commits, 0u);
  CAF_CHECK_EQUAL(records(), 2u);
}

CAF_TEST(a claim is acknowledged only after its transaction committed) {
  // A client we can watch: the moment the store's answer reaches its
  // mailbox (the acknowledgement is sent), another connection must already
  // see the record, whenever the store sends it.
  auto reply = std::make_shared<std::optional<caf::expected<claim_result>>>();
  auto client = sys.spawn([=](caf::event_based_actor* self) {
    self->request(store, caf::infinite, claim_atom::value,
                  make_claim("k1", 1000))
      .then([=](claim_result& res) { *reply = std::move(res); },
            [=](caf::error& err) { *reply = std::move(err); });
  });
  sched.run_once(); // the client starts and sends
  CAF_REQUIRE(!has_mail(client));
  int steps = 0;
  int rows_at_ack = -1;
  while (sched.has_job()) {
    sched.run_once();
    ++steps;
    if (has_mail(client) || *reply) {
      rows_at_ack = committed_rows();
      break;
    }
  }
  CAF_MESSAGE("acknowledged after " << steps << " store steps");
  CAF_CHECK_EQUAL(rows_at_ack, 1);
  sched.run();
  CAF_REQUIRE(*reply && **reply);
  CAF_CHECK_EQUAL((**reply)->outcome, decision::accepted);
  CAF_CHECK_EQUAL(committed_rows(), 1);
}

// Which job was running when `reply` got its answer: the requester's own
// turn, or (answer_here) the store's.
template <class T>
caf::resumable* answered_in(caf::scheduler::test_coordinator& sched,
                            const reply_slot<T>& reply) {
  while (sched.has_job() && !*reply) {
    auto next = &sched.next_job<caf::resumable>();
    sched.run_once();
    if (*reply)
      return next;
  }
  return nullptr;
}

CAF_TEST(with answer_here a batch of one runs its requester in the store turn) {
  auto store_job = dynamic_cast<caf::resumable*>(
    caf::actor_cast<caf::abstract_actor*>(store));
  // Off (a store on the scheduler): the answer wakes the requester, which
  // runs as a job of its own.
  auto first = ask<claim_result>(sys, store, claim_atom::value,
                                 make_claim("k1", 1000));
  auto job = answered_in(sched, first);
  CAF_REQUIRE(*first && **first);
  CAF_CHECK_NOT_EQUAL(job, store_job);
  anon_send_exit(store, caf::exit_reason::user_shutdown);
  sched.run();
  store_actor_options opts;
  opts.answer_here = true;
  store = spawn_local(opts);
  sched.run();
  store_job = dynamic_cast<caf::resumable*>(
    caf::actor_cast<caf::abstract_actor*>(store));
  auto second = ask<claim_result>(sys, store, claim_atom::value,
                                  make_claim("k2", 1000));
  job = answered_in(sched, second);
  CAF_REQUIRE(*second && **second);
  CAF_CHECK_EQUAL((**second)->outcome, decision::accepted);
  CAF_CHECK_EQUAL(job, store_job);
  // Two claims that share a batch go back through the scheduler: under
  // load the workers answer beside the store.
  auto both = claim_keys(2, 2000);
  while (sched.has_job() && !*both[0] && !*both[1])
    sched.run_once();
  auto other = *both[0] ? both[1] : both[0];
  CAF_CHECK(!*other); // its requester is still a job of its own
  CAF_CHECK(sched.has_job());
  sched.run();
  for (auto& r : both) {
    CAF_REQUIRE(*r && **r);
  }
  CAF_CHECK_EQUAL(stats().max_batch, 2u);
}

CAF_TEST(a failed commit fails every claim of its batch) {
  // Exactly COMMIT fails (every INSERT of the batch succeeded before it).
  fault.fail_next();
  auto replies = claim_keys(16);
  sched.run();
  CAF_CHECK_EQUAL(fault.failures(), 1);
  for (auto& r : replies) {
    CAF_REQUIRE(*r);
    CAF_REQUIRE(!**r);
    CAF_CHECK_EQUAL(errc_of((**r).error()), errc::commit_failed);
  }
  auto st = stats();
  CAF_CHECK_EQUAL(st.failed_commits, 1u);
  CAF_CHECK_EQUAL(st.commits, 0u);
  CAF_CHECK_EQUAL(records(), 0u);
  CAF_CHECK_EQUAL(db->applied_index(), 0u);
  // Nothing was granted: the same claims are accepted when retried.
  replies = claim_keys(16, 1001);
  sched.run();
  for (auto& r : replies) {
    CAF_REQUIRE(*r && **r);
    CAF_CHECK_EQUAL((**r)->outcome, decision::accepted);
  }
  CAF_CHECK_EQUAL(records(), 16u);
  CAF_CHECK_EQUAL(db->applied_index(), 1u);
}

CAF_TEST(purges are answered with what is left) {
  std::vector<reply_slot<claim_result>> replies;
  for (int i = 0; i < 10; ++i)
    replies.push_back(ask<claim_result>(
      sys, store, claim_atom::value,
      make_claim("k" + std::to_string(i), 0, "{}", 100 + i)));
  sched.run();
  auto res = ask<purge_result>(sys, store, purge_atom::value, int64_t{104},
                               uint32_t{3});
  sched.run();
  CAF_REQUIRE(*res && **res);
  CAF_CHECK_EQUAL((**res)->purged, 3u);
  CAF_CHECK_EQUAL((**res)->next_due_ms, 103);
}

CAF_TEST(each transaction is numbered like a log entry) {
  CAF_CHECK_EQUAL(db->applied_index(), 0u);
  auto a = ask<claim_result>(sys, store, claim_atom::value,
                             make_claim("k1", 1000));
  sched.run();
  auto b = ask<claim_result>(sys, store, claim_atom::value,
                             make_claim("k2", 1000));
  sched.run();
  CAF_REQUIRE(*a && **a && *b && **b);
  CAF_CHECK_EQUAL(db->applied_index(), 2u);
  // A store actor spawned later on the same file continues the numbering.
  anon_send_exit(store, caf::exit_reason::user_shutdown);
  sched.run();
  store = spawn_local();
  sched.run();
  auto c = ask<claim_result>(sys, store, claim_atom::value,
                             make_claim("k1", 1001));
  sched.run();
  CAF_REQUIRE(*c && **c);
  CAF_CHECK_EQUAL((**c)->outcome, decision::duplicate);
  CAF_CHECK_EQUAL(db->applied_index(), 3u);
}

CAF_TEST(the store commits queued claims before it exits) {
  auto reply = ask<claim_result>(sys, store, claim_atom::value,
                                 make_claim("k1", 1000));
  sched.run_once(); // client sends
  sched.run_once(); // store queues
  anon_send_exit(store, caf::exit_reason::user_shutdown);
  sched.run();
  CAF_REQUIRE(*reply && **reply);
  CAF_CHECK_EQUAL((**reply)->outcome, decision::accepted);
  CAF_CHECK_EQUAL(db->count(), 1u);
}

CAF_TEST(a purge turns records in flight past their deadline in doubt) {
  anon_send_exit(store, caf::exit_reason::user_shutdown);
  sched.run();
  store_actor_options opts;
  opts.in_flight_deadline_ms = 10'000;
  store = spawn_local(opts);
  sched.run();
  auto in_flight = [](const std::string& key, int64_t now) {
    auto req = make_claim(key, now, "{}", 1'000);
    req.initial_state = record_state::in_flight;
    return req;
  };
  auto a = ask<claim_result>(sys, store, claim_atom::value, in_flight("a", 0));
  auto b = ask<claim_result>(sys, store, claim_atom::value,
                             in_flight("b", 5'000));
  sched.run();
  CAF_REQUIRE(*a && **a && *b && **b);
  auto purge = [&](int64_t now) {
    auto res = ask<purge_result>(sys, store, purge_atom::value, now,
                                 uint32_t{100});
    sched.run();
    CAF_REQUIRE(*res && **res);
    return ***res;
  };
  auto state_of = [&](const std::string& key) {
    auto res = ask<lookup_result>(sys, store, get_atom::value,
                                  std::string{"default"}, key);
    sched.run();
    CAF_REQUIRE(*res && **res);
    CAF_REQUIRE((**res)->found);
    return (**res)->rec.state;
  };
  // Past the TTL (1 s) but within the deadline: still in flight, and no
  // purge touches it.
  CAF_CHECK_EQUAL(purge(9'999).purged, 0u);
  CAF_CHECK_EQUAL(state_of("a"), record_state::in_flight);
  // Past the deadline of `a` only.
  CAF_CHECK_EQUAL(purge(12'000).purged, 0u);
  CAF_CHECK_EQUAL(state_of("a"), record_state::in_doubt);
  CAF_CHECK_EQUAL(state_of("b"), record_state::in_flight);
  auto st = stats();
  CAF_REQUIRE_EQUAL(st.unsettled.size(), 2u);
  CAF_CHECK_EQUAL(records(), 2u);
  // Neither is ever purged, however late.
  CAF_CHECK_EQUAL(purge(1'000'000'000).purged, 0u);
  CAF_CHECK_EQUAL(state_of("b"), record_state::in_doubt);
  CAF_CHECK_EQUAL(records(), 2u);
}

CAF_TEST(a doubt is answered with the number of records it turned in doubt) {
  auto req = make_claim("k1", 1000);
  req.initial_state = record_state::in_flight;
  req.owner = 7;
  auto a = ask<claim_result>(sys, store, claim_atom::value, req);
  sched.run();
  CAF_REQUIRE(*a && **a);
  auto other = ask<uint64_t>(sys, store, doubt_atom::value, uint64_t{8},
                             std::numeric_limits<int64_t>::max());
  auto own = ask<uint64_t>(sys, store, doubt_atom::value, uint64_t{7},
                           std::numeric_limits<int64_t>::max());
  sched.run();
  CAF_REQUIRE(*other && **other && *own && **own);
  CAF_CHECK_EQUAL(***other, 0u);
  CAF_CHECK_EQUAL(***own, 1u);
  auto k1 = db->load("default", "k1");
  CAF_REQUIRE(k1 && k1->found);
  CAF_CHECK_EQUAL(k1->rec.state, record_state::in_doubt);
}

CAF_TEST(an asynchronous sink holds at most its batches in flight and answers only settled ones) {
  auto sink = respawn_held(2);
  auto replies = claim_keys(5);
  sched.run();
  CAF_CHECK_EQUAL(sink->held.size(), 2u);
  for (auto& r : replies)
    CAF_CHECK(!*r);
  // One settles: its claim is answered, and the next batch takes its slot.
  sink->settle_oldest();
  sched.run();
  CAF_REQUIRE(*replies[0] && **replies[0]);
  CAF_CHECK_EQUAL((**replies[0])->outcome, decision::accepted);
  CAF_CHECK(!*replies[1]);
  CAF_CHECK_EQUAL(sink->held.size(), 2u);
  CAF_CHECK_EQUAL(sink->held.back().first.front().claim.key, "k2");
  // A refusing sink fails what is queued (k3, k4 and the new one), and
  // nothing more reaches it.
  sink->refuse = true;
  auto refused = ask<claim_result>(sys, store, claim_atom::value,
                                   make_claim("k9", 1000));
  sched.run();
  CAF_CHECK_EQUAL(sink->held.size(), 2u);
  for (auto& r : {replies[3], replies[4], refused}) {
    CAF_REQUIRE(*r && !**r);
    CAF_CHECK_EQUAL(errc_of((**r).error()), errc::not_leader);
  }
  sink->refuse = false;
  // At exit, what is still queued fails (it was never handed over), and
  // what is in flight fails with an unknown outcome.
  auto queued = ask<claim_result>(sys, store, claim_atom::value,
                                  make_claim("k10", 1000));
  sched.run();
  CAF_CHECK(!*queued);
  anon_send_exit(store, caf::exit_reason::user_shutdown);
  sched.run();
  for (auto& r : {replies[1], replies[2]}) {
    CAF_REQUIRE(*r && !**r);
    CAF_CHECK_EQUAL(errc_of((**r).error()), errc::leadership_lost);
  }
  CAF_REQUIRE(*queued && !**queued);
  CAF_CHECK_EQUAL(errc_of((**queued).error()), errc::store_unavailable);
  CAF_CHECK_EQUAL(db->count(), 1u);
}

CAF_TEST(a commit that does not return makes the store not ready) {
  // The sink commits off the store's thread (a single node's commit
  // thread, a cluster's Raft): the store answers probes while the commit
  // is stuck, and must not answer "ready" past the probe's bound.
  auto sink = respawn_held(1);
  auto claimed = ask<claim_result>(sys, store, claim_atom::value,
                                   make_claim("k1", 1000));
  sched.run();
  CAF_REQUIRE_EQUAL(sink->held.size(), 1u);
  auto within = ask<bool>(sys, store, ready_atom::value,
                          caf::timespan{std::chrono::hours(1)});
  auto past = ask<bool>(sys, store, ready_atom::value, caf::timespan{0});
  sched.run();
  CAF_REQUIRE(*within && **within);
  CAF_CHECK_EQUAL(***within, true);
  CAF_REQUIRE(*past && !**past);
  CAF_CHECK_EQUAL(errc_of((**past).error()), errc::store_unavailable);
  // Once it returned, ready again.
  sink->settle_oldest();
  sched.run();
  CAF_REQUIRE(*claimed && **claimed);
  auto after = ask<bool>(sys, store, ready_atom::value, caf::timespan{0});
  sched.run();
  CAF_REQUIRE(*after && **after);
  CAF_CHECK_EQUAL(***after, true);
}

CAF_TEST(an asynchronous sink settles an outcome of one on the thread that learnt it) {
  // The thread that learns the outcomes (a cluster's Raft thread) runs the
  // actors they wake from its loop: the store, then the requester, with no
  // worker woken for either.
  test::own_loop loop{sys};
  auto sink = respawn_held(2, {}, std::numeric_limits<uint64_t>::max());
  auto claim = [&](const char* key, int64_t now_ms) {
    return ask<claim_result>(sys, store, claim_atom::value,
                             make_claim(key, now_ms));
  };
  // Settles the oldest held batch: from the loop, with nothing for the
  // scheduler, or by the scheduler, with nothing for the loop.
  auto settle_here = [&] {
    sink->settle_oldest();
    CAF_CHECK(!sched.has_job());
    loop.run();
    CAF_CHECK(!sched.has_job());
  };
  auto settle_by_worker = [&] {
    sink->settle_oldest();
    CAF_CHECK(loop.queued.empty());
    CAF_CHECK(sched.has_job());
    sched.run();
  };
  auto accepted = [](const reply_slot<claim_result>& r) {
    CAF_REQUIRE(*r && **r);
    CAF_CHECK_EQUAL((**r)->outcome, decision::accepted);
  };
  auto one = claim("k1", 1000);
  sched.run();
  CAF_REQUIRE_EQUAL(sink->held.size(), 1u);
  settle_here();
  accepted(one);
  // A batch of two (load) is settled by the scheduler's workers: the
  // thread goes on with its own work.
  auto two = {claim("k2", 2000), claim("k3", 2000)};
  sched.run();
  CAF_REQUIRE_EQUAL(sink->held.size(), 1u);
  CAF_REQUIRE_EQUAL(sink->held.front().first.size(), 2u);
  settle_by_worker();
  for (auto& r : two)
    accepted(r);
  // So is a batch of one sent while another was in flight.
  auto first = claim("k4", 3000);
  sched.run();
  auto second = claim("k5", 3000);
  sched.run();
  CAF_REQUIRE_EQUAL(sink->held.size(), 2u);
  settle_here();
  accepted(first);
  settle_by_worker();
  accepted(second);
}

CAF_TEST(outcomes are admitted whatever claims fill the queue) {
  // Claims are the only new work; refusing the outcome of one already
  // executed would leave its record in doubt (and its sender told so).
  // Outcomes are bounded by the requests in flight, not by this queue.
  store_actor_options opts;
  opts.max_pending = 1;
  opts.max_pending_bytes = 1;
  auto sink = respawn_held(1, opts);
  auto in_flight = [this, &sink](const char* key) {
    auto req = make_claim(key, 1000);
    req.initial_state = record_state::in_flight;
    req.status = 0;
    auto res = ask<claim_result>(sys, store, claim_atom::value, req);
    sched.run();
    CAF_REQUIRE_EQUAL(sink->held.size(), 1u);
    sink->settle_oldest();
    sched.run();
    CAF_REQUIRE(*res && **res);
    return (**res)->rec.first_seen_ms;
  };
  auto seen_a = in_flight("a");
  auto seen_b = in_flight("b");
  // n1 takes the one slot in flight, n2 the one place in the queue, and
  // n3 finds it full.
  auto n1 = ask<claim_result>(sys, store, claim_atom::value,
                              make_claim("n1", 1000));
  sched.run();
  CAF_CHECK_EQUAL(sink->held.size(), 1u);
  auto n2 = ask<claim_result>(sys, store, claim_atom::value,
                              make_claim("n2", 1000));
  auto n3 = ask<claim_result>(sys, store, claim_atom::value,
                              make_claim("n3", 1000));
  sched.run();
  CAF_CHECK(!*n2);
  CAF_REQUIRE(*n3 && !**n3);
  CAF_CHECK_EQUAL(errc_of((**n3).error()), errc::overloaded);
  // Both outcomes still get in.
  auto outcome = [this](const char* key, int64_t first_seen) {
    record_update upd;
    upd.route = "default";
    upd.key = key;
    upd.op = transition::complete;
    upd.first_seen_ms = first_seen;
    upd.status = 200;
    upd.response = std::string(512, 'r');
    return ask<update_result>(sys, store, update_atom::value, upd);
  };
  auto out_a = outcome("a", seen_a);
  auto out_b = outcome("b", seen_b);
  sched.run();
  CAF_CHECK(!*out_a); // queued, not refused
  CAF_CHECK(!*out_b);
  while (!sink->held.empty()) {
    sink->settle_oldest();
    sched.run();
  }
  for (auto& out : {out_a, out_b}) {
    CAF_REQUIRE(*out && **out);
    CAF_CHECK((**out)->applied);
    CAF_CHECK_EQUAL((**out)->current.rec.state, record_state::completed);
  }
}

CAF_TEST(a pause beyond max_pauses is refused not answered as done) {
  for (size_t i = 0; i < max_pauses; ++i) {
    auto r = ask<route_pauses>(sys, store, pause_atom::value,
                               "r" + std::to_string(i), pause_op::pause,
                               int64_t{1000});
    sched.run();
    CAF_REQUIRE(*r && **r);
  }
  // Pausing a paused route again is no new pause: fine at the bound.
  auto again = ask<route_pauses>(sys, store, pause_atom::value,
                                 std::string{"r7"}, pause_op::pause,
                                 int64_t{2000});
  auto over = ask<route_pauses>(sys, store, pause_atom::value,
                                std::string{"one-more"}, pause_op::pause,
                                int64_t{2000});
  sched.run();
  CAF_REQUIRE(*again && **again);
  CAF_CHECK_EQUAL((***again).size(), max_pauses);
  CAF_REQUIRE(*over);
  CAF_REQUIRE(!**over);
  CAF_CHECK_EQUAL(errc_of((**over).error()), errc::invalid_argument);
}

CAF_TEST_FIXTURE_SCOPE_END()
