#define CAF_SUITE api.guardrails
#include "caf/test/unit_test.hpp"

#include <string>

#include "api/guardrails.hpp"
#include "api/payload.hpp"
#include "common/partition.hpp"

using namespace oncegate;
using namespace oncegate::gateway;

namespace {

payload body(const std::string& json) {
  auto parsed = parse_payload(json);
  CAF_REQUIRE(std::holds_alternative<payload>(parsed));
  return std::get<payload>(parsed);
}

constexpr int64_t now = 1'700'000'100'000;

judgement judged(const guardrails& g, const std::string& json,
                 auth_mode auth = auth_mode::none,
                 std::optional<std::string_view> header = std::nullopt) {
  auto res = judge(g, auth, header, body(json), now);
  if (res.unjudged)
    CAF_FAIL("unjudged: " << res.unjudged->type << ": "
                          << res.unjudged->detail);
  return res;
}

// A signal that cannot be judged: the store refuses it as stale, unless it
// is a duplicate; this is the answer then.
rejection refused(const guardrails& g, const std::string& json) {
  auto res = judge(g, auth_mode::none, std::nullopt, body(json), now);
  CAF_REQUIRE(res.unjudged);
  CAF_CHECK(res.guards.stale);
  return *res.unjudged;
}

} // namespace

CAF_TEST(a route without guardrails sets no guard) {
  guardrails g;
  auto j = judged(g, R"({"timestamp":1})");
  CAF_CHECK(!used(j.guards));
  CAF_CHECK_EQUAL(j.age_ms, 0);
}

CAF_TEST(max-age judges the timestamp member in every form) {
  guardrails g;
  g.max_age_ms = 30'000;
  // Epoch seconds, milliseconds, ISO 8601: 20 s old is in time.
  CAF_CHECK(!judged(g, R"({"timestamp":1700000080})").guards.stale);
  CAF_CHECK(!judged(g, R"({"timestamp":"1700000080000"})").guards.stale);
  CAF_CHECK(!judged(g, R"({"timestamp":"2023-11-14T22:14:40Z"})")
               .guards.stale);
  CAF_CHECK_EQUAL(judged(g, R"({"timestamp":1700000080})").age_ms, 20'000);
  // 30 s is the limit; past it, stale.
  CAF_CHECK(!judged(g, R"({"timestamp":1700000070})").guards.stale);
  CAF_CHECK(judged(g, R"({"timestamp":1700000069999})").guards.stale);
  // Ahead of the clock beyond max-ahead (5 s): stale too.
  CAF_CHECK(!judged(g, R"({"timestamp":1700000105})").guards.stale);
  auto ahead = judged(g, R"({"timestamp":1700000105001})");
  CAF_CHECK(ahead.guards.stale);
  CAF_CHECK_EQUAL(ahead.age_ms, -5001);
  // No time, or one that is no time: refused before any claim.
  auto none = refused(g, R"({"symbol":"X"})");
  CAF_CHECK_EQUAL(none.status, 422);
  CAF_CHECK_EQUAL(none.type, "missing-signal-time");
  CAF_CHECK_EQUAL(refused(g, R"({"timestamp":"yesterday"})").type,
                  "missing-signal-time");
  CAF_CHECK_EQUAL(refused(g, R"({"timestamp":-5})").type,
                  "missing-signal-time");
}

CAF_TEST(signal-time names another member and standard webhooks its header) {
  guardrails g;
  g.max_age_ms = 30'000;
  g.time_member = "time";
  CAF_CHECK(judged(g, R"({"time":1600000000,"timestamp":1700000100})")
              .guards.stale);
  CAF_CHECK_EQUAL(refused(g, R"({"timestamp":1700000100})").type,
                  "missing-signal-time");
  guardrails sw;
  sw.max_age_ms = 30'000;
  CAF_CHECK(!judged(sw, "{}", auth_mode::standard_webhooks,
                    std::string_view{"1700000090"})
               .guards.stale);
  CAF_CHECK(judged(sw, R"({"timestamp":1700000100})",
                   auth_mode::standard_webhooks,
                   std::string_view{"1700000000"})
              .guards.stale);
}

CAF_TEST(a cap travels with the claim scoped by its member) {
  guardrails g;
  g.max_new_per_minute = 10;
  auto whole = judged(g, R"({"symbol":"btcusdt"})");
  CAF_CHECK_EQUAL(whole.guards.max_new_per_minute, 10u);
  CAF_CHECK_EQUAL(whole.guards.cap_scope, "");
  g.cap_by = "symbol";
  // One scope however the symbol is spelt.
  CAF_CHECK_EQUAL(judged(g, R"({"symbol":" btcUSDT "})").guards.cap_scope,
                  "BTCUSDT");
  auto missing = refused(g, R"({"ticker":"X"})");
  CAF_CHECK_EQUAL(missing.status, 422);
  CAF_CHECK_EQUAL(missing.type, "missing-fields");
  CAF_CHECK_EQUAL(refused(g, R"({"symbol":12})").type, "missing-fields");
  CAF_CHECK_EQUAL(
    refused(g, R"({"symbol":")" + std::string(65, 'S') + R"("})").type,
    "missing-fields");
}

CAF_TEST(the refusals name the age and the limit) {
  guardrails g;
  g.max_age_ms = 30'000;
  auto stale = stale_signal(g, 612'500, "k1");
  CAF_CHECK_EQUAL(stale.status, 422);
  CAF_CHECK_EQUAL(
    stale.body,
    R"({"type":"https://oncegate.dev/problems/stale-signal","title":)"
    R"("Stale signal","status":422,"detail":"the signal is 612.500 s old, )"
    R"(beyond the route's max-age (30 s); not executed","age_ms":612500,)"
    R"("max_age_ms":30000,"max_ahead_ms":5000,"idempotency_key":"k1"})");
  auto ahead = stale_signal(g, -7'000, "k1");
  CAF_CHECK(ahead.body.find("the signal's time is 7 s ahead of this node's "
                            "clock, beyond the route's max-ahead (5 s)")
            != std::string::npos);
  g.max_new_per_minute = 60;
  g.cap_by = "symbol";
  auto capped = rate_limited(g, "k2");
  CAF_CHECK_EQUAL(capped.status, 429);
  CAF_CHECK(capped.body.find(R"(problems/rate-limited")") != std::string::npos);
  CAF_CHECK(capped.body.find(R"("max_new_per_minute":60)") != std::string::npos);
  CAF_CHECK(capped.body.find("cap of 60 new signals per minute per symbol")
            != std::string::npos);
}

CAF_TEST(cap shares of the partitions sum to the cap) {
  CAF_CHECK_EQUAL(cap_share(10, 1, 0), 10u);
  uint32_t sum = 0;
  for (uint16_t g = 0; g < 8; ++g) {
    auto share = cap_share(10, 8, g);
    CAF_CHECK(share == 1 || share == 2);
    sum += share;
  }
  CAF_CHECK_EQUAL(sum, 10u);
  CAF_CHECK_EQUAL(cap_share(0, 8, 3), 0u);
}
