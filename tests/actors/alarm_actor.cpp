#define CAF_SUITE actors.alarm_actor
#include "tests/actors/node_fixture.hpp"

using namespace oncegate;

namespace {

struct alarm_fixture : test::node_fixture {
  alarm_stats alarm() {
    auto res = ask<alarm_stats>(sys, n.alarm, stats_atom::value);
    sched.run();
    CAF_REQUIRE(*res && **res);
    return ***res;
  }

  // Claims `count` keys at wall time `now` with `ttl_ms`, in one batch.
  void fill(int count, int64_t now, int64_t ttl_ms, const std::string& prefix) {
    std::vector<reply_slot<claim_result>> replies;
    for (int i = 0; i < count; ++i)
      replies.push_back(
        send_claim(make_claim(prefix + std::to_string(i), now, "{}", ttl_ms)));
    sched.run();
    for (auto& r : replies)
      CAF_REQUIRE(*r && **r && grants((**r)->outcome));
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(alarm_tests, alarm_fixture)

CAF_TEST(the alarm purges expired records in bounded chunks) {
  n.shutdown();
  sched.run();
  opts.alarm.chunk = 100;
  start();
  fill(250, *wall, 10'000, "a");
  fill(20, *wall, 3'600'000, "b");
  CAF_CHECK_EQUAL(records(), 270u);
  // The alarm armed itself for the earliest expiry (10 s from now).
  CAF_CHECK_EQUAL(alarm().next_due_ms, -1); // nothing was stored at start
  *wall += 10'000;
  sched.advance_time(opts.alarm.max_interval);
  sched.run();
  // One chunk per wake-up, a short pause between full chunks.
  CAF_CHECK_EQUAL(alarm().purged, 100u);
  for (int i = 0; i < 10 && alarm().purged < 250u; ++i) {
    sched.advance_time(opts.alarm.chunk_pause);
    sched.run();
  }
  auto st = alarm();
  CAF_CHECK_EQUAL(st.purged, 250u);
  // Three chunks of at most 100, each its own transaction.
  CAF_CHECK(st.runs >= 4u);
  CAF_CHECK_EQUAL(st.next_due_ms, 3'600'000);
  CAF_CHECK_EQUAL(records(), 20u);
}

CAF_TEST(the alarm sleeps until the next due record) {
  fill(5, *wall, 60'000, "a");
  // Wake the alarm once so it learns the next due time.
  sched.advance_time(opts.alarm.max_interval);
  sched.run();
  auto st = alarm();
  CAF_CHECK_EQUAL(st.next_due_ms, *wall + 60'000);
  // Advancing to just before the due time purges nothing...
  auto before = st.runs;
  *wall += 60'000;
  auto fired = sched.advance_time(std::chrono::milliseconds(60'001));
  CAF_CHECK(fired >= 1u);
  sched.run();
  st = alarm();
  CAF_CHECK(st.runs > before);
  CAF_CHECK_EQUAL(st.purged, 5u);
}

CAF_TEST(past due records are purged right after a restart) {
  fill(30, *wall, 1'000, "a");
  n.shutdown();
  sched.run();
  *wall += 5'000; // the node was down while the records expired
  start();        // the alarm's first run purges at once
  sched.run();
  CAF_CHECK_EQUAL(alarm().purged, 30u);
  CAF_CHECK_EQUAL(records(), 0u);
}

CAF_TEST(a stale alarm is harmless) {
  fill(3, *wall, 1'000, "a");
  // The records are due, so a purge now would remove them: only a tick of
  // the current generation may run one.
  *wall += 1'000;
  auto before = alarm();
  auto timers = sched.clock().schedule().size();
  // A tick with an old generation changes nothing: no purge run, no purge,
  // and no second chain of timers armed beside the current one.
  anon_send(n.alarm, tick_atom::value, uint64_t{0});
  sched.run();
  auto after = alarm();
  CAF_CHECK_EQUAL(after.runs, before.runs);
  CAF_CHECK_EQUAL(after.purged, 0u);
  CAF_CHECK_EQUAL(records(), 3u);
  CAF_CHECK_EQUAL(sched.clock().schedule().size(), timers);
  // The current alarm still fires when due and purges them.
  sched.advance_time(opts.alarm.max_interval);
  sched.run();
  CAF_CHECK_EQUAL(alarm().purged, 3u);
  CAF_CHECK_EQUAL(records(), 0u);
}

CAF_TEST(an alarm made stale by a renewal does not purge the renewed key) {
  fill(1, *wall, 1'000, "a");
  // Wake the alarm once so it arms itself for the record's expiry.
  sched.advance_time(opts.alarm.max_interval);
  sched.run();
  CAF_REQUIRE_EQUAL(alarm().next_due_ms, *wall + 1'000);
  // The record expires and its key is claimed again before the alarm
  // fires: a new record, due a minute later.
  *wall += 1'000;
  CAF_REQUIRE_EQUAL(outcome(make_claim("a0", *wall, "{}", 60'000)),
                    decision::renewed);
  // The alarm armed for the old record fires: it must not take the new one.
  auto before = alarm();
  CAF_CHECK(sched.advance_time(std::chrono::milliseconds(1'001)) >= 1u);
  sched.run();
  auto after = alarm();
  CAF_CHECK(after.runs > before.runs);
  CAF_CHECK_EQUAL(after.purged, before.purged);
  CAF_CHECK_EQUAL(records(), 1u);
  CAF_CHECK_EQUAL(outcome(make_claim("a0", *wall, "{}", 60'000)),
                  decision::duplicate);
  // It re-armed for the renewed record, and purges it when that is due.
  CAF_CHECK_EQUAL(after.next_due_ms, *wall + 60'000);
  *wall += 60'000;
  CAF_CHECK(sched.advance_time(std::chrono::milliseconds(60'001)) >= 1u);
  sched.run();
  CAF_CHECK_EQUAL(alarm().purged, before.purged + 1);
  CAF_CHECK_EQUAL(records(), 0u);
}

CAF_TEST(expiry does not depend on the alarm) {
  fill(1, *wall, 1'000, "a");
  // No purge ran, yet a claim after the ttl is granted again.
  CAF_CHECK_EQUAL(outcome(make_claim("a0", *wall + 1'000, "{}", 1'000)),
                  decision::renewed);
}

CAF_TEST_FIXTURE_SCOPE_END()
