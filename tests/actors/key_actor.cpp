#define CAF_SUITE actors.key_actor
#include "tests/actors/node_fixture.hpp"

#include "common/errc.hpp"

using namespace oncegate;

CAF_TEST_FIXTURE_SCOPE(key_actor_tests, test::node_fixture)

// The message flow, step by step on the test scheduler: a new key goes
// registry -> its key actor -> the store; a duplicate of it stops at the
// key actor, which answers from the record it cached.
CAF_TEST(a duplicate of a cached key never reaches the store) {
  // The actor the scheduler runs next (the one a message was just sent to).
  auto next_receiver = [this] {
    CAF_REQUIRE(sched.has_job());
    return caf::actor_cast<caf::actor>(&sched.next_job<caf::abstract_actor>());
  };
  auto& registry = n.registries.front();
  auto first = send_claim(make_claim("k1", 1000, "{\"a\":1}"));
  sched.run_once(); // the asking client sends its request
  expect((claim_atom, claim_request), to(registry));
  auto key = next_receiver();
  expect((claim_atom, claim_request), from(_).to(key));
  expect((claim_atom, claim_request), from(key).to(n.store));
  sched.run();
  CAF_REQUIRE(*first && **first);
  CAF_CHECK_EQUAL((**first)->outcome, decision::accepted);
  auto dup = send_claim(make_claim("k1", 1001, "{\"a\":1}"));
  sched.run_once();
  expect((claim_atom, claim_request), to(registry));
  CAF_CHECK_EQUAL(next_receiver(), key);
  expect((claim_atom, claim_request), from(_).to(key));
  disallow((claim_atom, claim_request), to(n.store));
  // What is left is the answer to the client: the store has no job at all.
  CAF_CHECK(!sched.prioritize(n.store));
  sched.run();
  CAF_REQUIRE(*dup && **dup);
  CAF_CHECK_EQUAL((**dup)->outcome, decision::duplicate);
}

CAF_TEST(the same key with another payload is a mismatch) {
  CAF_CHECK_EQUAL(outcome(make_claim("k1", 1000, "{\"a\":1}")),
                  decision::accepted);
  auto res = claim(make_claim("k1", 1001, "{\"a\":2}"));
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->outcome, decision::mismatch);
  // The answer describes the original record.
  CAF_CHECK(res->rec.fingerprint == sha256("{\"a\":1}"));
  // Key actors keep no request bodies; the store has the original.
  CAF_CHECK(res->rec.signal.empty());
}

CAF_TEST(one hundred concurrent claims of one key grant exactly one) {
  std::vector<reply_slot<claim_result>> replies;
  for (int i = 0; i < 100; ++i)
    replies.push_back(send_claim(make_claim("hot", 1000 + i)));
  sched.run();
  auto decided = outcomes_of(replies);
  CAF_CHECK_EQUAL(decided.granted, 1);
  CAF_CHECK_EQUAL(decided.duplicates, 99);
  CAF_CHECK_EQUAL(registry().spawned, 1u);
}

CAF_TEST(concurrent claims of many keys each grant exactly once) {
  std::vector<reply_slot<claim_result>> replies;
  for (int round = 0; round < 3; ++round)
    for (int i = 0; i < 50; ++i)
      replies.push_back(send_claim(make_claim("k" + std::to_string(i), 1000)));
  sched.run();
  CAF_CHECK_EQUAL(outcomes_of(replies).granted, 50);
  CAF_CHECK_EQUAL(records(), 50u);
}

CAF_TEST(a record expires at its ttl and the key is granted again) {
  CAF_CHECK_EQUAL(outcome(make_claim("k1", 1000, "{}", 5000)),
                  decision::accepted);
  CAF_CHECK_EQUAL(outcome(make_claim("k1", 5999, "{}", 5000)),
                  decision::duplicate);
  auto res = claim(make_claim("k1", 6000, "{\"new\":1}", 5000));
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->outcome, decision::renewed);
  CAF_CHECK_EQUAL(res->rec.first_seen_ms, 6000);
  CAF_CHECK_EQUAL(outcome(make_claim("k1", 6001, "{\"new\":1}", 5000)),
                  decision::duplicate);
}

CAF_TEST(an idle key actor passivates and its successor reloads the record) {
  CAF_CHECK_EQUAL(outcome(make_claim("k1", 1000, "{\"a\":1}")),
                  decision::accepted);
  CAF_CHECK_EQUAL(registry().live, 1u);
  sched.advance_time(opts.registry.key.idle_timeout);
  sched.run();
  auto st = registry();
  CAF_CHECK_EQUAL(st.live, 0u);
  CAF_CHECK_EQUAL(st.passivated, 1u);
  // Cold start: a new actor asks the store, which still knows the key.
  auto res = claim(make_claim("k1", 2000, "{\"a\":1}"));
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->outcome, decision::duplicate);
  CAF_CHECK_EQUAL(res->rec.first_seen_ms, 1000);
  CAF_CHECK_EQUAL(registry().spawned, 2u);
}

