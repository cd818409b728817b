#define CAF_SUITE actors.registry
#include "tests/actors/node_fixture.hpp"

#include "common/errc.hpp"

using namespace oncegate;

namespace {

struct small_registry : test::node_fixture {
  small_registry() {
    n.shutdown();
    sched.run();
    opts.registry.max_live_keys = 3;
    start();
  }
};

struct registry_fixture : test::node_fixture {
  // Claims through the shard that owns the key, as the gateway does.
  decision ask_shard(const std::string& key) {
    auto req = make_claim(key, 1000);
    auto slot = ask<claim_result>(sys, n.shard_for(req.route, req.key),
                                  claim_atom::value, req);
    sched.run();
    CAF_REQUIRE(*slot && **slot);
    return (**slot)->outcome;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(registry_tests, registry_fixture)

CAF_TEST(routing keys keep route and key apart) {
  CAF_CHECK_NOT_EQUAL(routing_key("a", "b:c"), routing_key("a:b", "c"));
  CAF_CHECK_EQUAL(routing_key("r", "k"), routing_key("r", "k"));
}

CAF_TEST(one actor per key is spawned and reused) {
  for (int round = 0; round < 3; ++round)
    for (int i = 0; i < 10; ++i)
      outcome(make_claim("k" + std::to_string(i), 1000));
  auto st = registry();
  CAF_CHECK_EQUAL(st.spawned, 10u);
  CAF_CHECK_EQUAL(st.live, 10u);
}

CAF_TEST(every idle actor leaves and the map empties) {
  for (int i = 0; i < 25; ++i)
    outcome(make_claim("k" + std::to_string(i), 1000));
  sched.advance_time(opts.registry.key.idle_timeout);
  sched.run();
  auto st = registry();
  CAF_CHECK_EQUAL(st.live, 0u);
  CAF_CHECK_EQUAL(st.passivated, 25u);
}

CAF_TEST(keys are spread over shards and each shard owns its keys) {
  n.shutdown();
  sched.run();
  opts.registry_shards = 4;
  start();
  for (int i = 0; i < 40; ++i)
    CAF_CHECK_EQUAL(grants(ask_shard("k" + std::to_string(i))), true);
  for (int i = 0; i < 40; ++i)
    CAF_CHECK_EQUAL(ask_shard("k" + std::to_string(i)), decision::duplicate);
  uint64_t spawned = 0;
  size_t used = 0;
  for (auto& shard : n.registries) {
    auto res = ask<registry_stats>(sys, shard, stats_atom::value);
    sched.run();
    CAF_REQUIRE(*res && **res);
    spawned += (**res)->spawned;
    used += (**res)->spawned > 0 ? 1 : 0;
  }
  CAF_CHECK_EQUAL(spawned, 40u);
  CAF_CHECK(used > 1);
}

CAF_TEST_FIXTURE_SCOPE_END()

CAF_TEST_FIXTURE_SCOPE(registry_limit_tests, small_registry)

CAF_TEST(claims beyond the live key limit fail with overloaded) {
  for (int i = 0; i < 3; ++i)
    CAF_CHECK_EQUAL(outcome(make_claim("k" + std::to_string(i), 1000)),
                    decision::accepted);
  auto res = claim(make_claim("k3", 1000));
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(errc_of(res.error()), errc::overloaded);
  CAF_CHECK_EQUAL(registry().rejected, 1u);
  // Known keys keep working at the limit.
  CAF_CHECK_EQUAL(outcome(make_claim("k1", 1001)), decision::duplicate);
  // Once idle actors left, new keys are admitted again.
  sched.advance_time(opts.registry.key.idle_timeout);
  sched.run();
  CAF_CHECK_EQUAL(outcome(make_claim("k3", 2000)), decision::accepted);
}

CAF_TEST_FIXTURE_SCOPE_END()
