#define CAF_SUITE api.webhook_handler
#include "caf/test/unit_test.hpp"

#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>

#include <caf/settings.hpp>

#include "common/histogram.hpp"
#include "common/sha256.hpp"
#include "api/auth.hpp"
#include "api/webhook_handler.hpp"
#include "tests/api/fake_node.hpp"

using namespace oncegate;
using namespace oncegate::gateway;

namespace {

// Routes `tv` and `tv-replay` take the token `s3cret` (`?token=`); the
// second replays a duplicate's stored answer.
webhook_options token_options() {
  caf::settings routes;
  for (auto name : {"tv", "tv-replay"}) {
    caf::settings r;
    r["auth"] = std::string{"token"};
    r["secret-env"] = std::string{"TV_TOKEN"};
    if (std::string{name} == "tv-replay")
      r["on-duplicate"] = std::string{"replay"};
    routes[std::string{name}] = std::move(r);
  }
  env_lookup env = [](const std::string& name) -> std::optional<std::string> {
    if (name == "TV_TOKEN")
      return std::string{"s3cret"};
    return std::nullopt;
  };
  webhook_options opts;
  std::string error;
  auto table = make_routes(&routes, route_defaults{}, env, error);
  CAF_REQUIRE_EQUAL(error, "");
  CAF_REQUIRE(table);
  opts.routes = std::move(*table);
  return opts;
}

webhook_options default_options() {
  webhook_options opts;
  std::string error;
  auto routes = make_routes(nullptr, route_defaults{}, process_env, error);
  CAF_REQUIRE(routes);
  opts.routes = std::move(*routes);
  return opts;
}

struct fixture {
  test::fake_node claims;
  webhook_handler handler{default_options(), claims,
                          [] { return int64_t{1'700'000'000'000}; }};
  webhook_handler token_handler{token_options(), claims,
                                [] { return int64_t{1'700'000'000'000}; }};

  /// Sends through `h`; the answer, if it came before this returns.
  std::optional<http_response>
  try_send(webhook_handler& h, std::string target, std::string body) {
    http_request req;
    req.method = "POST";
    req.target = std::move(target);
    req.body = std::move(body);
    req.headers = {{"content-type", "application/json"}};
    std::optional<http_response> res;
    h.handle(std::move(req), [&](http_response r) { res = r; });
    return res;
  }

  http_response send(std::string method, std::string target,
                     std::string body = {},
                     std::vector<std::pair<std::string, std::string>> headers
                     = {{"content-type", "application/json"}}) {
    http_request req;
    req.method = std::move(method);
    req.target = std::move(target);
    req.body = std::move(body);
    req.headers = std::move(headers);
    std::optional<http_response> res;
    handler.handle(std::move(req), [&](http_response r) { res = r; });
    CAF_REQUIRE(res);
    return *res;
  }

  static std::optional<std::string> header(const http_response& res,
                                           const std::string& name) {
    for (auto& [k, v] : res.headers)
      if (k == name)
        return v;
    return std::nullopt;
  }

