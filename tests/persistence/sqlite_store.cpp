#define CAF_SUITE persistence.sqlite_store
#include "caf/test/unit_test.hpp"

#include <sqlite3.h>

#include "common/errc.hpp"
#include "persistence/sqlite_store.hpp"
#include "tests/common/fixture.hpp"

using namespace oncegate;
using namespace oncegate::persistence;
using oncegate::test::make_claim;

namespace {

struct fixture {
  test::temp_dir dir;
  store_options opts;

  fixture() {
    opts.path = dir.file("store.db");
  }

  std::unique_ptr<sqlite_store> open() {
    auto res = sqlite_store::open(opts);
    CAF_REQUIRE(res);
    return std::move(*res);
  }

  // One committed claim.
  claim_result claim(sqlite_store& db, const claim_request& req) {
    CAF_REQUIRE(!db.begin());
    auto res = db.claim(req);
    CAF_REQUIRE(res);
    CAF_REQUIRE(!db.commit());
    return *res;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(sqlite_store_tests, fixture)

CAF_TEST(a first claim is accepted and a repeat is a duplicate) {
  auto db = open();
  auto first = claim(*db, make_claim("k1", 1000, "{\"a\":1}"));
  CAF_CHECK_EQUAL(first.outcome, decision::accepted);
  CAF_CHECK_EQUAL(first.rec.first_seen_ms, 1000);
  CAF_CHECK_EQUAL(first.rec.expires_at_ms, 61000);
  auto second = claim(*db, make_claim("k1", 2000, "{\"a\":1}"));
  CAF_CHECK_EQUAL(second.outcome, decision::duplicate);
  CAF_CHECK_EQUAL(second.rec.first_seen_ms, 1000);
  CAF_CHECK_EQUAL(second.rec.signal, "{\"a\":1}");
}

CAF_TEST(the same key with another payload is a mismatch and changes nothing) {
  auto db = open();
  claim(*db, make_claim("k1", 1000, "{\"a\":1}"));
  auto res = claim(*db, make_claim("k1", 2000, "{\"a\":2}"));
  CAF_CHECK_EQUAL(res.outcome, decision::mismatch);
  auto stored = db->load("default", "k1");
  CAF_REQUIRE(stored && stored->found);
  CAF_CHECK_EQUAL(stored->rec.signal, "{\"a\":1}");
  CAF_CHECK_EQUAL(stored->rec.first_seen_ms, 1000);
}

CAF_TEST(routes are separate key namespaces) {
  auto db = open();
  claim(*db, make_claim("k1", 1000, "{}", 60'000, "alpha"));
  auto res = claim(*db, make_claim("k1", 1000, "{}", 60'000, "beta"));
  CAF_CHECK_EQUAL(res.outcome, decision::accepted);
}

CAF_TEST(an expired record is replaced by the next claim) {
  auto db = open();
  claim(*db, make_claim("k1", 1000, "{\"a\":1}"));
  // Live until expires_at (exclusive): 61000.
  CAF_CHECK_EQUAL(claim(*db, make_claim("k1", 60999, "{\"a\":1}")).outcome,
                  decision::duplicate);
  auto res = claim(*db, make_claim("k1", 61000, "{\"a\":2}"));
  CAF_CHECK_EQUAL(res.outcome, decision::renewed);
  CAF_CHECK_EQUAL(res.rec.first_seen_ms, 61000);
  CAF_CHECK_EQUAL(res.rec.signal, "{\"a\":2}");
}

CAF_TEST(committed claims survive closing and reopening the file) {
  {
    auto db = open();
    for (int i = 0; i < 50; ++i)
      claim(*db, make_claim("k" + std::to_string(i), 1000));
  }
  auto db = open();
  CAF_CHECK_EQUAL(db->count(), 50u);
  for (int i = 0; i < 50; ++i)
    CAF_CHECK_EQUAL(
      claim(*db, make_claim("k" + std::to_string(i), 2000)).outcome,
      decision::duplicate);
}

CAF_TEST(a rolled back claim leaves no trace) {
  auto db = open();
  CAF_REQUIRE(!db->begin());
  CAF_REQUIRE(db->claim(make_claim("k1", 1000)));
  db->rollback();
  CAF_CHECK_EQUAL(db->count(), 0u);
  CAF_CHECK_EQUAL(claim(*db, make_claim("k1", 1000)).outcome,
                  decision::accepted);
}

CAF_TEST(claims inside one transaction see each other) {
  auto db = open();
  CAF_REQUIRE(!db->begin());
  auto a = db->claim(make_claim("k1", 1000));
  auto b = db->claim(make_claim("k1", 1000));
  CAF_REQUIRE(!db->commit());
  CAF_REQUIRE(a && b);
  CAF_CHECK_EQUAL(a->outcome, decision::accepted);
  CAF_CHECK_EQUAL(b->outcome, decision::duplicate);
}

CAF_TEST(purge deletes only expired records oldest first in bounded chunks) {
  auto db = open();
  // k0..k9 expire at 1000 + i, k10..k14 far in the future.
  for (int i = 0; i < 10; ++i)
    claim(*db, make_claim("k" + std::to_string(i), 0, "{}", 1000 + i));
  for (int i = 10; i < 15; ++i)
    claim(*db, make_claim("k" + std::to_string(i), 0, "{}", 1'000'000));
  CAF_CHECK_EQUAL(db->next_expiry(), 1000);
  CAF_REQUIRE(!db->begin());
  CAF_CHECK_EQUAL(db->purge(5000, 4), 4u);
  CAF_REQUIRE(!db->commit());
  CAF_CHECK_EQUAL(db->next_expiry(), 1004);
  CAF_REQUIRE(!db->begin());
  CAF_CHECK_EQUAL(db->purge(5000, 100), 6u);
  CAF_CHECK_EQUAL(db->purge(5000, 100), 0u);
  CAF_REQUIRE(!db->commit());
  CAF_CHECK_EQUAL(db->count(), 5u);
  CAF_CHECK_EQUAL(db->next_expiry(), 1'000'000);
  auto gone = db->load("default", "k0");
  CAF_REQUIRE(gone);
  CAF_CHECK(!gone->found);
}

namespace {

record_update make_update(transition op, int64_t first_seen = 0,
                          uint16_t status = 0, std::string response = {}) {
  record_update upd;
  upd.route = "default";
  upd.key = "k1";
  upd.op = op;
  upd.first_seen_ms = first_seen;
  upd.status = status;
  upd.response = std::move(response);
  return upd;
}

claim_request in_flight_claim(int64_t now) {
  auto req = make_claim("k1", now);
  req.initial_state = record_state::in_flight;
  req.status = 0;
  req.response.clear();
  return req;
}

} // namespace

CAF_TEST(an in flight record completes once with its outcome) {
  auto db = open();
  claim(*db, in_flight_claim(1000));
  CAF_REQUIRE(!db->begin());
  auto done = db->update(make_update(transition::complete, 1000, 201, "ok"));
  auto again = db->update(make_update(transition::complete, 1000, 500, "x"));
  CAF_REQUIRE(!db->commit());
  CAF_REQUIRE(done && again);
  CAF_CHECK(done->applied);
  CAF_CHECK_EQUAL(done->current.rec.state, record_state::completed);
  CAF_CHECK_EQUAL(done->current.rec.status, 201);
  CAF_CHECK_EQUAL(done->current.rec.response, "ok");
  // A completed record keeps its first outcome.
  CAF_CHECK(!again->applied);
  CAF_CHECK_EQUAL(again->current.rec.status, 201);
}

CAF_TEST(in doubt is reachable only from in flight and can be settled) {
  auto db = open();
  claim(*db, in_flight_claim(1000));
  CAF_REQUIRE(!db->begin());
  auto doubt = db->update(make_update(transition::in_doubt, 1000));
  CAF_REQUIRE(doubt);
  CAF_CHECK(doubt->applied);
  CAF_CHECK_EQUAL(doubt->current.rec.state, record_state::in_doubt);
  // An operator verified the upstream executed it: complete.
  auto settled = db->update(make_update(transition::complete, 0, 200, "v"));
  CAF_REQUIRE(settled);
  CAF_CHECK(settled->applied);
  auto twice = db->update(make_update(transition::in_doubt, 1000));
  CAF_REQUIRE(twice);
  CAF_CHECK(!twice->applied);
  CAF_REQUIRE(!db->commit());
}

CAF_TEST(a release deletes the record so the key executes again) {
  auto db = open();
  claim(*db, in_flight_claim(1000));
  CAF_REQUIRE(!db->begin());
  auto rel = db->update(make_update(transition::release, 1000));
  CAF_REQUIRE(!db->commit());
  CAF_REQUIRE(rel);
  CAF_CHECK(rel->applied);
  CAF_CHECK(!rel->current.found);
  CAF_CHECK_EQUAL(claim(*db, make_claim("k1", 2000)).outcome,
                  decision::accepted);
}

CAF_TEST(an update for an older instance of the key changes nothing) {
  auto db = open();
  claim(*db, in_flight_claim(1000));
  CAF_REQUIRE(!db->begin());
  auto stale = db->update(make_update(transition::release, 999));
  auto missing = db->update([] {
    auto upd = make_update(transition::complete, 0, 200);
    upd.key = "nope";
    return upd;
  }());
  CAF_REQUIRE(!db->commit());
  CAF_REQUIRE(stale && missing);
  CAF_CHECK(!stale->applied);
  CAF_CHECK(stale->current.found);
  CAF_CHECK(!missing->applied);
  CAF_CHECK(!missing->current.found);
}

CAF_TEST(next expiry of an empty store is minus one) {
  auto db = open();
  CAF_CHECK_EQUAL(db->next_expiry(), -1);
}

CAF_TEST(a new file gets the current schema version) {
  auto db = open();
  CAF_CHECK_EQUAL(db->version(), sqlite_store::schema_version);
}

CAF_TEST(a version 1 database is migrated and keeps its records) {
  // The schema as version 1 wrote it, with one record.
  {
    sqlite3* raw = nullptr;
    CAF_REQUIRE_EQUAL(sqlite3_open(opts.path.c_str(), &raw), SQLITE_OK);
    auto sql = "PRAGMA journal_mode=WAL;"
               "CREATE TABLE meta(name TEXT PRIMARY KEY,"
               "  value INTEGER NOT NULL) WITHOUT ROWID;"
               "INSERT INTO meta VALUES('schema_version', 1);"
               "CREATE TABLE records(route TEXT NOT NULL, key TEXT NOT NULL,"
               "  state INTEGER NOT NULL, fingerprint BLOB NOT NULL,"
               "  first_seen_ms INTEGER NOT NULL,"
               "  expires_at_ms INTEGER NOT NULL, status INTEGER NOT NULL,"
               "  response BLOB NOT NULL, signal BLOB NOT NULL,"
               "  PRIMARY KEY (route, key));"
               "CREATE INDEX records_by_expiry ON records(expires_at_ms);"
               "INSERT INTO records VALUES('default', 'old', 1, x'00',"
               "  1000, 9000000000000, 200, 'ok', '{}');";
    CAF_REQUIRE_EQUAL(sqlite3_exec(raw, sql, nullptr, nullptr, nullptr),
                      SQLITE_OK);
    sqlite3_close(raw);
  }
  auto db = open();
  CAF_CHECK_EQUAL(db->version(), 2);
  auto rec = db->load("default", "old");
  CAF_REQUIRE(rec && rec->found);
  CAF_CHECK_EQUAL(rec->rec.response, "ok");
  CAF_CHECK_EQUAL(rec->rec.headers, "");
  CAF_CHECK_EQUAL(rec->rec.status, 200);
}

CAF_TEST(in flight records can be listed and turned into in doubt) {
  auto db = open();
  for (auto key : {"a", "b", "c"}) {
    auto req = make_claim(key, 1000);
    req.initial_state = record_state::in_flight;
    claim(*db, req);
  }
  claim(*db, make_claim("done", 1000));
  CAF_REQUIRE(!db->begin());
  CAF_CHECK_EQUAL(db->doubt_in_flight(), 3u);
  CAF_REQUIRE(!db->commit());
  auto page = db->list("default", record_state::in_doubt, "", 2);
  CAF_REQUIRE(page);
  CAF_REQUIRE_EQUAL(page->records.size(), 2u);
  CAF_CHECK_EQUAL(page->records[0].key, "a");
  CAF_CHECK_EQUAL(page->next_after, "b");
  auto rest = db->list("default", record_state::in_doubt, page->next_after, 2);
  CAF_REQUIRE(rest);
  CAF_REQUIRE_EQUAL(rest->records.size(), 1u);
  CAF_CHECK_EQUAL(rest->records[0].key, "c");
  CAF_CHECK_EQUAL(rest->next_after, "");
}

CAF_TEST(a database from a newer schema is refused) {
  { open(); }
  {
    sqlite3* raw = nullptr;
    CAF_REQUIRE_EQUAL(sqlite3_open(opts.path.c_str(), &raw), SQLITE_OK);
    CAF_REQUIRE_EQUAL(sqlite3_exec(raw,
                                   "UPDATE meta SET value = 99 WHERE name = "
                                   "'schema_version'",
                                   nullptr, nullptr, nullptr),
                      SQLITE_OK);
    sqlite3_close(raw);
  }
  auto res = sqlite_store::open(opts);
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(errc_of(res.error()), errc::schema_too_new);
}

CAF_TEST(an unopenable path fails with a storage error naming it) {
  opts.path = dir.file("missing-dir/store.db");
  auto res = sqlite_store::open(opts);
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(errc_of(res.error()), errc::storage_failure);
}

CAF_TEST(a full disk fails the transaction and keeps committed data) {
  auto db = open();
  for (int i = 0; i < 20; ++i)
    claim(*db, make_claim("k" + std::to_string(i), 1000));
  // Cap the file at its current size: the next big insert cannot fit.
  auto pages = 0;
  {
    sqlite3* raw = nullptr;
    sqlite3_open(opts.path.c_str(), &raw);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(raw, "PRAGMA page_count", -1, &st, nullptr);
    if (sqlite3_step(st) == SQLITE_ROW)
      pages = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(raw);
  }
  CAF_REQUIRE(pages > 0);
  CAF_REQUIRE(!db->limit_pages(static_cast<uint64_t>(pages)));
  CAF_REQUIRE(!db->begin());
  caf::error err;
  for (int i = 0; i < 50 && !err; ++i) {
    auto res = db->claim(
      make_claim("big" + std::to_string(i), 1000, std::string(8000, 'x')));
    if (!res)
      err = res.error();
  }
  if (!err)
    err = db->commit();
  else
    db->rollback();
  CAF_REQUIRE(err);
  CAF_MESSAGE("failure: " << caf::actor_system_config::render(err));
  CAF_CHECK_EQUAL(db->count(), 20u);
  CAF_CHECK_EQUAL(claim(*db, make_claim("k3", 2000)).outcome,
                  decision::duplicate);
}

CAF_TEST_FIXTURE_SCOPE_END()