CAF_TEST(activity postpones passivation) {
  outcome(make_claim("k1", 1000));
  sched.advance_time(opts.registry.key.idle_timeout / 2);
  sched.run();
  outcome(make_claim("k1", 1001));
  sched.advance_time(opts.registry.key.idle_timeout / 2);
  sched.run();
  CAF_CHECK_EQUAL(registry().live, 1u);
  sched.advance_time(opts.registry.key.idle_timeout);
  sched.run();
  CAF_CHECK_EQUAL(registry().live, 0u);
}

CAF_TEST(claims racing a passivation are decided once) {
  // A cold key: its first claims queue in the actor while it awaits the
  // store; the sweep passivates the actor right behind them, and further
  // claims spawn a successor while the first actor is still busy. The store
  // is held back (not scheduled) until both actors wait for it, so the
  // sweep provably runs between the claims.
  auto store_job = dynamic_cast<caf::resumable*>(
    caf::actor_cast<caf::abstract_actor*>(n.store));
  CAF_REQUIRE(store_job != nullptr);
  auto run_all_but_store = [&] {
    sched.run_jobs_filtered([=](caf::resumable* x) { return x != store_job; });
  };
  std::vector<reply_slot<claim_result>> replies;
  for (int i = 0; i < 5; ++i)
    replies.push_back(send_claim(make_claim("k1", 1000 + i)));
  run_all_but_store(); // all five routed; the actor awaits the store
  auto st = registry_without_store(run_all_but_store);
  CAF_REQUIRE_EQUAL(st.spawned, 1u);
  CAF_REQUIRE_EQUAL(st.passivated, 0u);
  // The sweep is due: it passivates the actor while its claims wait.
  CAF_REQUIRE(sched.advance_time(opts.registry.key.idle_timeout) >= 1u);
  run_all_but_store();
  st = registry_without_store(run_all_but_store);
  CAF_REQUIRE_EQUAL(st.passivated, 1u);
  CAF_REQUIRE_EQUAL(st.live, 0u);
  for (auto& r : replies)
    CAF_REQUIRE(!*r); // not one claim was decided before the sweep
  for (int i = 0; i < 5; ++i)
    replies.push_back(send_claim(make_claim("k1", 2000 + i)));
  run_all_but_store(); // a successor awaits the store too
  st = registry_without_store(run_all_but_store);
  CAF_REQUIRE_EQUAL(st.spawned, 2u);
  CAF_REQUIRE_EQUAL(st.live, 1u);
  for (auto& r : replies)
    CAF_REQUIRE(!*r);
  sched.run();
  // Every claim is answered (none lost with the passivated actor), and the
  // key is granted exactly once across both actors.
  for (auto& r : replies)
    CAF_REQUIRE(*r);
  auto decided = outcomes_of(replies);
  CAF_CHECK_EQUAL(decided.granted, 1);
  CAF_CHECK_EQUAL(decided.duplicates, 9);
  CAF_CHECK_EQUAL(records(), 1u);
}

CAF_TEST(a claim routed before the sweep keeps the actor alive) {
  outcome(make_claim("k1", 1000));
  auto late = send_claim(make_claim("k1", 1002));
  sched.run_once(); // client: claim -> registry mailbox
  sched.advance_time(opts.registry.key.idle_timeout);
  sched.run(); // the registry routes the claim, then sweeps: not idle
  CAF_REQUIRE(*late && **late);
  CAF_CHECK_EQUAL((**late)->outcome, decision::duplicate);
  auto st = registry();
  CAF_CHECK_EQUAL(st.passivated, 0u);
  CAF_CHECK_EQUAL(st.live, 1u);
  sched.advance_time(opts.registry.key.idle_timeout);
  sched.run();
  CAF_CHECK_EQUAL(registry().passivated, 1u);
}

