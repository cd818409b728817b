#define CAF_SUITE persistence.delivery
#include "caf/test/unit_test.hpp"

// Durable delivery in the store (common/record.hpp, the queued and failed
// states and their transitions): a durable claim is attempt 1, a not-sent
// attempt queues the record (or fails it past its deadline), one starter
// wins each later attempt, the queue is read in due order, failed records
// are redelivered, and none of it is ever purged. The log entry format
// carries it only when a command uses it (OGC4), so that a cluster that
// does not deliver durably writes what the build before reads (OGC3).

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <sqlite3.h>

#include "persistence/command.hpp"
#include "persistence/sqlite_store.hpp"
#include "tests/common/fixture.hpp"
#include "tests/common/sqlite_query.hpp"

using namespace oncegate;
using namespace oncegate::persistence;
using oncegate::test::make_claim;

namespace {

constexpr int64_t t0 = 1'000'000;
constexpr int64_t deadline = t0 + 60'000;

claim_request durable_claim(const std::string& key, int64_t now = t0) {
  auto req = make_claim(key, now, "{\"order\":\"" + key + "\"}");
  req.initial_state = record_state::in_flight;
  req.status = 0;
  req.response.clear();
  req.deliver_by_ms = deadline + (now - t0);
  req.signal_type = "application/json";
  req.owner = 1;
  req.request_id = 77;
  return req;
}

record_update defer(const std::string& key, int64_t first_seen,
                    uint32_t attempt, int64_t now, int64_t next) {
  delivery_attempt a;
  a.route = "default";
  a.key = key;
  a.first_seen_ms = first_seen;
  a.attempt = attempt;
  a.retry_at_ms = next;
  a.now_ms = now;
  return after_delivery(a, delivery::not_sent);
}

record_update start(const std::string& key, int64_t first_seen,
                    uint32_t attempt, int64_t now, uint64_t request_id,
                    uint64_t owner = 2) {
  record_update u;
  u.route = "default";
  u.key = key;
  u.op = transition::start_attempt;
  u.first_seen_ms = first_seen;
  u.attempt = attempt;
  u.owner = owner;
  u.request_id = request_id;
  u.now_ms = now;
  return u;
}

struct fixture {
  test::temp_dir dir;
  std::unique_ptr<sqlite_store> db;

  fixture() {
    store_options opts;
    opts.path = dir.file("store.db");
    auto res = sqlite_store::open(opts);
    CAF_REQUIRE(res);
    db = std::move(*res);
  }

  record claim(const claim_request& req) {
    CAF_REQUIRE(!db->begin());
    auto res = db->claim(req);
    CAF_REQUIRE(res);
    CAF_REQUIRE(!db->commit());
    return res->rec;
  }

  update_result update(const record_update& upd, int64_t now = 0) {
    CAF_REQUIRE_EQUAL(malformed(upd), nullptr);
    CAF_REQUIRE(!db->begin());
    auto res = db->update(upd, now);
    CAF_REQUIRE(res);
    CAF_REQUIRE(!db->commit());
    return *res;
  }

  record load(const std::string& key) {
    auto res = db->load("default", key);
    CAF_REQUIRE(res && res->found);
    return res->rec;
  }

