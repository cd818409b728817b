#define CAF_SUITE service.caller
#include "tests/actors/node_fixture.hpp"

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/errc.hpp"
#include "service/caller.hpp"
#include "tests/common/own_loop.hpp"

using namespace oncegate;
using gateway::actor_caller;
using gateway::reply;

namespace {

struct caller_fixture : test::node_fixture {
  actor_caller caller{sys};

  /// Every answer a claim got, in arrival order.
  std::vector<reply<claim_result>> answers;

  void claim_via_caller(const claim_request& req) {
    caller.ask<claim_result>(n.shard_for(req.route, req.key),
                             [this](reply<claim_result> rep) {
                               answers.push_back(std::move(rep));
                             },
                             claim_atom::value, req);
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(caller_tests, caller_fixture)

CAF_TEST(a claim is decided by the key actor and answered once) {
  claim_via_caller(make_claim("k", 1000));
  CAF_CHECK_EQUAL(caller.pending(), 1u);
  CAF_CHECK(answers.empty()); // nothing ran yet: no answer before the store
  sched.run();
  CAF_REQUIRE_EQUAL(answers.size(), 1u);
  CAF_REQUIRE(answers[0].ok);
  CAF_CHECK(grants(answers[0].value.outcome));
  claim_via_caller(make_claim("k", 1000));
  sched.run();
  CAF_REQUIRE_EQUAL(answers.size(), 2u);
  CAF_REQUIRE(answers[1].ok);
  CAF_CHECK_EQUAL(answers[1].value.outcome, decision::duplicate);
  CAF_CHECK_EQUAL(caller.pending(), 0u);
  CAF_CHECK_EQUAL(records(), 1u);
}

CAF_TEST(identical claims sent together get one grant and duplicates) {
  for (int i = 0; i < 20; ++i)
    claim_via_caller(make_claim("same", 1000));
  for (int i = 0; i < 5; ++i)
    claim_via_caller(make_claim("other-" + std::to_string(i), 1000));
  sched.run();
  CAF_REQUIRE_EQUAL(answers.size(), 25u);
  int granted = 0;
  int duplicates = 0;
  for (auto& a : answers) {
    CAF_REQUIRE(a.ok);
    if (grants(a.value.outcome))
      ++granted;
    else if (a.value.outcome == decision::duplicate)
      ++duplicates;
  }
  CAF_CHECK_EQUAL(granted, 6);
  CAF_CHECK_EQUAL(duplicates, 19);
  CAF_CHECK_EQUAL(caller.pending(), 0u);
}

CAF_TEST(an error answer is a failed reply with its reason) {
  n.shutdown();
  sched.run();
  opts.registry.max_live_keys = 1; // a second live key is refused
  start();
  claim_via_caller(make_claim("k", 1000));
  claim_via_caller(make_claim("k2", 1000));
  sched.run();
  // The refusal comes first (the registry answers it at once).
  CAF_REQUIRE_EQUAL(answers.size(), 2u);
  CAF_CHECK(!answers[0].ok);
  CAF_CHECK_EQUAL(answers[0].error, errc::overloaded);
  CAF_CHECK(!answers[0].detail.empty());
  CAF_CHECK(answers[1].ok);
  CAF_CHECK_EQUAL(caller.pending(), 0u);
}

CAF_TEST(a receiver that is gone fails the request) {
  auto shard = n.shard_for("default", "k");
  n.shutdown();
  sched.run();
  caller.ask<claim_result>(shard,
                           [this](reply<claim_result> rep) {
                             answers.push_back(std::move(rep));
                           },
                           claim_atom::value, make_claim("k", 1000));
  sched.run();
  CAF_REQUIRE_EQUAL(answers.size(), 1u);
  CAF_CHECK(!answers[0].ok);
  CAF_CHECK_NOT_EQUAL(answers[0].error, errc::none);
  CAF_CHECK_EQUAL(caller.pending(), 0u);
  start(); // for the fixture's own shutdown
}

CAF_TEST(after stop no callback runs and the waiting ones are released) {
  auto held = std::make_shared<int>(0);
  caller.ask<claim_result>(n.shard_for("default", "k"),
                           [this, held](reply<claim_result> rep) {
                             answers.push_back(std::move(rep));
                           },
                           claim_atom::value, make_claim("k", 1000));
  CAF_CHECK_EQUAL(held.use_count(), 2);
  caller.stop();
  CAF_CHECK_EQUAL(held.use_count(), 1); // the callback is gone
  CAF_CHECK_EQUAL(caller.pending(), 0u);
  sched.run();
  CAF_CHECK(answers.empty());
  // The decision itself was made and is durable: only its answer is lost,
  // as when the gateway shuts down with a request in flight.
  CAF_CHECK_EQUAL(records(), 1u);
  // Requests after the stop are not sent: no claim is decided that
  // nobody would hear of.
  claim_via_caller(make_claim("k2", 1000));
  sched.run();
  CAF_CHECK(answers.empty());
  CAF_CHECK_EQUAL(caller.pending(), 0u);
  CAF_CHECK_EQUAL(records(), 1u);
  caller.stop(); // idempotent
}

CAF_TEST(a callback that throws does not end the key actor) {
  caller.ask<claim_result>(n.shard_for("default", "k"),
                           [](reply<claim_result>) {
                             throw std::runtime_error("boom");
                           },
                           claim_atom::value, make_claim("k", 1000));
  sched.run();
  auto before = registry();
  CAF_CHECK_EQUAL(before.live, 1u);
  claim_via_caller(make_claim("k", 1000));
  sched.run();
  CAF_REQUIRE_EQUAL(answers.size(), 1u);
  CAF_REQUIRE(answers[0].ok);
  CAF_CHECK_EQUAL(answers[0].value.outcome, decision::duplicate);
  auto after = registry();
  CAF_CHECK_EQUAL(after.live, 1u);
  CAF_CHECK_EQUAL(after.spawned, 1u); // the same actor answered
}

CAF_TEST(a lookup and a store request answer their own types) {
  claim_via_caller(make_claim("k", 1000));
  sched.run();
  std::vector<reply<lookup_result>> looked;
  caller.ask<lookup_result>(n.shard_for("default", "k"),
                            [&](reply<lookup_result> rep) {
                              looked.push_back(std::move(rep));
                            },
                            get_atom::value, std::string{"default"},
                            std::string{"k"});
  std::vector<reply<uint64_t>> counted;
  caller.ask<uint64_t>(n.store,
                       [&](reply<uint64_t> rep) {
                         counted.push_back(std::move(rep));
                       },
                       count_atom::value);
  sched.run();
  CAF_REQUIRE_EQUAL(looked.size(), 1u);
  CAF_REQUIRE(looked[0].ok);
  CAF_CHECK(looked[0].value.found);
  CAF_CHECK_EQUAL(looked[0].value.rec.key, "k");
  CAF_REQUIRE_EQUAL(counted.size(), 1u);
  CAF_REQUIRE(counted[0].ok);
  CAF_CHECK_EQUAL(counted[0].value, 1u);
}

CAF_TEST(a request sent alone runs its receivers on the sending loop) {
  actor_caller here{sys, true};
  test::own_loop loop{sys};
  auto ask_claim = [&](const std::string& key) {
    here.ask<claim_result>(n.shard_for("default", key),
                           [this](reply<claim_result> rep) {
                             answers.push_back(std::move(rep));
                           },
                           claim_atom::value, make_claim(key, 1000));
  };
  ask_claim("k");
  // Nothing ran inside the call, and nothing went to the scheduler: the
  // registry waits for the loop.
  CAF_CHECK(answers.empty());
  CAF_CHECK_EQUAL(loop.queued.size(), 1u);
  CAF_CHECK(!sched.has_job());
  loop.run();
  // The registry, the key actor, the store (scheduled in these tests) and
  // the key actor again ran from the loop: the answer is in, no worker ran.
  CAF_REQUIRE_EQUAL(answers.size(), 1u);
  CAF_REQUIRE(answers[0].ok);
  CAF_CHECK(grants(answers[0].value.outcome));
  sched.run();
  CAF_CHECK_EQUAL(records(), 1u);
  // With a request in flight already, the next one goes to the scheduler.
  ask_claim("k2");
  std::vector<reply<uint64_t>> counted;
  here.ask<uint64_t>(n.store,
                     [&](reply<uint64_t> rep) {
                       counted.push_back(std::move(rep));
                     },
                     count_atom::value);
  CAF_CHECK_EQUAL(loop.queued.size(), 1u);
  CAF_CHECK(sched.has_job()); // the store, woken by the second request
  loop.run();
  sched.run();
  CAF_REQUIRE_EQUAL(answers.size(), 2u);
  for (auto& a : answers)
    CAF_CHECK(a.ok && grants(a.value.outcome));
  CAF_CHECK_EQUAL(counted.size(), 1u);
  CAF_CHECK_EQUAL(here.pending(), 0u);
  // Without `run_here` (the cluster's callers) nothing waits for the loop.
  claim_via_caller(make_claim("k4", 1000));
  CAF_CHECK(loop.queued.empty());
  sched.run();
  CAF_CHECK_EQUAL(answers.size(), 3u);
}

CAF_TEST(what the loop did not run goes to the scheduler when it stops) {
  actor_caller here{sys, true};
  {
    test::own_loop loop{sys};
    here.ask<claim_result>(n.shard_for("default", "k"),
                           [this](reply<claim_result> rep) {
                             answers.push_back(std::move(rep));
                           },
                           claim_atom::value, make_claim("k", 1000));
    CAF_CHECK_EQUAL(loop.queued.size(), 1u);
  } // the loop ends without running what it was given
  CAF_CHECK(sched.has_job());
  sched.run();
  CAF_REQUIRE_EQUAL(answers.size(), 1u);
  CAF_CHECK(answers[0].ok && grants(answers[0].value.outcome));
}

CAF_TEST_FIXTURE_SCOPE_END()