CAF_TEST(an in flight claim is completed through its key actor) {
  auto req = make_claim("k1", 1000, "{}");
  req.initial_state = record_state::in_flight;
  auto first = claim(req);
  CAF_REQUIRE(first);
  CAF_CHECK_EQUAL(first->rec.state, record_state::in_flight);
  // A duplicate while in flight sees the in-flight record.
  auto dup = claim(make_claim("k1", 1001, "{}"));
  CAF_REQUIRE(dup);
  CAF_CHECK_EQUAL(dup->outcome, decision::duplicate);
  CAF_CHECK_EQUAL(dup->rec.state, record_state::in_flight);
  record_update upd;
  upd.route = "default";
  upd.key = "k1";
  upd.op = transition::complete;
  upd.first_seen_ms = 1000;
  upd.status = 201;
  upd.response = "created";
  auto res = ask<update_result>(sys, n.registries.front(), update_atom::value,
                                upd);
  sched.run();
  CAF_REQUIRE(*res && **res);
  CAF_CHECK((**res)->applied);
  // The cache follows: the next duplicate reports the stored outcome.
  dup = claim(make_claim("k1", 1002, "{}"));
  CAF_REQUIRE(dup);
  CAF_CHECK_EQUAL(dup->rec.state, record_state::completed);
  CAF_CHECK_EQUAL(dup->rec.status, 201);
  CAF_CHECK_EQUAL(dup->rec.response, "created");
}

CAF_TEST(a released key executes again) {
  CAF_CHECK_EQUAL(outcome(make_claim("k1", 1000)), decision::accepted);
  record_update upd;
  upd.route = "default";
  upd.key = "k1";
  upd.op = transition::release;
  auto res = ask<update_result>(sys, n.registries.front(), update_atom::value,
                                upd);
  sched.run();
  CAF_REQUIRE(*res && **res);
  CAF_CHECK((**res)->applied);
  CAF_CHECK_EQUAL(outcome(make_claim("k1", 1001)), decision::accepted);
}

CAF_TEST(a lookup finds the record with or without a live actor) {
  outcome(make_claim("k1", 1000, "{\"a\":1}"));
  auto live = ask<lookup_result>(sys, n.registries.front(), get_atom::value,
                                 std::string{"default"}, std::string{"k1"});
  sched.run();
  CAF_REQUIRE(*live && **live);
  CAF_CHECK((**live)->found);
  sched.advance_time(opts.registry.key.idle_timeout);
  sched.run();
  auto cold = ask<lookup_result>(sys, n.registries.front(), get_atom::value,
                                 std::string{"default"}, std::string{"k1"});
  auto missing = ask<lookup_result>(sys, n.registries.front(), get_atom::value,
                                    std::string{"default"},
                                    std::string{"nope"});
  sched.run();
  CAF_REQUIRE(*cold && **cold && *missing && **missing);
  CAF_CHECK((**cold)->found);
  CAF_CHECK_EQUAL((**cold)->rec.signal, "{\"a\":1}");
  CAF_CHECK(!(**missing)->found);
}

CAF_TEST(a new actor system on the same database knows every key) {
  for (int i = 0; i < 200; ++i)
    CAF_CHECK_EQUAL(outcome(make_claim("k" + std::to_string(i), *wall)),
                    decision::accepted);
  // Shut this node down and start a second actor system on the same file.
  n.shutdown();
  sched.run();
  {
    test_coordinator_fixture<test::test_config> other;
    node_options o = opts;
    auto now = *wall + 1;
    auto res = start_node(other.sys, o, [now] { return now; });
    CAF_REQUIRE(res);
    other.sched.run();
    for (int i = 0; i < 200; ++i) {
      auto slot = ask<claim_result>(other.sys, res->registries.front(),
                                    claim_atom::value,
                                    make_claim("k" + std::to_string(i), now));
      other.sched.run();
      CAF_REQUIRE(*slot && **slot);
      CAF_CHECK_EQUAL((**slot)->outcome, decision::duplicate);
    }
    res->shutdown();
    other.sched.run();
  }
  start(); // for the fixture's destructor
}

CAF_TEST(a store failure fails the claim and a retry asks the store again) {
  // The store fails this claim's transaction (exactly its COMMIT): the
  // claim fails, and nothing of it may linger in the key actor.
  fault.fail_next();
  auto failed = claim(make_claim("k1", 1000));
  CAF_CHECK_EQUAL(fault.failures(), 1);
  CAF_REQUIRE(!failed);
  CAF_CHECK_EQUAL(errc_of(failed.error()), errc::commit_failed);
  CAF_CHECK_EQUAL(records(), 0u);
  CAF_CHECK_EQUAL(registry().live, 1u); // the same actor takes the retry
  // The retry is decided by the store, and granted: the failed attempt
  // was never executed.
  auto ops = store().committed_ops;
  auto retry = claim(make_claim("k1", 1001));
  CAF_REQUIRE(retry);
  CAF_CHECK_EQUAL(retry->outcome, decision::accepted);
  CAF_CHECK_EQUAL(store().committed_ops, ops + 1);
  CAF_CHECK_EQUAL(records(), 1u);
  // A store that is gone fails claims too, never grants them from nothing.
  anon_send_exit(n.store, caf::exit_reason::user_shutdown);
  sched.run();
  CAF_CHECK(!claim(make_claim("k2", 1002)));
}

CAF_TEST_FIXTURE_SCOPE_END()