  std::vector<std::string> due_keys(int64_t now) {
    auto due = db->due(now, 100);
    CAF_REQUIRE(due);
    std::vector<std::string> out;
    for (auto& r : *due)
      out.push_back(r.key);
    return out;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(delivery_tests, fixture)

CAF_TEST(a durable claim is attempt one with its deadline and signal) {
  auto rec = claim(durable_claim("k"));
  CAF_CHECK_EQUAL(rec.state, record_state::in_flight);
  CAF_CHECK_EQUAL(rec.attempts, 1u);
  CAF_CHECK_EQUAL(rec.next_attempt_ms, t0);
  CAF_CHECK_EQUAL(rec.deliver_by_ms, deadline);
  auto stored = load("k");
  CAF_CHECK_EQUAL(stored.signal, "{\"order\":\"k\"}");
  CAF_CHECK_EQUAL(stored.signal_type, "application/json");
  CAF_CHECK_EQUAL(stored.attempts, 1u);
  // A claim without a deadline stays what it was: no attempts counted.
  auto plain = make_claim("p", t0);
  plain.initial_state = record_state::in_flight;
  CAF_CHECK_EQUAL(claim(plain).attempts, 0u);
}

CAF_TEST(a not sent attempt queues the record and the queue is read in due order) {
  claim(durable_claim("a"));
  claim(durable_claim("b"));
  claim(durable_claim("c"));
  CAF_CHECK(update(defer("a", t0, 1, t0 + 10, t0 + 3000)).applied);
  CAF_CHECK(update(defer("b", t0, 1, t0 + 10, t0 + 1000)).applied);
  CAF_CHECK_EQUAL(load("a").state, record_state::queued);
  CAF_CHECK_EQUAL(load("a").next_attempt_ms, t0 + 3000);
  auto next = db->next_delivery();
  CAF_REQUIRE(next);
  CAF_CHECK_EQUAL(*next, t0 + 1000);
  CAF_CHECK_EQUAL(due_keys(t0 + 999), std::vector<std::string>{});
  CAF_CHECK_EQUAL(due_keys(t0 + 1000), std::vector<std::string>{"b"});
  CAF_CHECK_EQUAL(due_keys(t0 + 5000), (std::vector<std::string>{"b", "a"}));
  // The queue carries what an attempt needs.
  auto due = db->due(t0 + 5000, 1);
  CAF_REQUIRE(due && due->size() == 1);
  CAF_CHECK_EQUAL(due->front().signal, "{\"order\":\"b\"}");
  CAF_CHECK_EQUAL(due->front().signal_type, "application/json");
  // Still in flight: never in the queue.
  CAF_CHECK_EQUAL(load("c").state, record_state::in_flight);
}

CAF_TEST(one starter wins each attempt and it is in flight before it is sent) {
  claim(durable_claim("k"));
  CAF_CHECK(update(defer("k", t0, 1, t0 + 10, t0 + 100)).applied);
  auto first = update(start("k", t0, 2, t0 + 200, 1001, 2));
  CAF_CHECK(first.applied);
  auto rec = first.current.rec;
  CAF_CHECK_EQUAL(rec.state, record_state::in_flight);
  CAF_CHECK_EQUAL(rec.attempts, 2u);
  CAF_CHECK_EQUAL(rec.owner, 2u);
  CAF_CHECK_EQUAL(rec.request_id, 1001u);
  CAF_CHECK_EQUAL(rec.next_attempt_ms, t0 + 200);
  // Another starter of the same attempt (a deposed leader, a second loop):
  // refused, the record is left as the winner made it.
  CAF_CHECK(!update(start("k", t0, 2, t0 + 201, 2002, 3)).applied);
  CAF_CHECK(!update(start("k", t0, 3, t0 + 201, 2002, 3)).applied);
  CAF_CHECK_EQUAL(load("k").request_id, 1001u);
  // The outcome of an attempt that is not the running one changes nothing.
  CAF_CHECK(!update(defer("k", t0, 1, t0 + 300, t0 + 400)).applied);
  // The running one's does.
  auto back = defer("k", t0, 2, t0 + 300, t0 + 400);
  back.request_id = 1001;
  CAF_CHECK(update(back).applied);
  CAF_CHECK_EQUAL(load("k").state, record_state::queued);
}

CAF_TEST(a paused route holds its queue and refuses new records only) {
  claim(durable_claim("a"));
  claim(durable_claim("b"));
  CAF_CHECK(update(defer("a", t0, 1, t0 + 10, t0 + 100)).applied);
  CAF_CHECK(update(defer("b", t0, 1, t0 + 10, t0 + 200)).applied);
  auto pause = [&](pause_op op, int64_t now) {
    CAF_REQUIRE(!db->begin());
    CAF_REQUIRE(!db->pause("default", op, now));
    CAF_REQUIRE(!db->commit());
    auto xs = db->pauses();
    CAF_REQUIRE(xs);
    return *xs;
  };
  auto paused = pause(pause_op::pause, t0 + 50);
  CAF_REQUIRE_EQUAL(paused.size(), 1u);
  CAF_CHECK_EQUAL(paused[0].route, "default");
  CAF_CHECK_EQUAL(paused[0].since_ms, t0 + 50);
  // Paused again: still since the first time.
  CAF_CHECK_EQUAL(pause(pause_op::pause, t0 + 60)[0].since_ms, t0 + 50);
  // Held: nothing due, no next delivery (a runner would spin on it), and
  // an attempt started before the pause is not applied.
  CAF_CHECK_EQUAL(due_keys(t0 + 10'000), std::vector<std::string>{});
  CAF_CHECK_EQUAL(db->next_delivery(), int64_t{-1});
  CAF_CHECK(!update(start("a", t0, 2, t0 + 300, 1001)).applied);
  CAF_CHECK_EQUAL(load("a").state, record_state::queued);
  // A new key is refused; a duplicate stays a duplicate.
  CAF_REQUIRE(!db->begin());
  auto fresh = db->claim(make_claim("new", t0 + 400));
  auto resend = durable_claim("b", t0 + 400);
  resend.request_id = 78; // another attempt of the sender
  auto again = db->claim(resend);
  CAF_REQUIRE(!db->commit());
  CAF_REQUIRE(fresh && again);
  CAF_CHECK_EQUAL(fresh->outcome, decision::paused);
  CAF_CHECK_EQUAL(again->outcome, decision::duplicate);
  CAF_CHECK(!db->load("default", "new")->found);
  // Resumed: the queue is as it was.
  CAF_CHECK(pause(pause_op::resume, t0 + 500).empty());
  CAF_CHECK_EQUAL(due_keys(t0 + 10'000), (std::vector<std::string>{"a", "b"}));
  CAF_CHECK(update(start("a", t0, 2, t0 + 600, 1002)).applied);
}

CAF_TEST(the deadline fails a record and an operator redelivers it) {
  claim(durable_claim("late"));
  // Not sent after the deadline: failed at once.
  CAF_CHECK(update(defer("late", t0, 1, deadline, deadline + 1000)).applied);
  CAF_CHECK_EQUAL(load("late").state, record_state::failed);
  CAF_CHECK_EQUAL(due_keys(deadline + 10'000), std::vector<std::string>{});
  // Queued, then its deadline passes before an attempt: fail; no attempt
  // starts past the deadline.
  claim(durable_claim("idle"));
  CAF_CHECK(update(defer("idle", t0, 1, t0 + 1, t0 + 10)).applied);
  CAF_CHECK(!update(start("idle", t0, 2, deadline, 5)).applied);
  record_update fail;
  fail.route = "default";
  fail.key = "idle";
  fail.op = transition::fail;
  fail.first_seen_ms = t0;
  fail.now_ms = deadline - 1;
  CAF_CHECK(!update(fail).applied); // not yet
  fail.now_ms = deadline;
  CAF_CHECK(update(fail).applied);
  CAF_CHECK_EQUAL(load("idle").state, record_state::failed);
  // Redelivered: queued, due now, with a new deadline.
  record_update again;
  again.route = "default";
  again.key = "idle";
  again.op = transition::redeliver;
  again.now_ms = deadline + 5;
  again.deliver_by_ms = deadline + 60'000;
  CAF_CHECK(update(again).applied);
  auto rec = load("idle");
  CAF_CHECK_EQUAL(rec.state, record_state::queued);
  CAF_CHECK_EQUAL(rec.next_attempt_ms, deadline + 5);
  CAF_CHECK_EQUAL(rec.deliver_by_ms, deadline + 60'000);
  CAF_CHECK_EQUAL(due_keys(deadline + 5), std::vector<std::string>{"idle"});
  CAF_CHECK(update(start("idle", t0, 2, deadline + 6, 9)).applied);
  // Only a failed record is redelivered.
  again.now_ms = deadline + 7;
  CAF_CHECK(!update(again).applied);
}

CAF_TEST(a record that does not deliver durably is released as before) {
  auto plain = make_claim("p", t0);
  plain.initial_state = record_state::in_flight;
  claim(plain);
  // Its first attempt's outcome without a retry time: release.
  delivery_attempt a;
  a.route = "default";
  a.key = "p";
  a.first_seen_ms = t0;
  auto upd = after_delivery(a, delivery::not_sent);
  CAF_CHECK(upd.op == transition::release);
  CAF_CHECK(!uses_delivery(upd));
  // A defer aimed at it (a buggy or forged peer) changes nothing.
  CAF_CHECK(!update(defer("p", t0, 1, t0 + 1, t0 + 2)).applied);
  CAF_CHECK_EQUAL(load("p").state, record_state::in_flight);
  CAF_CHECK(update(upd).applied);
  CAF_CHECK(!db->load("default", "p")->found);
}

CAF_TEST(queued and failed records are never purged and are listed and released) {
  claim(durable_claim("q"));
  claim(durable_claim("f"));
  update(defer("q", t0, 1, t0 + 1, t0 + 100));
  update(defer("f", t0, 1, deadline, deadline + 1));
  CAF_REQUIRE(!db->begin());
  auto purged = db->purge(std::numeric_limits<int64_t>::max() / 2, 100);
  CAF_REQUIRE(purged);
  CAF_REQUIRE(!db->commit());
  CAF_CHECK_EQUAL(*purged, 0u);
  auto queued = db->list("default", record_state::queued, "", 10);
  auto failed = db->list("default", record_state::failed, "", 10);
  CAF_REQUIRE(queued && failed);
  CAF_REQUIRE_EQUAL(queued->records.size(), 1u);
  CAF_CHECK_EQUAL(queued->records[0].key, "q");
  CAF_REQUIRE_EQUAL(failed->records.size(), 1u);
  CAF_CHECK_EQUAL(failed->records[0].attempts, 1u);
  auto counts = db->unsettled();
  CAF_REQUIRE(counts);
  CAF_CHECK_EQUAL(counts->size(), 2u);
  for (auto key : {"q", "f"}) {
    record_update rel;
    rel.route = "default";
    rel.key = key;
    rel.op = transition::release_settled;
    CAF_CHECK(update(rel).applied);
  }
  auto left = db->count();
  CAF_REQUIRE(left);
  CAF_CHECK_EQUAL(*left, 0u);
}

CAF_TEST(the forward deadline counts from the start of the running attempt) {
  claim(durable_claim("k"));
  update(defer("k", t0, 1, t0 + 1, t0 + 10));
  update(start("k", t0, 2, t0 + 50'000, 5, 2));
  // A cutoff after the claim but before the attempt started: left alone.
  CAF_REQUIRE(!db->begin());
  auto n = db->doubt(0, t0 + 40'000);
  CAF_REQUIRE(n);
  CAF_REQUIRE(!db->commit());
  CAF_CHECK_EQUAL(*n, 0u);
  CAF_CHECK_EQUAL(load("k").state, record_state::in_flight);
  // One after its start: in doubt (it may have been sent).
  CAF_REQUIRE(!db->begin());
  n = db->doubt(2, t0 + 50'001);
  CAF_REQUIRE(!db->commit());
  CAF_CHECK_EQUAL(*n, 1u);
  CAF_CHECK_EQUAL(load("k").state, record_state::in_doubt);
}

CAF_TEST(log entries use the new format only when a command needs it) {
  command plain;
  plain.type = command::kind::claim;
  plain.claim = make_claim("k", t0);
  auto old_entry = encode_batch({plain});
  uint32_t magic = 0;
  std::memcpy(&magic, old_entry.data(), 4);
  CAF_CHECK_EQUAL(magic, 0x3343474Fu); // "OGC3": the build before reads it
  command durable;
  durable.type = command::kind::claim;
  durable.claim = durable_claim("d");
  command started;
  started.type = command::kind::update;
  started.update = start("d", t0, 2, t0 + 5, 99, 3);
  auto entry = encode_batch({plain, durable, started});
  std::memcpy(&magic, entry.data(), 4);
  CAF_CHECK_EQUAL(magic, 0x3443474Fu); // "OGC4"
  CAF_CHECK_EQUAL(entry.size() % 8, 0u);
  CAF_CHECK_LESS_OR_EQUAL(entry.size(), encoded_size(plain)
                                          + encoded_size(durable)
                                          + encoded_size(started) + 8 + 8);
  auto back = decode_batch(entry);
  CAF_REQUIRE(back);
  CAF_REQUIRE_EQUAL(back->size(), 3u);
  auto& c = (*back)[1].claim;
  CAF_CHECK_EQUAL(c.deliver_by_ms, deadline);
  CAF_CHECK_EQUAL(c.signal_type, "application/json");
  auto& u = (*back)[2].update;
  CAF_CHECK(u.op == transition::start_attempt);
  CAF_CHECK_EQUAL(u.attempt, 2u);
  CAF_CHECK_EQUAL(u.owner, 3u);
  CAF_CHECK_EQUAL(u.request_id, 99u);
  CAF_CHECK_EQUAL(u.now_ms, t0 + 5);
  // An OGC3 entry cannot carry a delivery transition.
  auto forged = encode_batch({plain});
  command fake;
  fake.type = command::kind::update;
  fake.update.route = "default";
  fake.update.key = "k";
  fake.update.op = transition::release;
  auto upd_entry = encode_batch({fake});
  // The transition byte follows magic, count, kind and two strings.
  auto at = 4 + 4 + 1 + (4 + 7) + (4 + 1);
  CAF_REQUIRE_EQUAL(static_cast<uint8_t>(upd_entry[at]), 1u);
  upd_entry[at] = static_cast<char>(transition::start_attempt);
  CAF_CHECK(!decode_batch(upd_entry));
  CAF_CHECK(decode_batch(forged));
}

CAF_TEST(applying the same entries on two replicas gives the same queue) {
  test::temp_dir other_dir;
  store_options opts;
  opts.path = other_dir.file("other.db");
  auto other = sqlite_store::open(opts);
  CAF_REQUIRE(other);
  std::vector<std::vector<command>> log;
  auto add = [&](auto fill) {
    command c;
    fill(c);
    log.push_back({c});
  };
  add([](command& c) {
    c.type = command::kind::claim;
    c.claim = durable_claim("x");
  });
  add([](command& c) {
    c.type = command::kind::update;
    c.update = defer("x", t0, 1, t0 + 5, t0 + 500);
  });
  add([](command& c) {
    c.type = command::kind::update;
    c.update = start("x", t0, 2, t0 + 600, 42, 1);
  });
  uint64_t index = 0;
  for (auto& batch : log) {
    ++index;
    auto entry = decode_batch(encode_batch(batch));
    CAF_REQUIRE(entry);
    CAF_REQUIRE(apply_batch(*db, index, *entry));
    CAF_REQUIRE(apply_batch(**other, index, *entry));
  }
  auto a = load("x");
  auto b = (*other)->load("default", "x");
  CAF_REQUIRE(b && b->found);
  CAF_CHECK_EQUAL(a.state, record_state::in_flight);
  CAF_CHECK_EQUAL(b->rec.state, a.state);
  CAF_CHECK_EQUAL(b->rec.attempts, 2u);
  CAF_CHECK_EQUAL(b->rec.request_id, a.request_id);
  CAF_CHECK_EQUAL(b->rec.next_attempt_ms, a.next_attempt_ms);
  // The proposer's time of the start moved the store clock (never back).
  auto clock = db->clock_ms();
  CAF_REQUIRE(clock);
  CAF_CHECK_EQUAL(*clock, t0 + 600);
}

CAF_TEST(a version 4 database is migrated with its records) {
  test::temp_dir old_dir;
  auto path = old_dir.file("v4.db");
  {
    store_options opts;
    opts.path = path;
    auto fresh = sqlite_store::open(opts);
    CAF_REQUIRE(fresh);
  }
  // Take the file back to version 4: what the build before left.
  sqlite3* raw = nullptr;
  CAF_REQUIRE_EQUAL(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  auto sql = "DROP TABLE grants;"
             "DROP TABLE pauses;"
             "DROP INDEX records_due;"
             "ALTER TABLE records DROP COLUMN attempts;"
             "ALTER TABLE records DROP COLUMN next_attempt_ms;"
             "ALTER TABLE records DROP COLUMN deliver_by_ms;"
             "ALTER TABLE records DROP COLUMN signal_type;"
             "ALTER TABLE records DROP COLUMN reconciles;"
             "UPDATE meta SET value = 4 WHERE name = 'schema_version';"
             "INSERT INTO records(route, key, state, fingerprint,"
             "  first_seen_ms, expires_at_ms, status, response, signal,"
             "  headers, owner, request_id)"
             "  VALUES('default', 'old', 2, x'00', 5, 9000000000000, 0, '',"
             "  '{}', '', 1, 2);";
  CAF_REQUIRE_EQUAL(sqlite3_exec(raw, sql, nullptr, nullptr, nullptr),
                    SQLITE_OK);
  sqlite3_close(raw);
  store_options opts;
  opts.path = path;
  auto db4 = sqlite_store::open(opts);
  CAF_REQUIRE(db4);
  auto rec = (*db4)->load("default", "old");
  CAF_REQUIRE(rec && rec->found);
  CAF_CHECK_EQUAL(rec->rec.state, record_state::in_doubt);
  CAF_CHECK_EQUAL(rec->rec.attempts, 0u);
  CAF_CHECK_EQUAL(rec->rec.deliver_by_ms, 0);
  auto next = (*db4)->next_delivery();
  CAF_REQUIRE(next);
  CAF_CHECK_EQUAL(*next, -1);
}

CAF_TEST(reconciliation settles an in doubt record either way) {
  claim(durable_claim("found"));
  claim(durable_claim("absent"));
  for (auto key : {"found", "absent"}) {
    record_update doubt;
    doubt.route = "default";
    doubt.key = key;
    doubt.op = transition::in_doubt;
    doubt.first_seen_ms = t0;
    CAF_CHECK(update(doubt).applied);
  }
  // No verdict: stays in doubt, asked again later, counted.
  record_update wait;
  wait.route = "default";
  wait.key = "absent";
  wait.op = transition::reconcile_wait;
  wait.first_seen_ms = t0;
  wait.now_ms = t0 + 100;
  wait.next_attempt_ms = t0 + 5000;
  CAF_CHECK(update(wait).applied);
  auto rec = load("absent");
  CAF_CHECK_EQUAL(rec.state, record_state::in_doubt);
  CAF_CHECK_EQUAL(rec.reconciles, 1u);
  CAF_CHECK_EQUAL(rec.next_attempt_ms, t0 + 5000);
  // The upstream does not have it: queued, due now, delivered once.
  record_update again;
  again.route = "default";
  again.key = "absent";
  again.op = transition::requeue;
  again.first_seen_ms = t0;
  again.now_ms = t0 + 6000;
  again.deliver_by_ms = t0 + 66'000;
  CAF_CHECK(update(again).applied);
  CAF_CHECK_EQUAL(load("absent").state, record_state::queued);
  CAF_CHECK_EQUAL(due_keys(t0 + 6000), std::vector<std::string>{"absent"});
  // Only an in-doubt record is requeued.
  CAF_CHECK(!update(again).applied);
  // The upstream has it: completed with its answer, never sent again.
  record_update done;
  done.route = "default";
  done.key = "found";
  done.op = transition::complete;
  done.first_seen_ms = t0;
  done.status = 200;
  done.response = "{\"order\":\"filled\"}";
  CAF_CHECK(update(done).applied);
  CAF_CHECK_EQUAL(load("found").state, record_state::completed);
  auto requeue_found = again;
  requeue_found.key = "found";
  CAF_CHECK(!update(requeue_found).applied);
}

CAF_TEST(malformed delivery updates and claims are refused) {
  auto bad = start("k", t0, 1, t0, 5); // attempt 1 is the claim's own
  CAF_CHECK_NOT_EQUAL(malformed(bad), nullptr);
  bad = start("k", t0, 2, 0, 5); // no time
  CAF_CHECK_NOT_EQUAL(malformed(bad), nullptr);
  bad = start("k", t0, 2, t0, 0); // no request id
  CAF_CHECK_NOT_EQUAL(malformed(bad), nullptr);
  auto d = defer("k", t0, 0, t0, t0 + 1); // no attempt
  CAF_CHECK_NOT_EQUAL(malformed(d), nullptr);
  auto c = durable_claim("k");
  c.deliver_by_ms = c.now_ms; // a deadline that passed already
  CAF_CHECK_NOT_EQUAL(malformed(c), nullptr);
  c = durable_claim("k");
  c.initial_state = record_state::queued; // never claimed
  CAF_CHECK_NOT_EQUAL(malformed(c), nullptr);
  c = durable_claim("k");
  c.signal_type = std::string(2000, 'x');
  CAF_CHECK_NOT_EQUAL(malformed(c), nullptr);
  CAF_CHECK_EQUAL(malformed(durable_claim("k")), nullptr);
}

CAF_TEST_FIXTURE_SCOPE_END()