  static bool contains(const std::string& haystack, const std::string& what) {
    return haystack.find(what) != std::string::npos;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(webhook_handler_tests, fixture)

CAF_TEST(an accepted claim answers 200 with the stored response) {
  auto res = send("POST", "/v1/webhook", R"({"id":"abc","qty":1})");
  CAF_CHECK_EQUAL(res.status, 200);
  CAF_CHECK_EQUAL(res.body, R"({"status":"accepted","idempotency_key":"abc",)"
                            R"("key_source":"body",)"
                            R"("received_at":"2023-11-14T22:13:20.000Z"})");
  CAF_CHECK_EQUAL(header(res, "Idempotency-Key"), std::string{"abc"});
  CAF_CHECK_EQUAL(header(res, "Cache-Control"), std::string{"no-store"});
  CAF_REQUIRE_EQUAL(claims.seen.size(), 1u);
  auto& req = claims.seen.front();
  CAF_CHECK_EQUAL(req.route, "default");
  CAF_CHECK_EQUAL(req.key, "abc");
  CAF_CHECK_EQUAL(req.now_ms, 1'700'000'000'000);
  CAF_CHECK_EQUAL(req.ttl_ms, 24LL * 3600 * 1000);
  CAF_CHECK_EQUAL(req.signal, R"({"id":"abc","qty":1})");
  CAF_CHECK_EQUAL(req.fingerprint, sha256(R"({"id":"abc","qty":1})"));
  // The stored response is what a replay would send.
  CAF_CHECK_EQUAL(req.response, res.body);
}

CAF_TEST(the header key wins over body fields) {
  auto res = send("POST", "/v1/webhook", R"({"id":"abc"})",
                  {{"content-type", "application/json"},
                   {"idempotency-key", "\"hdr-1\""}});
  CAF_CHECK_EQUAL(res.status, 200);
  CAF_REQUIRE_EQUAL(claims.seen.size(), 1u);
  CAF_CHECK_EQUAL(claims.seen.front().key, "hdr-1");
  CAF_CHECK(contains(res.body, R"("key_source":"header")"));
}

CAF_TEST(a duplicate answers 409 with first_seen and original_status) {
  reply<claim_result> dup;
  dup.ok = true;
  dup.value.outcome = decision::duplicate;
  dup.value.rec.state = record_state::completed;
  dup.value.rec.first_seen_ms = 1'600'000'000'000;
  dup.value.rec.status = 200;
  claims.next = dup;
  auto res = send("POST", "/v1/webhook", R"({"id":"abc"})");
  CAF_CHECK_EQUAL(res.status, 409);
  CAF_CHECK_EQUAL(header(res, "Content-Type"),
                  std::string{"application/problem+json"});
  CAF_CHECK_EQUAL(header(res, "Idempotent-Replayed"), std::string{"true"});
  CAF_CHECK(contains(res.body, R"("type":"https://oncegate.dev/problems/duplicate")"));
  CAF_CHECK(contains(res.body, R"("first_seen":"2020-09-13T12:26:40.000Z")"));
  CAF_CHECK(contains(res.body, R"("original_status":200)"));
  CAF_CHECK(contains(res.body, R"("idempotency_key":"abc")"));
}

CAF_TEST(a mismatch answers 422 key reused) {
  reply<claim_result> mis;
  mis.ok = true;
  mis.value.outcome = decision::mismatch;
  claims.next = mis;
  auto res = send("POST", "/v1/webhook", R"({"id":"abc"})");
  CAF_CHECK_EQUAL(res.status, 422);
  CAF_CHECK(contains(res.body, "problems/key-reused"));
}

CAF_TEST(a failed decision answers 503 and never 200) {
  reply<claim_result> failed;
  failed.ok = false;
  failed.error = errc::commit_failed;
  claims.next = failed;
  auto res = send("POST", "/v1/webhook", R"({"id":"abc"})");
  CAF_CHECK_EQUAL(res.status, 503);
  CAF_CHECK_EQUAL(header(res, "Retry-After"), std::string{"1"});
  CAF_CHECK(contains(res.body, "problems/unavailable"));
}

CAF_TEST(rejected requests never reach the store) {
  CAF_CHECK_EQUAL(send("POST", "/v1/webhook", "{\"id\":").status, 400);
  CAF_CHECK_EQUAL(send("POST", "/v1/webhook", "[1,2]").status, 400);
  CAF_CHECK_EQUAL(send("POST", "/v1/webhook", R"({"symbol":"X"})").status,
                  422);
  CAF_CHECK_EQUAL(send("POST", "/v1/webhook", R"({"id":"a"})",
                       {{"content-type", "application/xml"}})
                    .status,
                  415);
  CAF_CHECK_EQUAL(send("POST", "/v1/webhook", R"({"id":"a"})",
                       {{"idempotency-key", ""}})
                    .status,
                  400);
  CAF_CHECK(claims.seen.empty());
}

CAF_TEST(text plain bodies are parsed as json) {
  auto res = send("POST", "/v1/webhook", R"({"id":"tv"})",
                  {{"content-type", "text/plain; charset=utf-8"}});
  CAF_CHECK_EQUAL(res.status, 200);
}

CAF_TEST(wrong methods and unknown paths) {
  auto res = send("GET", "/v1/webhook");
  CAF_CHECK_EQUAL(res.status, 405);
  CAF_CHECK_EQUAL(header(res, "Allow"), std::string{"POST"});
  CAF_CHECK_EQUAL(send("POST", "/v2/x", "{}").status, 404);
  CAF_CHECK_EQUAL(send("POST", "/v1/webhook/nope", "{}").status, 404);
  CAF_CHECK_EQUAL(send("GET", "/healthz").status, 200);
  CAF_CHECK_EQUAL(send("GET", "/healthz?probe=1").status, 200);
  CAF_CHECK_EQUAL(send("DELETE", "/healthz").status, 405);
}

CAF_TEST(a non ascii body key is not echoed as a header) {
  auto res = send("POST", "/v1/webhook", "{\"id\":\"caf\xc3\xa9\"}");
  CAF_CHECK_EQUAL(res.status, 200);
  CAF_CHECK(!header(res, "Idempotency-Key"));
  CAF_CHECK(contains(res.body, "caf\xc3\xa9"));
}

CAF_TEST(outcomes are counted per route) {
  send("POST", "/v1/webhook", R"({"id":"abc"})");
  send("POST", "/v1/webhook", "{");
  auto& m = handler.metrics();
  CAF_CHECK_EQUAL(m.value(0, outcome::granted), 1u);
  CAF_CHECK_EQUAL(m.value(0, outcome::bad_request), 1u);
  auto text = m.render(node_metrics{});
  CAF_CHECK(contains(text, R"(oncegate_decisions_total{route="default",outcome="new"} 1)"));
  CAF_CHECK(contains(text, "oncegate_request_duration_seconds_count 2"));
}

CAF_TEST(a decision that raced a release is not answered from the cache) {
  // The claim is decided, then an operator releases the key before its
  // answer comes back: the decision is not cached, so the next request
  // asks the store, which no longer has it.
  claims.hold = true;
  std::optional<http_response> first;
  http_request req;
  req.method = "POST";
  req.target = "/v1/webhook";
  req.body = R"({"id":"race"})";
  req.headers = {{"content-type", "application/json"}};
  handler.handle(std::move(req), [&](http_response r) { first = r; });
  CAF_REQUIRE(!first);
  handler.forget_cached("default", "race");
  claims.answer_held();
  CAF_REQUIRE(first);
  CAF_CHECK_EQUAL(first->status, 200);
  claims.hold = false;
  auto again = send("POST", "/v1/webhook", R"({"id":"race"})");
  CAF_CHECK_EQUAL(claims.seen.size(), 2u);
  CAF_CHECK_EQUAL(again.status, 200);
  // Without a release in between, the decision is cached: a duplicate is
  // answered without asking the store.
  send("POST", "/v1/webhook", R"({"id":"race"})");
  CAF_CHECK_EQUAL(claims.seen.size(), 2u);
}

CAF_TEST(a wrong or missing token is 401 whatever the key has decided) {
  for (std::string route : {"tv", "tv-replay"}) {
    CAF_MESSAGE("route " << route);
    auto path = "/v1/webhook/" + route;
    auto body = R"({"id":"known-)" + route + R"(","qty":1})";
    auto ok = try_send(token_handler, path + "?token=s3cret", body);
    CAF_REQUIRE(ok);
    CAF_CHECK_EQUAL(ok->status, 200);
    auto seen = claims.seen.size();
    // The key is decided and cached; a wrong token still learns nothing.
    for (auto target : {path + "?token=wrong", path, path + "?token="}) {
      auto res = try_send(token_handler, target, body);
      CAF_REQUIRE(res);
      CAF_CHECK_EQUAL(res->status, 401);
      CAF_CHECK(contains(res->body, "problems/unauthorized"));
      CAF_CHECK(!contains(res->body, "first_seen"));
      CAF_CHECK(!contains(res->body, "original_status"));
      CAF_CHECK(!contains(res->body, "accepted"));
      CAF_CHECK(!header(*res, "Idempotent-Replayed"));
    }
    CAF_CHECK_EQUAL(claims.seen.size(), seen);
    // The right token gets the duplicate's answer from the cache.
    auto dup = try_send(token_handler, path + "?token=s3cret", body);
    CAF_REQUIRE(dup);
    CAF_CHECK_EQUAL(dup->status, route == "tv" ? 409 : 200);
    CAF_CHECK_EQUAL(header(*dup, "Idempotent-Replayed"),
                    std::string{"true"});
  }
}

CAF_TEST(floats in metrics are printed in the shortest form that reads back) {
  // As the Prometheus client libraries print them (Go's 'g' with the
  // shortest digits): `le="5e-05"`, not `le="5.0000000000000002e-05"`;
  // `0.0001`, not `1e-04`; `+Inf`, `-Inf`, `NaN` in their spelling.
  auto& m = handler.metrics();
  node_metrics node;
  node.store.commit_seconds.observe(0.1);
  node.store.commit_seconds.observe(0.2);
  node.store.batch_size.observe(3);
  auto text = m.render(node);
  for (auto bound : {"5e-05", "0.0001", "0.00015", "0.00025", "0.0005",
                     "0.00075", "0.001", "0.00125", "0.0025", "0.1", "0.25",
                     "1", "2.5", "10"}) {
    CAF_MESSAGE("bound " << bound);
    CAF_CHECK(contains(text, std::string{"oncegate_request_duration_seconds_"
                                         "bucket{le=\""}
                               + bound + "\"}"));
  }
  // Shortest, yet exact: 0.1 + 0.2 is not 0.3.
  CAF_CHECK(contains(text, "oncegate_store_commit_duration_seconds_sum "
                           "0.30000000000000004\n"));
  CAF_CHECK(contains(text, "oncegate_store_batch_size_sum 3\n"));
  CAF_CHECK(contains(text, "oncegate_store_batch_size_bucket{le=\"1024\"} 1\n"));
  // Every bound reads back as the bound it stands for.
  auto bounds = histogram::request_bounds();
  size_t at = 0;
  size_t seen = 0;
  std::string_view le = "oncegate_request_duration_seconds_bucket{le=\"";
  while ((at = text.find(le, at)) != std::string::npos && seen < bounds.size()) {
    at += le.size();
    auto end = text.find('"', at);
    auto printed = text.substr(at, end - at);
    CAF_MESSAGE("le=" << printed);
    CAF_CHECK_LESS_OR_EQUAL(printed.size(), 7u);
    CAF_CHECK_EQUAL(std::strtod(printed.c_str(), nullptr), bounds[seen]);
    ++seen;
  }
  CAF_CHECK_EQUAL(seen, bounds.size());
  node.store.commit_seconds.sum = std::numeric_limits<double>::infinity();
  node.store.batch_size.sum = std::numeric_limits<double>::quiet_NaN();
  text = m.render(node);
  CAF_CHECK(contains(text, "oncegate_store_commit_duration_seconds_sum +Inf\n"));
  CAF_CHECK(contains(text, "oncegate_store_batch_size_sum NaN\n"));
  node.store.commit_seconds.sum = -std::numeric_limits<double>::infinity();
  CAF_CHECK(contains(m.render(node),
                     "oncegate_store_commit_duration_seconds_sum -Inf\n"));
  // Exponent form from 1e+06 up, as Go's strconv.FormatFloat(x, 'g', -1).
  auto sum_text = [&](double sum) {
    node.store.commit_seconds.sum = sum;
    auto text = m.render(node);
    std::string_view name = "oncegate_store_commit_duration_seconds_sum ";
    auto at = text.find(name) + name.size();
    return text.substr(at, text.find('\n', at) - at);
  };
  CAF_CHECK_EQUAL(sum_text(100000), "100000");
  CAF_CHECK_EQUAL(sum_text(999999.5), "999999.5");
  CAF_CHECK_EQUAL(sum_text(1e6), "1e+06");
  CAF_CHECK_EQUAL(sum_text(1234567), "1.234567e+06");
  CAF_CHECK_EQUAL(sum_text(1e21), "1e+21");
  CAF_CHECK_EQUAL(sum_text(0.00012), "0.00012");
  CAF_CHECK_EQUAL(sum_text(1.5e-300), "1.5e-300");
  CAF_CHECK_EQUAL(sum_text(0), "0");
  CAF_CHECK_EQUAL(sum_text(-0.25), "-0.25");
  CAF_CHECK_EQUAL(sum_text(std::numeric_limits<double>::max()),
                  "1.7976931348623157e+308");
}

CAF_TEST_FIXTURE_SCOPE_END()

// -- a cluster node's clock against the cluster's -----------------------------

namespace {

constexpr int64_t hour_ms = 3'600'000;
constexpr const char* sw_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

// A node with a Standard Webhooks route whose wall clock (what judges signed
// timestamps) is `ahead` ms off the cluster's; the monitor sees the
// leader's stamps as `stamp` does. Every clock is moved by hand.
struct clock_fixture {
  int64_t cluster = 1'700'000'000'000;
  int64_t ahead = 0;
  int64_t steady = 10'000'000;
  std::shared_ptr<clock_offset_monitor> offsets
    = std::make_shared<clock_offset_monitor>(
      clock_offset_options{}, [this] { return cluster + ahead; },
      [this] { return steady; });
  test::fake_node claims;
  std::size_t sw_index = 0;
  webhook_handler handler{options(), claims, [this] { return cluster; },
                          [this] { return cluster + ahead; }};

  webhook_options options() {
    webhook_options opts;
    caf::settings routes;
    caf::settings sw;
    sw["auth"] = std::string{"standard-webhooks"};
    sw["secret"] = std::string{sw_secret};
    routes["sw"] = std::move(sw);
    std::string error;
    auto table = make_routes(&routes, route_defaults{}, process_env, error);
    CAF_REQUIRE(table);
    opts.routes = std::move(*table);
    sw_index = opts.routes.index_of(*opts.routes.by_name("sw"));
    opts.clock_offset = offsets;
    return opts;
  }

  // The leader stamps two entries 2 s apart, applied here at once.
  void measure() {
    for (int i = 0; i < 2; ++i) {
      offsets->observe(cluster);
      cluster += 2'000;
      steady += 2'000;
    }
  }

  // A delivery signed under the route's key (or `key`) at the sender's
  // clock, which is the real one: the cluster's.
  http_response deliver(const std::string& id,
                        std::optional<std::string> key = std::nullopt,
                        int64_t sender_skew_ms = 0) {
    std::string body = R"({"id":")" + id + R"("})";
    auto ts = std::to_string((cluster + sender_skew_ms) / 1000);
    if (!key)
      key = *decode_whsec(sw_secret);
    auto sig = "v1," + base64_encode(hmac_sha256(*key, id + "." + ts + "."
                                                         + body));
    http_request req;
    req.method = "POST";
    req.target = "/v1/webhook/sw";
    req.body = body;
    req.headers = {{"content-type", "application/json"},
                   {"webhook-id", id},
                   {"webhook-timestamp", ts},
                   {"webhook-signature", sig}};
    return send(std::move(req));
  }

  http_response get(const std::string& target) {
    http_request req;
    req.method = "GET";
    req.target = target;
    return send(std::move(req));
  }

  http_response send(http_request req) {
    std::optional<http_response> res;
    handler.handle(std::move(req), [&](http_response r) { res = r; });
    CAF_REQUIRE(res);
    return *res;
  }
};

bool has(const std::string& haystack, const std::string& what) {
  return haystack.find(what) != std::string::npos;
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(clock_offset_tests, clock_fixture)

CAF_TEST(a valid delivery refused only as stale is 503 while the clock is off) {
  ahead = 2 * hour_ms;
  measure();
  auto res = deliver("msg-1");
  CAF_CHECK_EQUAL(res.status, 503);
  CAF_CHECK(has(res.body, "https://oncegate.dev/problems/clock-offset"));
  CAF_CHECK(fixture::header(res, "Retry-After").has_value());
  CAF_CHECK(claims.seen.empty());
  CAF_CHECK_EQUAL(handler.metrics().value(sw_index, outcome::unavailable),
                  1u);
}

CAF_TEST(a wrong signature stays 401 while the clock is off) {
  ahead = 2 * hour_ms;
  measure();
  auto res = deliver("msg-2", std::string(24, 'k'));
  CAF_CHECK_EQUAL(res.status, 401);
  CAF_CHECK(has(res.body, "stale timestamp"));
  CAF_CHECK(claims.seen.empty());
}

CAF_TEST(a stale timestamp is 401 while the clock is within the limit) {
  // The node's clock is right (measured); the sender's is two hours off.
  measure();
  auto res = deliver("msg-3", std::nullopt, -2 * hour_ms);
  CAF_CHECK_EQUAL(res.status, 401);
  CAF_CHECK(has(res.body, "stale timestamp"));
}

CAF_TEST(unmeasured a stale timestamp is 401 as on a single node) {
  // The leader (its clock is the cluster's) and a node that has not
  // measured yet judge by their own clock, as a single node does.
  ahead = 2 * hour_ms;
  auto res = deliver("msg-4");
  CAF_CHECK_EQUAL(res.status, 401);
}

CAF_TEST(readyz and metrics report the offset and recover by themselves) {
  ahead = 2 * hour_ms;
  measure();
  auto res = get("/readyz");
  CAF_CHECK_EQUAL(res.status, 503);
  CAF_CHECK(has(res.body, R"("reason":"clock-offset")"));
  CAF_CHECK(has(res.body, R"("offset_ms":7200000)"));
  CAF_CHECK(fixture::header(res, "Retry-After").has_value());
  auto text = get("/metrics").body;
  CAF_CHECK(has(text, "\noncegate_clock_offset_exceeded 1\n"));
  CAF_CHECK(has(text, "\noncegate_clock_offset_seconds 7200\n"));
  // The operator steps the clock back, too far: no new entry needed.
  ahead = -12'500;
  res = get("/readyz");
  CAF_CHECK_EQUAL(res.status, 503);
  CAF_CHECK(has(get("/metrics").body,
                "\noncegate_clock_offset_seconds -12.5\n"));
  ahead = 0;
  CAF_CHECK_EQUAL(get("/readyz").status, 200);
  CAF_CHECK_EQUAL(deliver("msg-5").status, 200);
  text = get("/metrics").body;
  CAF_CHECK(has(text, "\noncegate_clock_offset_exceeded 0\n"));
  CAF_CHECK(has(text, "\noncegate_clock_offset_seconds 0\n"));
}

CAF_TEST_FIXTURE_SCOPE_END()
