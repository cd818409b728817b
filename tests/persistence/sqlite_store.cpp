#define CAF_SUITE persistence.sqlite_store
#include "caf/test/unit_test.hpp"

#include <fstream>
#include <iterator>
#include <limits>

#include <sqlite3.h>

#include "common/errc.hpp"
#include "persistence/sqlite_store.hpp"
#include "tests/common/fixture.hpp"
#include "tests/common/sqlite_query.hpp"

using namespace oncegate;
using namespace oncegate::persistence;
using oncegate::test::make_claim;

namespace {

// Writes a database as schema version 2 left it (rollback journal, so the
// file alone is the whole database), with one in-flight record.
void write_v2_database(const std::string& path) {
  sqlite3* raw = nullptr;
  CAF_REQUIRE_EQUAL(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  auto sql = "CREATE TABLE meta(name TEXT PRIMARY KEY,"
             "  value INTEGER NOT NULL) WITHOUT ROWID;"
             "INSERT INTO meta VALUES('schema_version', 2);"
             "INSERT INTO meta VALUES('applied_index', 7);"
             "CREATE TABLE records(route TEXT NOT NULL, key TEXT NOT NULL,"
             "  state INTEGER NOT NULL, fingerprint BLOB NOT NULL,"
             "  first_seen_ms INTEGER NOT NULL,"
             "  expires_at_ms INTEGER NOT NULL, status INTEGER NOT NULL,"
             "  response BLOB NOT NULL, signal BLOB NOT NULL,"
             "  headers BLOB NOT NULL DEFAULT x'',"
             "  PRIMARY KEY (route, key));"
             "CREATE INDEX records_by_expiry ON records(expires_at_ms);"
             "CREATE INDEX records_unsettled ON records(route, state, key)"
             "  WHERE state != 1;"
             "INSERT INTO records VALUES('default', 'old', 0, x'00',"
             "  1000, 9000000000000, 0, '', '{}', 'X-A: 1');";
  CAF_REQUIRE_EQUAL(sqlite3_exec(raw, sql, nullptr, nullptr, nullptr),
                    SQLITE_OK);
  sqlite3_close(raw);
}

struct fixture {
  test::temp_dir dir;
  /// Before any store opens: its connections get the commit hook.
  test::commit_fault fault;
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
  // Answers carry no body; the store keeps it.
  CAF_CHECK(first.rec.signal.empty());
  CAF_CHECK(second.rec.signal.empty());
  auto stored = db->load("default", "k1");
  CAF_REQUIRE(stored && stored->found);
  CAF_CHECK_EQUAL(stored->rec.signal, "{\"a\":1}");
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
  CAF_CHECK(res.rec.signal.empty());
  auto stored = db->load("default", "k1");
  CAF_REQUIRE(stored && stored->found);
  CAF_CHECK_EQUAL(stored->rec.signal, "{\"a\":2}");
}

// A database this store wrote is never empty: its header is written
// before the file takes its name. An empty one was truncated or copied
// badly (`> oncegate.db`), and taken for a fresh database it made every
// key decided before execute again.
CAF_TEST(an empty database file is refused and a new one is never empty) {
  { std::ofstream touch{opts.path}; }
  auto refused = sqlite_store::open(opts);
  CAF_REQUIRE(!refused);
  CAF_CHECK(describe(refused.error()).find("is empty")
            != std::string::npos);
  std::ifstream still{opts.path, std::ios::binary | std::ios::ate};
  CAF_CHECK_EQUAL(static_cast<long>(still.tellg()), 0L); // left as it was
  std::remove(opts.path.c_str());
  {
    auto db = open();
    claim(*db, make_claim("k", 1000));
  }
  std::ifstream made{opts.path, std::ios::binary | std::ios::ate};
  CAF_CHECK(static_cast<long>(made.tellg()) >= 4096L);
  std::ifstream leftover{opts.path + ".new"};
  CAF_CHECK(!leftover.good());
  auto again = open();
  CAF_CHECK_EQUAL(again->count(), 1u);
}

// A data dir pointed at another application's SQLite file: the store
// never writes to it (no meta table, no records table, no WAL switch).
// What makes a database ours: a schema version in `meta`, or nothing but
// an empty `meta` (a first start stopped before its first migration).
CAF_TEST(a database of another application is refused and left as it was) {
  const char* foreign[] = {
    "CREATE TABLE orders(id INTEGER PRIMARY KEY, symbol TEXT);"
    "INSERT INTO orders VALUES(1, 'BTCUSD');",
    // A `meta` like ours, but no schema version, next to other tables.
    "CREATE TABLE meta(name TEXT PRIMARY KEY, value INTEGER NOT NULL);"
    "CREATE TABLE records(id INTEGER);",
    // A `meta` of another shape.
    "CREATE TABLE meta(k TEXT, v TEXT);",
    // Another program's database in WAL mode, its last commit still in
    // the -wal file (the connection below closes without a checkpoint).
    "PRAGMA journal_mode=WAL; CREATE TABLE orders(id INTEGER);"
    "INSERT INTO orders VALUES(1);",
  };
  for (auto sql : foreign) {
    CAF_MESSAGE("foreign schema: " << sql);
    std::remove(opts.path.c_str());
    CAF_REQUIRE_EQUAL(test::exec_sql(opts.path, sql, false), SQLITE_OK);
    auto read = [](const std::string& path) {
      std::ifstream in{path, std::ios::binary};
      return std::string{std::istreambuf_iterator<char>{in}, {}};
    };
    auto before = read(opts.path);
    auto wal_before = read(opts.path + "-wal");
    auto refused = sqlite_store::open(opts);
    CAF_REQUIRE(!refused);
    CAF_CHECK(describe(refused.error()).find("is not an oncegate database")
              != std::string::npos);
    CAF_CHECK(read(opts.path) == before); // byte for byte
    CAF_CHECK(read(opts.path + "-wal") == wal_before);
    std::remove((opts.path + "-wal").c_str());
    std::remove((opts.path + "-shm").c_str());
  }
  // Ours at version 0: only an empty meta (a first start cut short).
  std::remove(opts.path.c_str());
  CAF_REQUIRE_EQUAL(test::exec_sql(opts.path,
                                   "CREATE TABLE meta(name TEXT PRIMARY KEY,"
                                   "  value INTEGER NOT NULL) WITHOUT ROWID"),
                    SQLITE_OK);
  auto db = open();
  claim(*db, make_claim("k", 1000));
  CAF_CHECK_EQUAL(db->count(), 1u);
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

CAF_TEST(an outcome that is no final http answer is not stored) {
  auto db = open();
  claim(*db, in_flight_claim(1000));
  CAF_REQUIRE(!db->begin());
  auto interim = db->update(make_update(transition::complete, 1000, 103, ""));
  auto bogus = db->update(make_update(transition::complete, 1000, 600, ""));
  auto no_content = db->update(make_update(transition::complete, 1000, 204,
                                           "a body"));
  auto not_modified = db->update(make_update(transition::complete, 1000, 304,
                                             "a body"));
  CAF_REQUIRE(!db->commit());
  for (auto* res : {&interim, &bogus, &no_content, &not_modified}) {
    CAF_REQUIRE(*res);
    CAF_CHECK(!(*res)->applied);
    CAF_CHECK_EQUAL((*res)->current.rec.state, record_state::in_flight);
  }
  CAF_REQUIRE(!db->begin());
  auto ok = db->update(make_update(transition::complete, 1000, 204, ""));
  CAF_REQUIRE(!db->commit());
  CAF_REQUIRE(ok);
  CAF_CHECK(ok->applied);
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

CAF_TEST(an abandoned claim attempt releases only its own record) {
  auto db = open();
  // Node 1's attempt (request 7) was given up on and never committed;
  // node 2's attempt (request 9) claimed the key.
  auto mine = in_flight_claim(1000);
  mine.owner = 1;
  mine.request_id = 7;
  auto theirs = in_flight_claim(1000);
  theirs.owner = 2;
  theirs.request_id = 9;
  CAF_CHECK_EQUAL(claim(*db, theirs).outcome, decision::accepted);
  CAF_REQUIRE(!db->begin());
  auto undo = db->update(release_of(mine));
  CAF_REQUIRE(!db->commit());
  CAF_REQUIRE(undo);
  CAF_CHECK(!undo->applied);
  CAF_REQUIRE(undo->current.found);
  CAF_CHECK_EQUAL(undo->current.rec.request_id, 9u);
  // Its forward still runs: a retry is a duplicate, never a second
  // execution.
  CAF_CHECK_EQUAL(claim(*db, in_flight_claim(1001)).outcome,
                  decision::duplicate);
  // The attempt that made the record releases it.
  CAF_REQUIRE(!db->begin());
  auto own = db->update(release_of(theirs));
  CAF_REQUIRE(!db->commit());
  CAF_REQUIRE(own);
  CAF_CHECK(own->applied);
  CAF_CHECK(!own->current.found);
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
  CAF_CHECK_EQUAL(db->version(), sqlite_store::schema_version);
  auto rec = db->load("default", "old");
  CAF_REQUIRE(rec && rec->found);
  CAF_CHECK_EQUAL(rec->rec.response, "ok");
  CAF_CHECK_EQUAL(rec->rec.headers, "");
  CAF_CHECK_EQUAL(rec->rec.status, 200);
  CAF_CHECK_EQUAL(rec->rec.owner, 0u);
  CAF_CHECK_EQUAL(rec->rec.request_id, 0u);
}

CAF_TEST(a version 2 database is migrated and keeps its records) {
  write_v2_database(opts.path);
  auto db = open();
  CAF_CHECK_EQUAL(db->version(), sqlite_store::schema_version);
  auto rec = db->load("default", "old");
  CAF_REQUIRE(rec && rec->found);
  CAF_CHECK_EQUAL(rec->rec.state, record_state::in_flight);
  CAF_CHECK_EQUAL(rec->rec.headers, "X-A: 1");
  CAF_CHECK_EQUAL(rec->rec.owner, 0u);
  CAF_CHECK_EQUAL(rec->rec.request_id, 0u);
  // The old in-flight record belongs to "any owner".
  CAF_REQUIRE(!db->begin());
  CAF_CHECK_EQUAL(db->doubt(0, 2000), 1u);
  CAF_REQUIRE(!db->commit());
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
    CAF_REQUIRE_EQUAL(test::exec_sql(opts.path,
                                     "UPDATE meta SET value = 99 WHERE name = "
                                     "'schema_version'"),
                      SQLITE_OK);
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
  // Cap the file at its current size: the next big insert cannot fit. A
  // page cap fails the INSERT that needs a new page (SQLITE_FULL), before
  // COMMIT; what a failing COMMIT does is the next test's.
  auto pages = test::query_int(opts.path, "PRAGMA page_count");
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
  CAF_REQUIRE(err);
  CAF_MESSAGE("failure: " << caf::actor_system_config::render(err));
  CAF_CHECK_EQUAL(errc_of(err), errc::storage_failure);
  db->rollback();
  CAF_CHECK_EQUAL(db->count(), 20u);
  CAF_CHECK_EQUAL(claim(*db, make_claim("k3", 2000)).outcome,
                  decision::duplicate);
}

CAF_TEST(a failed commit is reported and keeps nothing of its transaction) {
  auto db = open();
  claim(*db, make_claim("k0", 1000));
  CAF_REQUIRE(!db->begin());
  CAF_REQUIRE(db->claim(make_claim("k1", 1000)));
  CAF_REQUIRE(db->claim(make_claim("k2", 1000)));
  // Exactly COMMIT fails: every statement before it succeeded.
  fault.fail_next();
  auto err = db->commit();
  CAF_CHECK_EQUAL(fault.failures(), 1);
  CAF_REQUIRE(err);
  CAF_MESSAGE("failure: " << caf::actor_system_config::render(err));
  CAF_CHECK_EQUAL(errc_of(err), errc::commit_failed);
  CAF_CHECK_EQUAL(db->count(), 1u);
  CAF_CHECK(db->load("default", "k1") && !db->load("default", "k1")->found);
  // The store is usable again at once; the key was never granted.
  CAF_CHECK_EQUAL(claim(*db, make_claim("k1", 2000)).outcome,
                  decision::accepted);
  CAF_CHECK_EQUAL(db->count(), 2u);
}

namespace {

claim_request attempt(const std::string& key, int64_t now, uint64_t owner,
                      uint64_t request_id, const std::string& body = "{}") {
  auto req = make_claim(key, now, body);
  req.initial_state = record_state::in_flight;
  req.owner = owner;
  req.request_id = request_id;
  return req;
}

std::string read_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
}

} // namespace

CAF_TEST(a claim stores its owner and request id) {
  auto db = open();
  auto res = claim(*db, attempt("k1", 1000, 2, 77));
  CAF_CHECK_EQUAL(res.rec.owner, 2u);
  CAF_CHECK_EQUAL(res.rec.request_id, 77u);
  auto stored = db->load("default", "k1");
  CAF_REQUIRE(stored && stored->found);
  CAF_CHECK_EQUAL(stored->rec.owner, 2u);
  CAF_CHECK_EQUAL(stored->rec.request_id, 77u);
  // Full 64-bit ids survive the signed SQLite integer.
  auto big = claim(*db, attempt("k2", 1000, ~uint64_t{0}, ~uint64_t{0} - 1));
  CAF_CHECK_EQUAL(big.outcome, decision::accepted);
  stored = db->load("default", "k2");
  CAF_REQUIRE(stored && stored->found);
  CAF_CHECK_EQUAL(stored->rec.owner, ~uint64_t{0});
  CAF_CHECK_EQUAL(stored->rec.request_id, ~uint64_t{0} - 1);
}

CAF_TEST(the same request attempt asking again is accepted with its record) {
  auto db = open();
  auto first = claim(*db, attempt("k1", 1000, 2, 77));
  CAF_REQUIRE_EQUAL(first.outcome, decision::accepted);
  // Its answer was lost; it asks again later (through another leader).
  auto again = claim(*db, attempt("k1", 1500, 2, 77));
  CAF_CHECK_EQUAL(again.outcome, decision::accepted);
  CAF_CHECK_EQUAL(again.rec.first_seen_ms, 1000);
  CAF_CHECK_EQUAL(again.rec.request_id, 77u);
  // Nothing was written: the record is still the first one.
  auto stored = db->load("default", "k1");
  CAF_REQUIRE(stored && stored->found);
  CAF_CHECK_EQUAL(stored->rec.first_seen_ms, 1000);
  CAF_CHECK_EQUAL(stored->rec.expires_at_ms, 61000);
  // It still owns the record after it progressed (here: in doubt).
  CAF_REQUIRE(!db->begin());
  CAF_CHECK_EQUAL(db->doubt(2, 2000), 1u);
  CAF_REQUIRE(!db->commit());
  auto doubted = claim(*db, attempt("k1", 2500, 2, 77));
  CAF_CHECK_EQUAL(doubted.outcome, decision::accepted);
  CAF_CHECK_EQUAL(doubted.rec.state, record_state::in_doubt);
}

CAF_TEST(only the same owner request id and payload count as asking again) {
  auto db = open();
  claim(*db, attempt("k1", 1000, 2, 77));
  // Another attempt, another node, no request id: duplicates.
  CAF_CHECK_EQUAL(claim(*db, attempt("k1", 1100, 2, 78)).outcome,
                  decision::duplicate);
  CAF_CHECK_EQUAL(claim(*db, attempt("k1", 1100, 3, 77)).outcome,
                  decision::duplicate);
  CAF_CHECK_EQUAL(claim(*db, attempt("k1", 1100, 2, 0)).outcome,
                  decision::duplicate);
  // Same attempt, other payload: a mismatch, never a grant.
  CAF_CHECK_EQUAL(claim(*db, attempt("k1", 1100, 2, 77, "{\"b\":2}")).outcome,
                  decision::mismatch);
  // Without request ids two claims never match each other.
  claim(*db, attempt("k2", 1000, 2, 0));
  CAF_CHECK_EQUAL(claim(*db, attempt("k2", 1100, 2, 0)).outcome,
                  decision::duplicate);
  // An in-flight record never expires: long after its TTL the attempt
  // still finds its own record, and anyone else a duplicate.
  auto late = claim(*db, attempt("k1", 61000, 2, 77));
  CAF_CHECK_EQUAL(late.outcome, decision::accepted);
  CAF_CHECK_EQUAL(late.rec.first_seen_ms, 1000);
  CAF_CHECK_EQUAL(claim(*db, attempt("k1", 61000, 2, 79)).outcome,
                  decision::duplicate);
}

CAF_TEST(an update naming a request attempt changes only its record) {
  auto db = open();
  claim(*db, attempt("k1", 1000, 2, 77));
  auto release_of = [&](uint64_t request_id) {
    record_update upd;
    upd.route = "default";
    upd.key = "k1";
    upd.op = transition::release;
    upd.request_id = request_id;
    CAF_REQUIRE(!db->begin());
    auto res = db->update(upd);
    CAF_REQUIRE(!db->commit());
    CAF_REQUIRE(res);
    return *res;
  };
  // Another attempt gave up on its claim: it must not release this one.
  auto other = release_of(78);
  CAF_CHECK(!other.applied);
  CAF_CHECK(other.current.found);
  // The attempt that owns the record releases it.
  auto own = release_of(77);
  CAF_CHECK(own.applied);
  CAF_CHECK(!own.current.found);
}

CAF_TEST(doubt turns in flight records of one owner before a time in doubt) {
  auto db = open();
  claim(*db, attempt("a", 1000, 1, 1));
  claim(*db, attempt("b", 2000, 1, 2));
  claim(*db, attempt("c", 1000, 2, 3));
  auto done = make_claim("d", 1000);
  done.owner = 1;
  claim(*db, done);
  CAF_REQUIRE(!db->begin());
  CAF_CHECK_EQUAL(db->doubt(1, 2000), 1u); // a (b is not before 2000)
  CAF_CHECK_EQUAL(db->doubt(1, 2000), 0u);
  CAF_CHECK_EQUAL(db->doubt(1, std::numeric_limits<int64_t>::max()), 1u);
  CAF_REQUIRE(!db->commit());
  auto state_of = [&](const char* key) {
    auto res = db->load("default", key);
    CAF_REQUIRE(res && res->found);
    return res->rec.state;
  };
  CAF_CHECK_EQUAL(state_of("a"), record_state::in_doubt);
  CAF_CHECK_EQUAL(state_of("b"), record_state::in_doubt);
  CAF_CHECK_EQUAL(state_of("c"), record_state::in_flight);
  CAF_CHECK_EQUAL(state_of("d"), record_state::completed);
  // Owner 0 means any owner.
  CAF_REQUIRE(!db->begin());
  CAF_CHECK_EQUAL(db->doubt_in_flight(), 1u);
  CAF_REQUIRE(!db->commit());
  CAF_CHECK_EQUAL(state_of("c"), record_state::in_doubt);
}

CAF_TEST(a reader sees the commits of the writer and cannot write) {
  auto db = open();
  auto reader_res = sqlite_store::open_reader(opts);
  CAF_REQUIRE(reader_res);
  auto& reader = *reader_res;
  CAF_CHECK_EQUAL(reader->version(), sqlite_store::schema_version);
  CAF_CHECK_EQUAL(reader->count(), 0u);
  claim(*db, attempt("k1", 1000, 2, 77));
  auto seen = reader->load("default", "k1");
  CAF_REQUIRE(seen && seen->found);
  CAF_CHECK_EQUAL(seen->rec.request_id, 77u);
  CAF_CHECK_EQUAL(reader->count(), 1u);
  // In flight: never expires, so no expiry is due.
  CAF_CHECK_EQUAL(reader->next_expiry(), -1);
  auto page = reader->list("default", record_state::in_flight, "", 10);
  CAF_REQUIRE(page);
  CAF_CHECK_EQUAL(page->records.size(), 1u);
  // An uncommitted write of the writer stays invisible.
  CAF_REQUIRE(!db->begin());
  CAF_REQUIRE(db->claim(make_claim("k2", 1000)));
  CAF_CHECK_EQUAL(reader->count(), 1u);
  CAF_REQUIRE(!db->commit());
  CAF_CHECK_EQUAL(reader->count(), 2u);
  // query_only: a write through the reader fails and changes nothing.
  caf::error err = reader->begin();
  if (!err) {
    auto res = reader->claim(make_claim("k3", 1000));
    err = res ? reader->commit() : res.error();
    reader->rollback();
  }
  CAF_CHECK(err);
  CAF_CHECK_EQUAL(db->count(), 2u);
  CAF_CHECK(reader->restore_image(db->snapshot_image().value()));
  // The reader going away leaves the writer's file alone.
  reader.reset();
  claim(*db, make_claim("k4", 1000));
  CAF_CHECK_EQUAL(db->count(), 3u);
}

CAF_TEST(a reader needs an existing database of the current schema) {
  auto missing = sqlite_store::open_reader(opts);
  CAF_REQUIRE(!missing);
  CAF_CHECK_EQUAL(errc_of(missing.error()), errc::storage_failure);
  write_v2_database(opts.path);
  auto old = sqlite_store::open_reader(opts);
  CAF_REQUIRE(!old);
  CAF_CHECK_EQUAL(errc_of(old.error()), errc::storage_failure);
  auto db = open(); // migrates
  CAF_CHECK(sqlite_store::open_reader(opts));
}

CAF_TEST(a snapshot image restores the whole state on another store) {
  auto a = open();
  for (int i = 0; i < 200; ++i)
    claim(*a, attempt("k" + std::to_string(i), 1000 + i, 1, i + 1,
                      std::string(100, 'x')));
  CAF_REQUIRE(!a->begin());
  CAF_REQUIRE(!a->set_applied_index(42));
  CAF_REQUIRE(!a->commit());
  auto image = a->snapshot_image();
  CAF_REQUIRE(image);
  test::temp_dir other;
  store_options b_opts;
  b_opts.path = other.file("b.db");
  auto b_res = sqlite_store::open(b_opts);
  CAF_REQUIRE(b_res);
  auto& b = *b_res;
  // B had state of its own, which the image replaces entirely.
  claim(*b, make_claim("only-on-b", 5));
  auto reader = sqlite_store::open_reader(b_opts);
  CAF_REQUIRE(reader);
  CAF_CHECK_EQUAL((*reader)->count(), 1u);
  CAF_REQUIRE(!b->restore_image(*image));
  CAF_CHECK_EQUAL(b->applied_index(), 42u);
  CAF_CHECK_EQUAL(b->count(), 200u);
  CAF_CHECK_EQUAL((*reader)->count(), 200u);
  CAF_CHECK_EQUAL((*reader)->applied_index(), 42u);
  auto gone = b->load("default", "only-on-b");
  CAF_REQUIRE(gone);
  CAF_CHECK(!gone->found);
  auto rec = b->load("default", "k7");
  CAF_REQUIRE(rec && rec->found);
  CAF_CHECK_EQUAL(rec->rec.request_id, 8u);
  CAF_CHECK_EQUAL(rec->rec.signal, std::string(100, 'x'));
  // B goes on as a normal store, also after reopening.
  CAF_CHECK_EQUAL(claim(*b, attempt("k7", 2000, 1, 8,
                                    std::string(100, 'x'))).outcome,
                  decision::accepted);
  CAF_CHECK_EQUAL(claim(*b, make_claim("new", 2000)).outcome,
                  decision::accepted);
  reader->reset();
  b.reset();
  auto b2 = sqlite_store::open(b_opts);
  CAF_REQUIRE(b2);
  CAF_CHECK_EQUAL((*b2)->count(), 201u);
  CAF_CHECK_EQUAL((*b2)->applied_index(), 42u);
  // The image of the restored store restores like the original.
  auto again = (*b2)->snapshot_image();
  CAF_REQUIRE(again);
  CAF_REQUIRE(!a->restore_image(*again));
  CAF_CHECK_EQUAL(a->count(), 201u);
}

CAF_TEST(a pinned read makes the image of that moment despite later commits) {
  auto db = open();
  for (int i = 0; i < 10; ++i)
    claim(*db, make_claim("k" + std::to_string(i), 1000));
  CAF_REQUIRE(!db->begin());
  CAF_REQUIRE(!db->set_applied_index(10));
  CAF_REQUIRE(!db->commit());
  auto snap = sqlite_store::open_reader(opts);
  CAF_REQUIRE(snap);
  CAF_CHECK_EQUAL((*snap)->begin_read(), 10u);
  // The writer goes on while the image is pending.
  for (int i = 10; i < 20; ++i)
    claim(*db, make_claim("k" + std::to_string(i), 1000));
  CAF_REQUIRE(!db->begin());
  CAF_REQUIRE(!db->set_applied_index(11));
  CAF_REQUIRE(!db->commit());
  auto image = (*snap)->snapshot_image();
  (*snap)->rollback();
  CAF_REQUIRE(image);
  CAF_CHECK_EQUAL((*snap)->count(), 20u);
  test::temp_dir other;
  store_options b_opts;
  b_opts.path = other.file("b.db");
  auto b = sqlite_store::open(b_opts);
  CAF_REQUIRE(b);
  CAF_REQUIRE(!(*b)->restore_image(*image));
  CAF_CHECK_EQUAL((*b)->count(), 10u);
  CAF_CHECK_EQUAL((*b)->applied_index(), 10u);
}

CAF_TEST(an image of an older schema is migrated after restoring it) {
  test::temp_dir other;
  auto old_path = other.file("v2.db");
  write_v2_database(old_path);
  auto db = open();
  claim(*db, make_claim("mine", 1000));
  CAF_REQUIRE(!db->restore_image(read_file(old_path)));
  CAF_CHECK_EQUAL(db->version(), sqlite_store::schema_version);
  CAF_CHECK_EQUAL(db->applied_index(), 7u);
  CAF_CHECK_EQUAL(db->count(), 1u);
  CAF_CHECK_EQUAL(claim(*db, attempt("x", 1000, 1, 1)).rec.request_id, 1u);
}

CAF_TEST(a bad image is refused and leaves the database as it was) {
  auto db = open();
  claim(*db, make_claim("k1", 1000));
  auto check_refused = [&](std::string_view image, errc code) {
    auto err = db->restore_image(image);
    CAF_REQUIRE(err);
    CAF_CHECK_EQUAL(errc_of(err), code);
    CAF_CHECK_EQUAL(db->count(), 1u);
  };
  check_refused("", errc::invalid_argument);
  check_refused(std::string(4096, 'x'), errc::invalid_argument);
  auto image = db->snapshot_image();
  CAF_REQUIRE(image);
  // An SQLite file that is no oncegate database.
  {
    test::temp_dir other;
    auto path = other.file("foreign.db");
    sqlite3* raw = nullptr;
    CAF_REQUIRE_EQUAL(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    CAF_REQUIRE_EQUAL(sqlite3_exec(raw, "CREATE TABLE t(x)", nullptr, nullptr,
                                   nullptr),
                      SQLITE_OK);
    sqlite3_close(raw);
    check_refused(read_file(path), errc::invalid_argument);
  }
  // A newer schema than this build knows.
  {
    test::temp_dir other;
    store_options newer;
    newer.path = other.file("newer.db");
    {
      auto tmp = sqlite_store::open(newer);
      CAF_REQUIRE(tmp);
    }
    sqlite3* raw = nullptr;
    CAF_REQUIRE_EQUAL(sqlite3_open(newer.path.c_str(), &raw), SQLITE_OK);
    CAF_REQUIRE_EQUAL(sqlite3_exec(raw,
                                   "PRAGMA journal_mode=DELETE;"
                                   "UPDATE meta SET value = 99 WHERE name = "
                                   "'schema_version'",
                                   nullptr, nullptr, nullptr),
                      SQLITE_OK);
    sqlite3_close(raw);
    check_refused(read_file(newer.path), errc::schema_too_new);
  }
  // A truncated image.
  auto err = db->restore_image(std::string_view{*image}.substr(0, 4096));
  CAF_CHECK(err);
  CAF_CHECK_EQUAL(db->count(), 1u);
  auto rec = db->load("default", "k1");
  CAF_REQUIRE(rec);
  CAF_CHECK(rec->found);
}



namespace {

// Turns the record of `key` into in_doubt (claimed in flight at `now`).
void make_in_doubt(sqlite_store& db, const std::string& key, int64_t now) {
  CAF_REQUIRE(!db.begin());
  CAF_REQUIRE(db.claim(attempt(key, now, 0, 0)));
  record_update upd;
  upd.route = "default";
  upd.key = key;
  upd.op = transition::in_doubt;
  auto res = db.update(upd, now);
  CAF_REQUIRE(res && res->applied);
  CAF_REQUIRE(!db.commit());
}

} // namespace

CAF_TEST(in doubt and in flight records never expire nor are purged) {
  auto db = open();
  make_in_doubt(*db, "doubt", 1000);
  claim(*db, attempt("flight", 1000, 0, 0));
  claim(*db, make_claim("done", 1000));
  // Far past every TTL: only the completed record expires and is purged.
  auto far = int64_t{1000} + 365LL * 24 * 3600 * 1000;
  CAF_CHECK_EQUAL(claim(*db, make_claim("doubt", far)).outcome,
                  decision::duplicate);
  CAF_CHECK_EQUAL(claim(*db, make_claim("flight", far)).outcome,
                  decision::duplicate);
  CAF_CHECK_EQUAL(db->next_expiry(), 61000);
  CAF_REQUIRE(!db->begin());
  CAF_CHECK_EQUAL(db->purge(far, 100), 1u);
  CAF_REQUIRE(!db->commit());
  CAF_CHECK_EQUAL(db->next_expiry(), -1);
  CAF_CHECK_EQUAL(db->count(), 2u);
  // A mismatch is refused too: the key is taken until it is settled.
  CAF_CHECK_EQUAL(claim(*db, make_claim("doubt", far, "{\"x\":1}")).outcome,
                  decision::mismatch);
}

CAF_TEST(a late completion protects the key for a whole ttl from then) {
  auto db = open();
  make_in_doubt(*db, "k", 1000);
  // Settled by an operator long after the TTL (60 s) had passed.
  record_update upd;
  upd.route = "default";
  upd.key = "k";
  upd.op = transition::complete;
  upd.status = 200;
  CAF_REQUIRE(!db->begin());
  auto res = db->update(upd, 500000);
  CAF_REQUIRE(!db->commit());
  CAF_REQUIRE(res && res->applied);
  CAF_CHECK_EQUAL(res->current.rec.expires_at_ms, 560000);
  CAF_CHECK_EQUAL(claim(*db, make_claim("k", 559999)).outcome,
                  decision::duplicate);
  CAF_CHECK_EQUAL(claim(*db, make_claim("k", 560000)).outcome,
                  decision::renewed);
}

CAF_TEST(an operator release leaves an in flight record alone) {
  auto db = open();
  claim(*db, attempt("flight", 1000, 0, 0));
  make_in_doubt(*db, "doubt", 1000);
  record_update upd;
  upd.route = "default";
  upd.op = transition::release_settled;
  upd.key = "flight";
  CAF_REQUIRE(!db->begin());
  auto kept = db->update(upd, 2000);
  upd.key = "doubt";
  auto gone = db->update(upd, 2000);
  CAF_REQUIRE(!db->commit());
  CAF_REQUIRE(kept && gone);
  CAF_CHECK(!kept->applied);
  CAF_CHECK(kept->current.found);
  CAF_CHECK_EQUAL(kept->current.rec.state, record_state::in_flight);
  CAF_CHECK(gone->applied);
  CAF_CHECK(!gone->current.found);
  // A forced release (plain `release`) takes it.
  upd.key = "flight";
  upd.op = transition::release;
  CAF_REQUIRE(!db->begin());
  auto forced = db->update(upd, 2000);
  CAF_REQUIRE(!db->commit());
  CAF_REQUIRE(forced);
  CAF_CHECK(forced->applied);
}

CAF_TEST(unsettled records are counted per route and state) {
  auto db = open();
  claim(*db, attempt("a", 1000, 0, 0));
  claim(*db, attempt("b", 1000, 0, 0));
  make_in_doubt(*db, "c", 1000);
  claim(*db, make_claim("d", 1000));
  auto xs = db->unsettled();
  CAF_REQUIRE(xs);
  uint64_t flight = 0;
  uint64_t doubt = 0;
  for (auto& x : *xs) {
    CAF_CHECK_EQUAL(x.route, "default");
    if (x.state == record_state::in_flight)
      flight += x.count;
    else if (x.state == record_state::in_doubt)
      doubt += x.count;
    else
      CAF_FAIL("a completed record counted as unsettled");
  }
  CAF_CHECK_EQUAL(flight, 2u);
  CAF_CHECK_EQUAL(doubt, 1u);
}

CAF_TEST(the store clock is kept in the file) {
  auto db = open();
  CAF_CHECK_EQUAL(db->clock_ms(), 0);
  CAF_REQUIRE(!db->begin());
  CAF_REQUIRE(!db->set_clock_ms(5000));
  CAF_REQUIRE(!db->commit());
  db.reset();
  db = open();
  CAF_CHECK_EQUAL(db->clock_ms(), 5000);
}

CAF_TEST_FIXTURE_SCOPE_END()
