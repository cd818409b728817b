#define CAF_SUITE api.routes
#include "caf/test/unit_test.hpp"

#include <fstream>
#include <map>

#include <caf/config_value.hpp>
#include <caf/settings.hpp>

#include "api/routes.hpp"
#include "tests/common/fixture.hpp"

using namespace oncegate;
using namespace oncegate::gateway;

namespace {

struct fixture {
  std::map<std::string, std::string> env_vars;
  route_defaults defaults;
  caf::settings routes;
  std::string error;

  env_lookup env() {
    return [this](const std::string& name) -> std::optional<std::string> {
      auto i = env_vars.find(name);
      if (i == env_vars.end())
        return std::nullopt;
      return i->second;
    };
  }

  caf::settings& route(const std::string& name) {
    auto& val = routes[name];
    if (!caf::holds_alternative<caf::settings>(val))
      val = caf::settings{};
    return caf::get<caf::settings>(val);
  }

  std::optional<route_table> build() {
    error.clear();
    return make_routes(&routes, defaults, env(), error);
  }

  /// Builds the table, which must succeed without an error.
  route_table built() {
    auto table = build();
    CAF_REQUIRE_EQUAL(error, "");
    CAF_REQUIRE(table);
    return std::move(*table);
  }

  /// Builds the table, which must fail, and clears the routes for the next
  /// attempt; returns the error.
  std::string failure() {
    CAF_CHECK(!build());
    routes.clear();
    return error;
  }
};

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(routes_tests, fixture)

CAF_TEST(without a route section only the default route exists) {
  auto table = make_routes(nullptr, defaults, env(), error);
  CAF_REQUIRE(table);
  CAF_REQUIRE_EQUAL(table->routes.size(), 1u);
  auto& r = table->routes.front();
  CAF_CHECK_EQUAL(r.name, "default");
  CAF_CHECK_EQUAL(r.path, "/v1/webhook");
  CAF_CHECK(r.auth == auth_mode::none);
  CAF_CHECK(r.on_duplicate == duplicate_policy::conflict);
  CAF_CHECK_EQUAL(r.ttl_ms, defaults.ttl_ms);
}

CAF_TEST(a named route gets its own path and options) {
  auto& tv = route("tv");
  tv["auth"] = std::string{"token"};
  tv["secret-env"] = std::string{"TV_TOKEN"};
  tv["ttl"] = caf::timespan{std::chrono::hours(72)};
  tv["on-duplicate"] = std::string{"replay"};
  tv["body-limit"] = int64_t{1024};
  tv["allow"] = caf::config_value::list{caf::config_value{std::string{
                                          "10.0.0.0/8"}},
                                        caf::config_value{std::string{
                                          "127.0.0.1"}}};
  env_vars["TV_TOKEN"] = "s3cret";
  auto table = built();
  auto r = table.by_path("/v1/webhook/tv");
  CAF_REQUIRE(r != nullptr);
  CAF_CHECK(r == table.by_name("tv"));
  CAF_CHECK(r->auth == auth_mode::token);
  CAF_REQUIRE_EQUAL(r->secrets.size(), 1u);
  CAF_CHECK_EQUAL(r->secrets.front(), "s3cret");
  CAF_CHECK_EQUAL(r->ttl_ms, 72LL * 3600 * 1000);
  CAF_CHECK(r->on_duplicate == duplicate_policy::replay);
  CAF_CHECK_EQUAL(r->body_limit, 1024u);
  CAF_CHECK_EQUAL(r->allow.size(), 2u);
  CAF_CHECK(table.by_path("/v1/webhook/other") == nullptr);
  CAF_CHECK_EQUAL(table.index_of(*r), 1u);
}

CAF_TEST(the default route can be configured too) {
  auto& def = route("default");
  def["on-duplicate"] = std::string{"replay"};
  auto table = build();
  CAF_REQUIRE(table);
  CAF_REQUIRE_EQUAL(table->routes.size(), 1u);
  CAF_CHECK(table->routes.front().on_duplicate == duplicate_policy::replay);
  CAF_CHECK_EQUAL(table->routes.front().path, "/v1/webhook");
}

CAF_TEST(secrets come from values lists files and the environment) {
  test::temp_dir dir;
  {
    std::ofstream out{dir.file("gh.secret")};
    out << "from-file\n";
  }
  auto& gh = route("gh");
  gh["auth"] = std::string{"github"};
  gh["secret"] = caf::config_value::list{caf::config_value{std::string{"a"}},
                                         caf::config_value{std::string{"b"}}};
  gh["secret-file"] = dir.file("gh.secret");
  gh["secret-env"] = std::string{"GH"};
  env_vars["GH"] = "from-env";
  auto table = built();
  auto r = table.by_name("gh");
  CAF_REQUIRE(r != nullptr);
  CAF_CHECK_EQUAL(r->secrets.size(), 4u);
  CAF_CHECK(std::find(r->secrets.begin(), r->secrets.end(), "from-file")
            != r->secrets.end());
  CAF_CHECK(std::find(r->secrets.begin(), r->secrets.end(), "from-env")
            != r->secrets.end());
}

CAF_TEST(standard webhooks secrets are decoded to keys) {
  auto& sw = route("sw");
  sw["auth"] = std::string{"standard-webhooks"};
  sw["secret"] = std::string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"};
  auto table = build();
  CAF_REQUIRE(table);
  auto r = table->by_name("sw");
  CAF_REQUIRE(r != nullptr);
  auto key = decode_whsec("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
  CAF_REQUIRE(key);
  CAF_CHECK(r->secrets.front() == *key);
  route("sw")["secret"] = std::string{"whsec_***"};
  CAF_CHECK(!build());
  CAF_CHECK_EQUAL(error, "route.sw.secret: not a whsec_<base64> secret");
}

CAF_TEST(bad entries are errors naming the key) {
  route("tv")["auth"] = std::string{"tokn"};
  CAF_CHECK(starts_with(failure(), "route.tv.auth:"));
  route("tv")["auth"] = std::string{"token"};
  CAF_CHECK(starts_with(failure(), "route.tv.secret:"));
  route("tv")["colour"] = std::string{"blue"};
  CAF_CHECK_EQUAL(failure(), "route.tv.colour: unknown option");
  route("tv")["secret-env"] = std::string{"UNSET_VAR"};
  route("tv")["auth"] = std::string{"token"};
  CAF_CHECK_EQUAL(failure(), "route.tv.secret-env: environment variable "
                             "UNSET_VAR is not set");
  route("tv")["body-limit"] = int64_t{1 << 30};
  CAF_CHECK(starts_with(failure(), "route.tv.body-limit:"));
  route("tv")["allow"] = caf::config_value::list{
    caf::config_value{std::string{"10.0.0.0/33"}}};
  CAF_CHECK(starts_with(failure(), "route.tv.allow:"));
  route("Bad Name")["auth"] = std::string{"none"};
  failure();
  route("tv")["on-duplicate"] = std::string{"ignore"};
  CAF_CHECK(starts_with(failure(), "route.tv.on-duplicate:"));
  route("tv")["secret"] = std::string{"x"};
  CAF_CHECK_EQUAL(failure(), "route.tv.secret: set, but auth is none");
}

CAF_TEST(guardrail options are read and checked together) {
  route("tv")["max-age"] = caf::timespan{std::chrono::seconds(30)};
  route("tv")["max-new-per-minute"] = int64_t{20};
  route("tv")["cap-by"] = std::string{"symbol"};
  route("tv")["signal-time"] = std::string{"time"};
  route("tv")["max-ahead"] = caf::timespan{std::chrono::seconds(2)};
  auto table = built();
  auto& g = table.by_name("tv")->guards;
  CAF_CHECK_EQUAL(g.max_age_ms, 30'000);
  CAF_CHECK_EQUAL(g.max_ahead_ms, 2'000);
  CAF_CHECK_EQUAL(g.time_member, "time");
  CAF_CHECK_EQUAL(g.max_new_per_minute, 20u);
  CAF_CHECK_EQUAL(g.cap_by, "symbol");
  // Without them: no guard (the default route, every other route).
  CAF_CHECK_EQUAL(table.by_name("default")->guards.max_age_ms, 0);
  CAF_CHECK_EQUAL(table.by_name("default")->guards.max_new_per_minute, 0u);
  routes.clear();
  route("tv")["max-age"] = std::string{"soon"};
  CAF_CHECK(starts_with(failure(), "route.tv.max-age: expected a positive"));
  route("tv")["max-new-per-minute"] = int64_t{0};
  CAF_CHECK(starts_with(failure(), "route.tv.max-new-per-minute: expected 1.."));
  route("tv")["signal-time"] = std::string{"time"};
  CAF_CHECK_EQUAL(failure(),
                  "route.tv.signal-time: set, but max-age is not");
  route("tv")["cap-by"] = std::string{"symbol"};
  CAF_CHECK_EQUAL(failure(),
                  "route.tv.cap-by: set, but max-new-per-minute is not");
  // A text route has no members: no time to judge (unless signed), no
  // member to cap by.
  route("tv")["body"] = std::string{"text"};
  route("tv")["max-age"] = caf::timespan{std::chrono::seconds(30)};
  CAF_CHECK(starts_with(failure(), "route.tv.max-age: a text route has no "
                                   "time to judge"));
  route("tv")["body"] = std::string{"text"};
  route("tv")["max-new-per-minute"] = int64_t{5};
  route("tv")["cap-by"] = std::string{"symbol"};
  CAF_CHECK(starts_with(failure(), "route.tv.cap-by: a text route"));
  route("tv")["body"] = std::string{"text"};
  route("tv")["auth"] = std::string{"standard-webhooks"};
  route("tv")["secret"] = std::string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"};
  route("tv")["max-age"] = caf::timespan{std::chrono::seconds(30)};
  built();
}

CAF_TEST_FIXTURE_SCOPE_END()
