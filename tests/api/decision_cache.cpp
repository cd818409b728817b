#define CAF_SUITE api.decision_cache
#include "caf/test/unit_test.hpp"

#include "api/decision_cache.hpp"

using namespace oncegate;
using namespace oncegate::gateway;

namespace {

record completed(int64_t first_seen, const std::string& fp = "fp",
                 const std::string& body = "body") {
  record rec;
  rec.state = record_state::completed;
  rec.fingerprint = fp;
  rec.first_seen_ms = first_seen;
  rec.expires_at_ms = first_seen + 1000;
  rec.status = 200;
  rec.response = body;
  return rec;
}

} // namespace

CAF_TEST(a remembered completed decision answers until it expires) {
  decision_cache cache{1000};
  auto e = cache.epoch("k");
  cache.remember("k", completed(100), e);
  auto hit = cache.lookup("k", "fp", 500, true);
  CAF_REQUIRE(hit);
  CAF_CHECK(hit->outcome == decision::duplicate);
  CAF_CHECK_EQUAL(hit->first_seen_ms, 100);
  CAF_CHECK_EQUAL(hit->response, "body");
  auto other = cache.lookup("k", "other", 500, false);
  CAF_REQUIRE(other);
  CAF_CHECK(other->outcome == decision::mismatch);
  CAF_CHECK(other->response.empty());
  CAF_CHECK(!cache.lookup("k", "fp", 1100, false)); // expired: ask actors
}

CAF_TEST(unsettled records are never remembered) {
  decision_cache cache{1000};
  for (auto st : {record_state::in_flight, record_state::in_doubt}) {
    auto rec = completed(100);
    rec.state = st;
    cache.remember("k", rec, cache.epoch("k"));
    CAF_CHECK(!cache.lookup("k", "fp", 500, false));
  }
}

CAF_TEST(a decision made before a release is not remembered after it) {
  decision_cache cache{1000};
  auto before = cache.epoch("k");
  cache.forget("k"); // an operator released the key meanwhile
  cache.remember("k", completed(100), before);
  CAF_CHECK(!cache.lookup("k", "fp", 500, false));
  cache.remember("k", completed(200), cache.epoch("k"));
  CAF_CHECK(cache.lookup("k", "fp", 500, false));
  cache.forget("k");
  CAF_CHECK(!cache.lookup("k", "fp", 500, false));
}

CAF_TEST(an older decision never replaces a newer one) {
  decision_cache cache{1000};
  auto e = cache.epoch("k");
  cache.remember("k", completed(2000, "new"), e);
  cache.remember("k", completed(100, "old"), e);
  auto hit = cache.lookup("k", "new", 2500, false);
  CAF_REQUIRE(hit);
  CAF_CHECK(hit->outcome == decision::duplicate);
}

CAF_TEST(the cache holds at most its capacity) {
  decision_cache cache{640};
  for (int i = 0; i < 5000; ++i) {
    auto key = "k" + std::to_string(i);
    cache.remember(key, completed(100), cache.epoch(key));
  }
  CAF_CHECK(cache.size() <= 640u);
  CAF_CHECK(cache.size() > 0u);
}

CAF_TEST(a disabled cache never answers) {
  decision_cache cache{0};
  cache.remember("k", completed(100), cache.epoch("k"));
  CAF_CHECK(!cache.lookup("k", "fp", 500, false));
}

CAF_TEST(the cache holds at most its bytes whatever the answers weigh) {
  // 64 shards of 16 KiB: answers of 4 KiB cannot keep bodies (above a
  // sixteenth of a shard), answers of 512 bytes can.
  decision_cache cache{100000, 1024 * 1024};
  for (int i = 0; i < 20000; ++i) {
    auto key = "k" + std::to_string(i);
    cache.remember(key, completed(100, "fp", std::string(512, 'x')),
                   cache.epoch(key));
  }
  CAF_CHECK(cache.bytes() <= 1024u * 1024u);
  CAF_CHECK(cache.size() > 500u);
  auto hit = cache.lookup("k19999", "fp", 500, true);
  CAF_REQUIRE(hit);
  CAF_CHECK_EQUAL(hit->response.size(), 512u);
  // A large answer is kept for 409s, not for replays.
  cache.remember("big", completed(100, "fp", std::string(1 << 20, 'y')),
                 cache.epoch("big"));
  CAF_CHECK(cache.bytes() <= 1024u * 1024u);
  CAF_CHECK(cache.lookup("big", "fp", 500, false));
  CAF_CHECK(!cache.lookup("big", "fp", 500, true));
}

CAF_TEST(an entry kept without its body never answers a replay) {
  decision_cache cache{1000};
  cache.remember("k", completed(100, "fp", "body"), cache.epoch("k"), false);
  auto hit = cache.lookup("k", "fp", 500, false);
  CAF_REQUIRE(hit);
  CAF_CHECK_EQUAL(hit->status, 200);
  CAF_CHECK(!cache.lookup("k", "fp", 500, true));
}

CAF_TEST(a snapshot install forgets every decision and any made before it) {
  decision_cache cache{1000};
  for (auto k : {"a", "b", "c"})
    cache.remember(k, completed(100), cache.epoch(k));
  auto before = cache.epoch("d");
  cache.forget_all();
  CAF_CHECK_EQUAL(cache.size(), 0u);
  CAF_CHECK_EQUAL(cache.bytes(), 0u);
  for (auto k : {"a", "b", "c"})
    CAF_CHECK(!cache.lookup(k, "fp", 500, false));
  cache.remember("d", completed(100), before); // decided before the install
  CAF_CHECK(!cache.lookup("d", "fp", 500, false));
  cache.remember("d", completed(100), cache.epoch("d"));
  CAF_CHECK(cache.lookup("d", "fp", 500, false));
}
