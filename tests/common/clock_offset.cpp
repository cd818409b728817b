#define CAF_SUITE common.clock_offset
#include "caf/test/unit_test.hpp"

#include <cstdint>
#include <memory>

#include "common/clock_offset.hpp"

using namespace oncegate;

namespace {

constexpr int64_t hour_ms = 3'600'000;

// The cluster's (leader's) clock, this node's wall clock and its monotonic
// clock, all moved by hand: no test reads a real clock or sleeps.
struct fixture {
  int64_t cluster = 1'700'000'000'000;
  int64_t wall_offset = 0;
  int64_t steady = 50'000'000;
  clock_offset_monitor mon;

  explicit fixture(clock_offset_options opts = {})
    : mon(opts, [this] { return cluster + wall_offset; },
          [this] { return steady; }) {
    // nop
  }

  // Real time passes for everyone.
  void pass(int64_t ms) {
    cluster += ms;
    steady += ms;
  }

  // The leader stamps an entry now; it is applied here `delay` ms later.
  void entry(int64_t delay) {
    auto stamp = cluster;
    pass(delay);
    mon.observe(stamp);
  }
};

} // namespace

CAF_TEST(nothing is measured without samples) {
  fixture f;
  auto r = f.mon.read();
  CAF_CHECK(!r.measured);
  CAF_CHECK(!r.exceeded);
}

CAF_TEST(a clock two hours ahead is measured as such and exceeds the limit) {
  fixture f;
  f.wall_offset = 2 * hour_ms;
  for (int i = 0; i < 5; ++i) {
    f.entry(20);
    f.pass(1'000);
  }
  auto r = f.mon.read();
  CAF_CHECK(r.measured);
  CAF_CHECK(r.exceeded);
  // An upper bound: the true offset plus the least delay seen.
  CAF_CHECK_EQUAL(r.offset_ms, 2 * hour_ms + 20);
}

CAF_TEST(a clock behind is measured negative and exceeds the limit) {
  fixture f;
  f.wall_offset = -30'000;
  f.entry(5);
  f.pass(3'000);
  f.entry(40);
  auto r = f.mon.read();
  CAF_CHECK(r.measured);
  CAF_CHECK(r.exceeded);
  CAF_CHECK_EQUAL(r.offset_ms, -30'000 + 5);
}

CAF_TEST(the least delay counts so a slow entry does not read as an offset) {
  fixture f;
  f.entry(5);
  f.pass(1'000);
  f.entry(900); // a slow commit
  f.pass(1'000);
  f.entry(30);
  auto r = f.mon.read();
  CAF_CHECK(r.measured);
  CAF_CHECK(!r.exceeded);
  CAF_CHECK_EQUAL(r.offset_ms, 5);
}

CAF_TEST(entries replayed at once after a restart say nothing) {
  // A restarted follower applies old entries within milliseconds: their
  // stamps are minutes old, which alone would read as a clock far ahead.
  fixture f;
  auto old = f.cluster - 10 * 60'000;
  for (int i = 0; i < 100; ++i)
    f.mon.observe(old + i * 5'000);
  f.pass(10);
  CAF_CHECK(!f.mon.read().measured);
  CAF_CHECK(!f.mon.read().exceeded);
  // The first live entry, a few seconds later, is the one that counts.
  f.pass(5'000);
  f.entry(10);
  auto r = f.mon.read();
  CAF_CHECK(r.measured);
  CAF_CHECK(!r.exceeded);
  CAF_CHECK_EQUAL(r.offset_ms, 10);
}

CAF_TEST(a corrected clock counts at once in either direction) {
  fixture f;
  f.wall_offset = 2 * hour_ms;
  f.entry(10);
  f.pass(2'000);
  f.entry(10);
  CAF_CHECK(f.mon.read().exceeded);
  // The operator steps the clock back: no new entry is needed.
  f.wall_offset = 0;
  auto r = f.mon.read();
  CAF_CHECK(r.measured);
  CAF_CHECK(!r.exceeded);
  CAF_CHECK_EQUAL(r.offset_ms, 10);
  // And a step ahead of a running node shows at once too.
  f.wall_offset = hour_ms;
  CAF_CHECK(f.mon.read().exceeded);
}

CAF_TEST(the limit is inclusive and configurable) {
  clock_offset_options opts;
  opts.max_offset_ms = 1'000;
  fixture f{opts};
  f.wall_offset = 1'000;
  f.entry(0);
  f.pass(2'000);
  f.entry(0);
  CAF_CHECK_EQUAL(f.mon.read().offset_ms, 1'000);
  CAF_CHECK(!f.mon.read().exceeded);
  f.wall_offset = 1'001;
  CAF_CHECK(f.mon.read().exceeded);
}

CAF_TEST(the leader measures nothing) {
  fixture f;
  f.wall_offset = 2 * hour_ms;
  f.entry(10);
  f.pass(2'000);
  f.entry(10);
  CAF_CHECK(f.mon.read().exceeded);
  f.mon.lead();
  CAF_CHECK(!f.mon.read().measured);
  CAF_CHECK(!f.mon.read().exceeded);
}

CAF_TEST(samples older than the window are forgotten) {
  clock_offset_options opts;
  opts.window_ms = 60'000;
  fixture f{opts};
  f.wall_offset = 2 * hour_ms;
  f.entry(10);
  f.pass(2'000);
  f.entry(10);
  CAF_CHECK(f.mon.read().exceeded);
  f.pass(61'000);
  CAF_CHECK(!f.mon.read().measured);
  // One new sample alone spans nothing.
  f.entry(10);
  CAF_CHECK(!f.mon.read().measured);
}

CAF_TEST(garbage stamps are ignored) {
  fixture f;
  f.mon.observe(0);
  f.mon.observe(-5);
  f.mon.observe(INT64_MAX);
  f.mon.observe(INT64_MIN);
  f.pass(5'000);
  f.mon.observe(INT64_MAX);
  CAF_CHECK(!f.mon.read().measured);
}
