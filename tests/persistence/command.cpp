#define CAF_SUITE persistence.command
#include "caf/test/unit_test.hpp"

#include <limits>

#include "common/errc.hpp"
#include "persistence/command.hpp"
#include "persistence/sqlite_store.hpp"
#include "tests/common/fixture.hpp"

using namespace oncegate;
using namespace oncegate::persistence;
using oncegate::test::make_claim;

namespace {

std::vector<command> sample_batch() {
  std::vector<command> batch;
  command c;
  c.type = command::kind::claim;
  c.claim = make_claim("k1", 1000, "{\"a\":1}");
  c.claim.headers = "Content-Type: application/json";
  c.claim.initial_state = record_state::in_flight; // completed by `u`
  c.claim.owner = 3;
  c.claim.request_id = 0x0123456789ABCDEFu;
  batch.push_back(c);
  command u;
  u.type = command::kind::update;
  u.update.route = "default";
  u.update.key = "k1";
  u.update.op = transition::complete;
  u.update.first_seen_ms = 1000;
  u.update.status = 201;
  u.update.response = std::string("with\0nul", 8);
  batch.push_back(u);
  command p;
  p.type = command::kind::purge;
  p.now_ms = 5000;
  p.limit = 250;
  batch.push_back(p);
  command d;
  d.type = command::kind::doubt;
  d.owner = 2;
  d.before_ms = std::numeric_limits<int64_t>::max();
  batch.push_back(d);
  return batch;
}

struct fixture {
  test::temp_dir dir;
  /// Before any store opens: its connections get the commit hook.
  test::commit_fault fault;
  std::unique_ptr<sqlite_store> open(const char* name = "fsm.db") {
    store_options opts;
    opts.path = dir.file(name);
    auto res = sqlite_store::open(opts);
    CAF_REQUIRE(res);
    return std::move(*res);
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(command_tests, fixture)

CAF_TEST(a batch round trips through its encoding padded to 8 bytes) {
  auto batch = sample_batch();
  auto entry = encode_batch(batch);
  CAF_CHECK_EQUAL(entry.size() % 8, 0u);
  auto back = decode_batch(entry);
  CAF_REQUIRE(back);
  CAF_REQUIRE_EQUAL(back->size(), 4u);
  auto& c = (*back)[0].claim;
  CAF_CHECK_EQUAL(c.key, "k1");
  CAF_CHECK_EQUAL(c.now_ms, 1000);
  CAF_CHECK_EQUAL(c.ttl_ms, 60'000);
  CAF_CHECK(c.fingerprint == batch[0].claim.fingerprint);
  CAF_CHECK_EQUAL(c.headers, "Content-Type: application/json");
  CAF_CHECK_EQUAL(c.signal, "{\"a\":1}");
  CAF_CHECK_EQUAL(c.owner, 3u);
  CAF_CHECK_EQUAL(c.request_id, 0x0123456789ABCDEFu);
  auto& u = (*back)[1].update;
  CAF_CHECK(u.op == transition::complete);
  CAF_CHECK_EQUAL(u.status, 201);
  CAF_CHECK_EQUAL(u.response, std::string("with\0nul", 8));
  CAF_CHECK_EQUAL((*back)[2].now_ms, 5000);
  CAF_CHECK_EQUAL((*back)[2].limit, 250u);
  auto& d = (*back)[3];
  CAF_CHECK(d.type == command::kind::doubt);
  CAF_CHECK_EQUAL(d.owner, 2u);
  CAF_CHECK_EQUAL(d.before_ms, std::numeric_limits<int64_t>::max());
  CAF_CHECK_EQUAL(encode_batch({}).size(), 8u);
}

CAF_TEST(malformed entries are refused) {
  auto entry = encode_batch(sample_batch());
  CAF_CHECK(!decode_batch(entry.substr(0, entry.size() - 8)));
  CAF_CHECK(!decode_batch(entry.substr(0, entry.size() - 3)));
  auto bad = entry;
  bad[0] = 'X';
  CAF_CHECK(!decode_batch(bad));
  bad = entry;
  bad[8] = 9; // unknown command kind
  CAF_CHECK(!decode_batch(bad));
  bad = entry + std::string(8, '\1');
  CAF_CHECK(!decode_batch(bad));
  // Every proper prefix of a doubt is refused, and so is the old format.
  std::vector<command> doubt(1);
  doubt[0].type = command::kind::doubt;
  doubt[0].owner = 1;
  doubt[0].before_ms = 5;
  auto d = encode_batch(doubt);
  CAF_REQUIRE(decode_batch(d));
  for (size_t len = 0; len < d.size(); len += 8)
    CAF_CHECK(!decode_batch(d.substr(0, len)));
  bad = d;
  bad[3] = '1'; // "OGC1": the format before owners and request ids
  CAF_CHECK(!decode_batch(bad));
  auto err = decode_batch("");
  CAF_REQUIRE(!err);
  CAF_CHECK_EQUAL(errc_of(err.error()), errc::invalid_argument);
}

CAF_TEST(the log entries keep the bytes released builds wrote) {
  // OGC3 and OGC4 as the build before the shared codec (persistence/codec)
  // wrote them: a node must read the log its predecessor wrote, and its
  // predecessor the log it writes when no command needs OGC4.
  std::vector<command> b3;
  command c;
  c.type = command::kind::claim;
  auto& q = c.claim;
  q.route = "r";
  q.key = "k";
  q.fingerprint = std::string(32, '\x11');
  q.now_ms = 1000;
  q.ttl_ms = 60000;
  q.initial_state = record_state::in_flight;
  q.status = 201;
  q.headers = "h";
  q.response = "resp";
  q.signal = "sig";
  q.owner = 3;
  q.request_id = 0x0123456789ABCDEFu;
  b3.push_back(c);
  command u;
  u.type = command::kind::update;
  u.update.route = "r";
  u.update.key = "k";
  u.update.op = transition::release_settled;
  u.update.first_seen_ms = 1000;
  u.update.status = 200;
  u.update.headers = "x";
  u.update.response = "y";
  u.update.request_id = 9;
  b3.push_back(u);
  command p;
  p.type = command::kind::purge;
  p.now_ms = 5;
  p.limit = 7;
  b3.push_back(p);
  command d;
  d.type = command::kind::doubt;
  d.owner = 2;
  d.before_ms = -1;
  b3.push_back(d);
  auto b4 = b3;
  b4[0].claim.deliver_by_ms = 99999;
  b4[0].claim.signal_type = "t";
  auto& v = b4[1].update;
  v.op = transition::reconcile_wait;
  v.attempt = 4;
  v.owner = 5;
  v.now_ms = 6;
  v.next_attempt_ms = 7;
  v.deliver_by_ms = 8;
  auto hex = [](const std::string& bytes) {
    std::string out;
    for (unsigned char ch : bytes) {
      out += "0123456789abcdef"[ch >> 4];
      out += "0123456789abcdef"[ch & 15];
    }
    return out;
  };
  CAF_CHECK_EQUAL(hex(encode_batch(b3)),
    "4f47433304000000010100000072010000006b20000000111111111111111111"
    "1111111111111111111111111111111111111111111111e80300000000000060"
    "ea00000000000000c90001000000680400000072657370030000007369670300"
    "000000000000efcdab8967452301020100000072010000006b03e80300000000"
    "0000c80001000000780100000079090000000000000003050000000000000007"
    "000000040200000000000000ffffffffffffffff00000000");
  CAF_CHECK_EQUAL(hex(encode_batch(b4)),
    "4f47433404000000010100000072010000006b20000000111111111111111111"
    "1111111111111111111111111111111111111111111111e80300000000000060"
    "ea00000000000000c90001000000680400000072657370030000007369670300"
    "000000000000efcdab89674523019f8601000000000001000000740201000000"
    "72010000006b09e803000000000000c800010000007801000000790900000000"
    "0000000400000005000000000000000600000000000000070000000000000008"
    "0000000000000003050000000000000007000000040200000000000000ffffff"
    "ffffffffff000000");
  auto back = decode_batch(encode_batch(b4));
  CAF_REQUIRE(back);
  CAF_CHECK_EQUAL(encode_batch(*back), encode_batch(b4));
}

CAF_TEST(an entry applies once and its index survives a restart) {
  auto batch = sample_batch();
  {
    auto db = open();
    CAF_CHECK_EQUAL(db->applied_index(), 0u);
    auto res = apply_batch(*db, 1, batch);
    CAF_REQUIRE(res);
    CAF_REQUIRE_EQUAL(res->size(), 4u);
    CAF_CHECK_EQUAL((*res)[0].claim.outcome, decision::accepted);
    CAF_CHECK((*res)[1].update.applied);
    CAF_CHECK_EQUAL((*res)[3].doubted, 0u); // completed before the doubt
    CAF_CHECK_EQUAL(db->applied_index(), 1u);
  }
  auto db = open();
  CAF_CHECK_EQUAL(db->applied_index(), 1u);
  // Replay of the same entry after a restart changes nothing.
  auto again = apply_batch(*db, 1, batch);
  CAF_REQUIRE(again);
  CAF_CHECK(again->empty());
  auto rec = db->load("default", "k1");
  CAF_REQUIRE(rec && rec->found);
  CAF_CHECK_EQUAL(rec->rec.status, 201);
  // The next entry applies; a claim of the same key is a duplicate.
  std::vector<command> next(1);
  next[0].claim = make_claim("k1", 2000, "{\"a\":1}");
  auto res = apply_batch(*db, 2, next);
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL((*res)[0].claim.outcome, decision::duplicate);
  CAF_CHECK_EQUAL(db->applied_index(), 2u);
}

CAF_TEST(an entry whose commit fails is not applied and applies on retry) {
  auto db = open();
  auto batch = sample_batch();
  fault.fail_next();
  auto res = apply_batch(*db, 1, batch);
  CAF_CHECK_EQUAL(fault.failures(), 1);
  // No results from a transaction that did not commit.
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(errc_of(res.error()), errc::commit_failed);
  CAF_CHECK_EQUAL(db->applied_index(), 0u);
  CAF_CHECK_EQUAL(db->count(), 0u);
  // The same entry applies in full when it is tried again.
  res = apply_batch(*db, 1, batch);
  CAF_REQUIRE(res);
  CAF_REQUIRE_EQUAL(res->size(), 4u);
  CAF_CHECK_EQUAL((*res)[0].claim.outcome, decision::accepted);
  CAF_CHECK_EQUAL(db->applied_index(), 1u);
  CAF_CHECK_EQUAL(db->count(), 1u);
}

CAF_TEST(entries applied together answer as one by one and a failed commit applies none) {
  // One by one, in a file of their own: what the entries must answer.
  std::vector<log_entry> entries(3);
  entries[0].index = 1;
  entries[0].batch = sample_batch();
  entries[1].index = 2;
  entries[1].batch.resize(1);
  entries[1].batch[0].claim = make_claim("k1", 2000, "{\"a\":1}");
  entries[2].index = 3;
  entries[2].batch.resize(1);
  entries[2].batch[0].claim = make_claim("k2", 2500);
  auto one = open("one_by_one.db");
  std::vector<std::vector<command_result>> expected;
  for (auto& e : entries) {
    auto res = apply_batch(*one, e.index, e.batch);
    CAF_REQUIRE(res);
    expected.push_back(*res);
  }
  auto db = open();
  // Entry 1 was applied before (a restart): skipped, no results.
  CAF_REQUIRE(apply_batch(*db, 1, entries[0].batch));
  // A failed commit applies none of them.
  fault.fail_next();
  auto failed = apply_entries(*db, entries);
  CAF_REQUIRE(!failed);
  CAF_CHECK_EQUAL(db->applied_index(), 1u);
  CAF_CHECK(!db->load("default", "k2")->found);
  auto res = apply_entries(*db, entries);
  CAF_REQUIRE(res);
  CAF_REQUIRE_EQUAL(res->size(), 3u);
  CAF_CHECK((*res)[0].empty());
  for (size_t i = 1; i < 3; ++i) {
    CAF_REQUIRE_EQUAL((*res)[i].size(), expected[i].size());
    CAF_CHECK_EQUAL((*res)[i][0].claim.outcome, expected[i][0].claim.outcome);
    CAF_CHECK_EQUAL((*res)[i][0].claim.rec.first_seen_ms,
                    expected[i][0].claim.rec.first_seen_ms);
  }
  CAF_CHECK_EQUAL((*res)[1][0].claim.outcome, decision::duplicate);
  CAF_CHECK_EQUAL((*res)[2][0].claim.outcome, decision::accepted);
  CAF_CHECK_EQUAL(db->applied_index(), 3u);
  CAF_CHECK_EQUAL(db->count(), one->count());
  CAF_CHECK_EQUAL(db->clock_ms(), one->clock_ms());
  // Nothing to apply is no transaction at all.
  CAF_CHECK(apply_entries(*db, {}));
}

CAF_TEST(a doubt command turns one owners old in flight records in doubt) {
  auto db = open();
  std::vector<command> claims;
  auto add = [&](const char* key, int64_t now, uint64_t owner) {
    command c;
    c.claim = make_claim(key, now);
    c.claim.initial_state = record_state::in_flight;
    c.claim.owner = owner;
    claims.push_back(c);
  };
  add("a", 1000, 1);
  add("b", 3000, 1);
  add("c", 1000, 2);
  CAF_REQUIRE(apply_batch(*db, 1, claims));
  std::vector<command> doubts(2);
  doubts[0].type = command::kind::doubt;
  doubts[0].owner = 1;
  doubts[0].before_ms = 2000;
  doubts[1].type = command::kind::doubt;
  doubts[1].owner = 0;
  doubts[1].before_ms = 1000; // nothing is older than 1000
  auto res = apply_batch(*db, 2, doubts);
  CAF_REQUIRE(res);
  CAF_REQUIRE_EQUAL(res->size(), 2u);
  CAF_CHECK_EQUAL((*res)[0].doubted, 1u);
  CAF_CHECK_EQUAL((*res)[1].doubted, 0u);
  CAF_CHECK_EQUAL(db->applied_index(), 2u);
  auto page = db->list("default", record_state::in_doubt, "", 10);
  CAF_REQUIRE(page);
  CAF_REQUIRE_EQUAL(page->records.size(), 1u);
  CAF_CHECK_EQUAL(page->records[0].key, "a");
  // Replayed after a restart: skipped, nothing doubted twice.
  auto again = apply_batch(*db, 2, doubts);
  CAF_REQUIRE(again);
  CAF_CHECK(again->empty());
}

CAF_TEST(replicas applying the same entries reach the same state) {
  test::temp_dir other;
  auto a = open();
  store_options opts;
  opts.path = other.file("replica.db");
  auto b_res = sqlite_store::open(opts);
  CAF_REQUIRE(b_res);
  auto& b = *b_res;
  std::vector<std::vector<command>> log;
  for (int i = 0; i < 20; ++i) {
    std::vector<command> batch(2);
    batch[0].claim = make_claim("k" + std::to_string(i % 7), 1000 + i * 100,
                                "{}", 500);
    batch[1].type = command::kind::purge;
    batch[1].now_ms = 1000 + i * 100;
    batch[1].limit = 3;
    log.push_back(batch);
  }
  for (size_t i = 0; i < log.size(); ++i) {
    auto ra = apply_batch(*a, i + 1, log[i]);
    auto rb = apply_batch(*b, i + 1, log[i]);
    CAF_REQUIRE(ra && rb);
    for (size_t j = 0; j < ra->size(); ++j) {
      CAF_CHECK_EQUAL((*ra)[j].claim.outcome, (*rb)[j].claim.outcome);
      CAF_CHECK_EQUAL((*ra)[j].purged, (*rb)[j].purged);
    }
  }
  CAF_CHECK_EQUAL(a->count(), b->count());
  CAF_CHECK_EQUAL(a->next_expiry(), b->next_expiry());
}

CAF_TEST(the store clock never moves backwards whatever the proposers say) {
  auto db = open();
  // ttl 60 s (make_claim's default).
  std::vector<command> first(1);
  first[0].claim = make_claim("k", 100000);
  CAF_REQUIRE(apply_batch(*db, 1, first));
  CAF_CHECK_EQUAL(db->clock_ms(), 100000);
  // A proposer whose clock is two hours behind: its claim is decided and
  // stamped at the store's clock, not at its own.
  std::vector<command> behind(1);
  behind[0].claim = make_claim("j", 100000 - 7200000);
  auto res = apply_batch(*db, 2, behind);
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL((*res)[0].claim.rec.first_seen_ms, 100000);
  CAF_CHECK_EQUAL((*res)[0].claim.rec.expires_at_ms, 160000);
  CAF_CHECK_EQUAL(db->clock_ms(), 100000);
  // A purge from a clock two hours behind purges nothing.
  std::vector<command> purge(1);
  purge[0].type = command::kind::purge;
  purge[0].now_ms = 100000 - 7200000;
  purge[0].limit = 100;
  auto purged = apply_batch(*db, 3, purge);
  CAF_REQUIRE(purged);
  CAF_CHECK_EQUAL((*purged)[0].purged, 0u);
  CAF_CHECK_EQUAL(db->clock_ms(), 100000);
  CAF_CHECK_EQUAL(db->count(), 2u);
  // Time moves on with the latest proposer; the clock survives a reopen.
  std::vector<command> later(1);
  later[0].claim = make_claim("k", 160000);
  auto renewed = apply_batch(*db, 4, later);
  CAF_REQUIRE(renewed);
  CAF_CHECK_EQUAL((*renewed)[0].claim.outcome, decision::renewed);
  db.reset();
  db = open();
  CAF_CHECK_EQUAL(db->clock_ms(), 160000);
  // Wherever the next claim's own clock stands, it cannot renew `j`, which
  // is live until 160000 at the store's clock: here it just expired.
  std::vector<command> again(1);
  again[0].claim = make_claim("j", 5);
  auto r2 = apply_batch(*db, 5, again);
  CAF_REQUIRE(r2);
  CAF_CHECK_EQUAL((*r2)[0].claim.outcome, decision::renewed);
  CAF_CHECK_EQUAL((*r2)[0].claim.rec.first_seen_ms, 160000);
}

CAF_TEST(an entry with an operator release of a settled record round trips) {
  std::vector<command> batch(1);
  batch[0].type = command::kind::update;
  batch[0].update.route = "default";
  batch[0].update.key = "k";
  batch[0].update.op = transition::release_settled;
  auto decoded = decode_batch(encode_batch(batch));
  CAF_REQUIRE(decoded);
  CAF_CHECK_EQUAL((*decoded)[0].update.op, transition::release_settled);
  auto bad = encode_batch(batch);
  // The op byte sits after magic, count, kind and two length-prefixed
  // strings ("default", "k").
  auto op_at = 4 + 4 + 1 + (4 + 7) + (4 + 1);
  bad[op_at] = 4;
  CAF_CHECK(!decode_batch(bad));
}

CAF_TEST(guards travel in OGC5 entries only when a claim carries one) {
  std::vector<command> plain(1);
  plain[0].claim = make_claim("k", 1000);
  auto p = encode_batch(plain);
  CAF_CHECK_EQUAL(p.substr(0, 4), "OGC3");
  std::vector<command> guarded(2);
  guarded[0].claim = make_claim("a", 1000);
  guarded[0].claim.guards.stale = true;
  guarded[1].claim = make_claim("b", 1000);
  guarded[1].claim.guards.max_new_per_minute = 7;
  guarded[1].claim.guards.cap_scope = "BTCUSDT";
  auto g = encode_batch(guarded);
  CAF_CHECK_EQUAL(g.substr(0, 4), "OGC5");
  auto back = decode_batch(g);
  CAF_REQUIRE(back);
  CAF_REQUIRE_EQUAL(back->size(), 2u);
  CAF_CHECK((*back)[0].claim.guards.stale);
  CAF_CHECK_EQUAL((*back)[0].claim.guards.max_new_per_minute, 0u);
  CAF_CHECK(!(*back)[1].claim.guards.stale);
  CAF_CHECK_EQUAL((*back)[1].claim.guards.max_new_per_minute, 7u);
  CAF_CHECK_EQUAL((*back)[1].claim.guards.cap_scope, "BTCUSDT");
  CAF_CHECK_EQUAL(encode_batch(*back), g);
  // Every proper prefix is refused.
  for (size_t len = 0; len < g.size(); len += 8)
    CAF_CHECK(!decode_batch(g.substr(0, len)));
}

CAF_TEST(a pause travels in OGC5 and every replica holds it alike) {
  std::vector<command> batch(2);
  batch[0].type = command::kind::pause;
  batch[0].route = "tv";
  batch[0].pause = pause_op::pause;
  batch[0].now_ms = 5000;
  batch[1].claim = make_claim("k", 6000, "{}", 60'000, "tv");
  auto entry = encode_batch(batch);
  CAF_CHECK_EQUAL(entry.substr(0, 4), "OGC5");
  auto back = decode_batch(entry);
  CAF_REQUIRE(back);
  CAF_CHECK((*back)[0].type == command::kind::pause);
  CAF_CHECK_EQUAL((*back)[0].route, "tv");
  CAF_CHECK((*back)[0].pause == pause_op::pause);
  CAF_CHECK_EQUAL(encode_batch(*back), entry);
  auto db = open();
  auto res = apply_batch(*db, 1, *back);
  CAF_REQUIRE(res);
  CAF_REQUIRE_EQUAL((*res)[0].pauses.size(), 1u);
  CAF_CHECK_EQUAL((*res)[0].pauses[0].since_ms, 5000);
  CAF_CHECK_EQUAL((*res)[1].claim.outcome, decision::paused);
  // A pause that does nothing is no entry's command.
  auto bad = entry;
  // magic, count, kind, "tv" as a length and 2 bytes: then the op.
  bad[4 + 4 + 1 + 4 + 2] = static_cast<char>(pause_op::read);
  CAF_CHECK(!decode_batch(bad));
}

CAF_TEST(a stale claim creates no record but a duplicate stays a duplicate) {
  auto db = open();
  std::vector<command> batch(1);
  // Executed in time...
  batch[0].claim = make_claim("k", 1000, "{\"a\":1}");
  auto r1 = apply_batch(*db, 1, batch);
  CAF_REQUIRE(r1);
  CAF_CHECK_EQUAL((*r1)[0].claim.outcome, decision::accepted);
  // ...its stale resend is a duplicate, another payload a mismatch...
  batch[0].claim.now_ms = 30'000;
  batch[0].claim.guards.stale = true;
  auto r2 = apply_batch(*db, 2, batch);
  CAF_REQUIRE(r2);
  CAF_CHECK_EQUAL((*r2)[0].claim.outcome, decision::duplicate);
  batch[0].claim.fingerprint = std::string(32, 'x');
  auto r3 = apply_batch(*db, 3, batch);
  CAF_REQUIRE(r3);
  CAF_CHECK_EQUAL((*r3)[0].claim.outcome, decision::mismatch);
  // ...a stale new key is refused and leaves nothing behind...
  batch[0].claim = make_claim("fresh", 31'000);
  batch[0].claim.guards.stale = true;
  auto r4 = apply_batch(*db, 4, batch);
  CAF_REQUIRE(r4);
  CAF_CHECK_EQUAL((*r4)[0].claim.outcome, decision::stale);
  auto none = db->load("default", "fresh");
  CAF_REQUIRE(none);
  CAF_CHECK(!none->found);
  // ...and an expired record is not renewed by a stale claim (it stays
  // until it is purged).
  batch[0].claim = make_claim("k", 100'000, "{\"a\":1}");
  batch[0].claim.guards.stale = true;
  auto r5 = apply_batch(*db, 5, batch);
  CAF_REQUIRE(r5);
  CAF_CHECK_EQUAL((*r5)[0].claim.outcome, decision::stale);
  auto old = db->load("default", "k");
  CAF_REQUIRE(old && old->found);
  CAF_CHECK_EQUAL(old->rec.first_seen_ms, 1000);
}

CAF_TEST(a cap allows its count of new records per minute of the store clock) {
  auto db = open();
  uint64_t index = 0;
  auto claim = [&](const std::string& key, int64_t now,
                   const std::string& scope = {}) {
    std::vector<command> batch(1);
    batch[0].claim = make_claim(key, now);
    batch[0].claim.guards.max_new_per_minute = 3;
    batch[0].claim.guards.cap_scope = scope;
    auto res = apply_batch(*db, ++index, batch);
    CAF_REQUIRE(res);
    return (*res)[0].claim.outcome;
  };
  CAF_CHECK_EQUAL(claim("a", 1000), decision::accepted);
  CAF_CHECK_EQUAL(claim("b", 2000), decision::accepted);
  // A duplicate is not counted.
  CAF_CHECK_EQUAL(claim("b", 2500), decision::duplicate);
  CAF_CHECK_EQUAL(claim("c", 3000), decision::accepted);
  CAF_CHECK_EQUAL(claim("d", 4000), decision::rate_limited);
  CAF_CHECK(!db->load("default", "d")->found);
  // A duplicate of an executed key is still answered at the cap.
  CAF_CHECK_EQUAL(claim("a", 4100), decision::duplicate);
  // Another scope has its own cap.
  CAF_CHECK_EQUAL(claim("e", 4200, "ETHUSDT"), decision::accepted);
  // A minute after the first grant one slot frees, not more.
  CAF_CHECK_EQUAL(claim("d", 61'000), decision::accepted);
  CAF_CHECK_EQUAL(claim("f", 61'500), decision::rate_limited);
  CAF_CHECK_EQUAL(claim("f", 62'000), decision::accepted);
  // A proposer whose clock is behind cannot reopen the window: the store
  // clock never moves back.
  CAF_CHECK_EQUAL(claim("g", 10), decision::rate_limited);
  // Only the granted keys have records.
  auto count = db->count();
  CAF_REQUIRE(count);
  CAF_CHECK_EQUAL(*count, 6u); // a b c d f e
}

CAF_TEST_FIXTURE_SCOPE_END()
