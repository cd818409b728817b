#define CAF_SUITE common.decide
#include "caf/test/unit_test.hpp"

#include <optional>
#include <string>
#include <vector>

#include "common/record.hpp"

// `decide`, the one decision rule (common/record.hpp), as a table: every
// record state, live or expired, the same payload or another, the same
// request attempt or another, with and without a guard's refusal.

using namespace oncegate;

namespace {

using rs = record_state;
using d = decision;

constexpr int64_t expires = 10'000;

// When the claim is judged against a holder that expires at `expires`
// (only a completed record ever expires).
enum class when { before, at, after };

int64_t now_of(when w) {
  switch (w) {
    case when::before:
      return expires - 1;
    case when::at:
      return expires; // expired: live means now < expires_at
    default:
      return expires + 60'000;
  }
}

// Who asks: another attempt (another request id), the attempt that holds
// the key (same id, same node), the same id from another node, the same id
// where the holder's owner is not known (a cache that does not keep it),
// or a claim without a request id against a holder without one.
enum class asker { other, same_attempt, same_id_other_node, owner_unknown,
                   no_ids };

struct row {
  std::optional<rs> state; // nullopt: no record holds the key
  when at;
  bool same_payload;
  asker who;
  std::optional<d> refusal;
  std::optional<d> expected; // nullopt: the rule cannot tell (ask the store)
};

std::optional<d> run(const row& r) {
  holder h;
  uint64_t req_id = 7;
  uint64_t owner = 1;
  if (r.state) {
    h.state = *r.state;
    h.expires_at_ms = expires;
    h.fingerprint = "fp-held";
    h.request_id = 7;
    h.owner = 1;
    switch (r.who) {
      case asker::other:
        req_id = 8;
        break;
      case asker::same_attempt:
        break;
      case asker::same_id_other_node:
        owner = 2;
        break;
      case asker::owner_unknown:
        h.owner_known = false;
        break;
      case asker::no_ids:
        h.request_id = 0;
        req_id = 0;
        break;
    }
  }
  std::string fp = r.same_payload ? "fp-held" : "fp-other";
  return decide(r.state ? &h : nullptr, fp, req_id, owner, now_of(r.at),
                r.refusal);
}

std::string show(const std::optional<d>& x) {
  return x ? to_string(*x) : std::string{"(ask the store)"};
}

} // namespace

CAF_TEST(the decision rule as a table) {
  const auto no = std::optional<rs>{};
  const auto stale = std::optional<d>{d::stale};
  const auto none = std::optional<d>{};
  const std::optional<d> tell{};
  std::vector<row> rows{
    // No record: the key is free; a guard may refuse the new record.
    {no, when::before, true, asker::other, none, d::accepted},
    {no, when::before, true, asker::other, stale, d::stale},
    {no, when::before, true, asker::other, d::rate_limited, d::rate_limited},
    {no, when::before, true, asker::other, d::paused, d::paused},
    // A live completed record: duplicate, or mismatch for another payload
    // (a reused key is never executed again, whoever asks).
    {rs::completed, when::before, true, asker::other, none, d::duplicate},
    {rs::completed, when::before, false, asker::other, none, d::mismatch},
    {rs::completed, when::before, false, asker::same_attempt, none,
     d::mismatch},
    {rs::completed, when::before, true, asker::no_ids, none, d::duplicate},
    // The attempt that holds the key asks again (its answer was lost): it
    // is its own; the same id from another node is not; with the owner
    // unknown (a cache) the rule cannot tell.
    {rs::completed, when::before, true, asker::same_attempt, none,
     d::accepted},
    {rs::completed, when::before, true, asker::same_id_other_node, none,
     d::duplicate},
    {rs::completed, when::before, true, asker::owner_unknown, none, tell},
    // A guard never changes the answer about a live record: a stale
    // duplicate of a signal executed in time stays a duplicate.
    {rs::completed, when::before, true, asker::other, stale, d::duplicate},
    {rs::completed, when::before, false, asker::other, stale, d::mismatch},
    {rs::completed, when::before, true, asker::other, d::paused,
     d::duplicate},
    // An expired completed record (at its expiry or after it) is replaced:
    // renewed, whatever its payload was and whoever asks; unless refused.
    {rs::completed, when::at, true, asker::other, none, d::renewed},
    {rs::completed, when::after, true, asker::other, none, d::renewed},
    {rs::completed, when::after, false, asker::other, none, d::renewed},
    {rs::completed, when::after, true, asker::same_attempt, none,
     d::renewed},
    {rs::completed, when::after, true, asker::other, stale, d::stale},
    {rs::completed, when::at, false, asker::other, d::rate_limited,
     d::rate_limited},
  };
  // In flight, in doubt, queued and failed records never expire: they
  // hold their key until a transition, however late the claim.
  for (auto state : {rs::in_flight, rs::in_doubt, rs::queued, rs::failed}) {
    for (auto at : {when::before, when::at, when::after}) {
      std::optional<rs> st{state};
      rows.push_back({st, at, true, asker::other, none, d::duplicate});
      rows.push_back({st, at, false, asker::other, none, d::mismatch});
      rows.push_back({st, at, true, asker::same_attempt, none, d::accepted});
      rows.push_back(
        {st, at, true, asker::same_id_other_node, none, d::duplicate});
      rows.push_back({st, at, true, asker::owner_unknown, none, tell});
      rows.push_back({st, at, false, asker::same_attempt, none, d::mismatch});
      rows.push_back({st, at, true, asker::no_ids, none, d::duplicate});
      rows.push_back({st, at, true, asker::other, stale, d::duplicate});
      rows.push_back({st, at, false, asker::other, d::paused, d::mismatch});
    }
  }
  auto n = 0;
  for (auto& r : rows) {
    auto got = run(r);
    if (got != r.expected)
      CAF_FAIL("row " << n << ": state "
                      << (r.state ? to_string(*r.state) : "none") << ", at "
                      << static_cast<int>(r.at) << ", same payload "
                      << r.same_payload << ", asker "
                      << static_cast<int>(r.who) << ", refusal "
                      << show(r.refusal) << ": got " << show(got)
                      << ", expected " << show(r.expected));
    ++n;
  }
  CAF_CHECK_EQUAL(n, 20 + 4 * 3 * 9);
}

CAF_TEST(only a duplicate or a mismatch may come from a cache) {
  // A cache answers only what the store would answer the same: the free
  // key, the attempt's own, a renewal and a refusal are the store's.
  CAF_CHECK(cache_may_answer(d::duplicate));
  CAF_CHECK(cache_may_answer(d::mismatch));
  for (auto x : {d::accepted, d::renewed, d::stale, d::rate_limited,
                 d::paused})
    CAF_CHECK(!cache_may_answer(x));
  CAF_CHECK(!cache_may_answer(std::nullopt));
}
