#pragma once

// A whole node (store, registry, alarm) under CAF's deterministic test
// scheduler, with a wall clock the test moves by hand.

#include "caf/test/dsl.hpp"

#include <vector>

#include "actors/node.hpp"
#include "tests/common/fixture.hpp"

namespace oncegate::test {

struct node_fixture : test_coordinator_fixture<test_config> {
  /// Survives a restart of the node within one test.
  std::shared_ptr<temp_dir> dir = std::make_shared<temp_dir>();
  /// Before the node opens its store: lets a test fail exactly a COMMIT.
  commit_fault fault;
  /// The fake wall clock (ms), read by the alarm actor.
  std::shared_ptr<int64_t> wall = std::make_shared<int64_t>(0);
  node_options opts;
  node n;

  node_fixture() {
    opts.data_dir = dir->path().string();
    opts.detached_store = false;
    opts.registry.key.idle_timeout = std::chrono::seconds(30);
    // Alarms far out, so tests that do not look at them are not disturbed.
    opts.alarm.max_interval = std::chrono::hours(1);
    start();
  }

  ~node_fixture() {
    n.shutdown();
    sched.run();
  }

  void start() {
    auto clock = wall;
    auto res = start_node(sys, opts, [clock] { return *clock; });
    CAF_REQUIRE(res);
    n = std::move(*res);
    sched.run();
  }

  /// Sends a claim through the registry; the reply arrives in the slot
  /// once the scheduler runs.
  reply_slot<claim_result> send_claim(const claim_request& req) {
    return ask<claim_result>(sys, n.registries.front(), claim_atom::value,
                             req);
  }

  /// Claims through the registry and runs the scheduler until answered.
  caf::expected<claim_result> claim(const claim_request& req) {
    auto slot = send_claim(req);
    sched.run();
    CAF_REQUIRE(*slot);
    return std::move(**slot);
  }

  /// How the claims of `replies`, all answered, were decided.
  struct outcomes {
    int granted = 0;
    int duplicates = 0;
  };

  static outcomes
  outcomes_of(const std::vector<reply_slot<claim_result>>& replies) {
    outcomes result;
    for (auto& r : replies) {
      CAF_REQUIRE(*r && **r);
      if (grants((**r)->outcome))
        ++result.granted;
      else if ((**r)->outcome == decision::duplicate)
        ++result.duplicates;
    }
    return result;
  }

  decision outcome(const claim_request& req) {
    auto res = claim(req);
    CAF_REQUIRE(res);
    return res->outcome;
  }

  registry_stats registry() {
    auto res = ask<registry_stats>(sys, n.registries.front(),
                                   stats_atom::value);
    sched.run();
    CAF_REQUIRE(*res && **res);
    return ***res;
  }

  /// The registry's counters, read with `run` driving the scheduler (e.g.
  /// a run that leaves the store unscheduled: the registry answers alone).
  template <class Run>
  registry_stats registry_without_store(Run run) {
    auto res = ask<registry_stats>(sys, n.registries.front(),
                                   stats_atom::value);
    run();
    CAF_REQUIRE(*res && **res);
    return ***res;
  }

  uint64_t records() {
    auto res = ask<uint64_t>(sys, n.store, count_atom::value);
    sched.run();
    CAF_REQUIRE(*res && **res);
    return ***res;
  }

  persistence::store_stats store() {
    auto res = ask<persistence::store_stats>(sys, n.store, stats_atom::value);
    sched.run();
    CAF_REQUIRE(*res && **res);
    return ***res;
  }
};

} // namespace oncegate::test

// What the node tests name unqualified.
using oncegate::test::ask;
using oncegate::test::make_claim;
using oncegate::test::reply_slot;
