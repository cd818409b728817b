#define CAF_SUITE api.admin_access
#include "caf/test/unit_test.hpp"

// Who may use the admin endpoints and which address a request comes from:
// loopback detection, the forwarding headers of trusted proxies (hostile
// ones included), cross-site refusals, and the whole admin gate through the
// dispatcher (api/admin_auth.hpp, api/client_address.hpp).

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/admin_auth.hpp"
#include "api/auth.hpp"
#include "api/client_address.hpp"
#include "api/webhook_handler.hpp"
#include "tests/api/fake_node.hpp"

using namespace oncegate;
using namespace oncegate::gateway;

namespace {

using header_list = std::vector<std::pair<std::string, std::string>>;

std::vector<cidr> nets(std::initializer_list<const char*> texts) {
  std::vector<cidr> out;
  for (auto text : texts) {
    auto net = parse_cidr(text);
    CAF_REQUIRE(net);
    out.push_back(*net);
  }
  return out;
}

// Trusts 10.0.0.0/8 and 2001:db8:ffff::/48 (the proxies in these tests).
proxy_options proxies(std::vector<forwarded_header> headers
                      = {forwarded_header::x_forwarded_for},
                      std::size_t max_bytes = proxy_options{}.max_bytes) {
  proxy_options opts;
  opts.trusted = nets({"10.0.0.0/8", "2001:db8:ffff::/48"});
  opts.headers = std::move(headers);
  opts.max_bytes = max_bytes;
  return opts;
}

std::optional<std::string> xff(std::string_view value,
                               const proxy_options& opts = proxies()) {
  return client_from_header(value, forwarded_header::x_forwarded_for, opts);
}

std::optional<std::string> fwd(std::string_view value,
                               const proxy_options& opts = proxies()) {
  return client_from_header(value, forwarded_header::forwarded, opts);
}

const std::optional<std::string> none;

std::optional<std::string> is(std::string text) {
  return text;
}

// A request as curl on the node's host sends it (`Host: 127.0.0.1:8080`
// unless `headers` name another).
http_request request(std::string method, std::string target,
                     std::string remote, header_list headers = {},
                     std::string body = {}) {
  bool has_host = false;
  for (auto& [k, v] : headers)
    has_host = has_host || k == "host";
  if (!has_host)
    headers.emplace_back("host", "127.0.0.1:8080");
  http_request req;
  req.method = std::move(method);
  req.target = std::move(target);
  req.remote = std::move(remote);
  req.headers = std::move(headers);
  req.body = std::move(body);
  return req;
}

webhook_options gate_options(admin_options admin, proxy_options proxy = {}) {
  webhook_options opts;
  std::string error;
  auto routes = make_routes(nullptr, route_defaults{}, process_env, error);
  CAF_REQUIRE(routes);
  opts.routes = std::move(*routes);
  opts.admin = std::move(admin);
  opts.proxies = std::move(proxy);
  return opts;
}

admin_options no_token(bool opt_out = false, bool loopback = true) {
  admin_options admin;
  admin.loopback_listener = loopback;
  admin.allow_unauthenticated_loopback = opt_out;
  return admin;
}

admin_options with_token() {
  admin_options admin;
  admin.token = "s3cret-admin";
  return admin;
}

const std::pair<std::string, std::string> valid_token{"authorization",
                                                      "Bearer s3cret-admin"};
const std::pair<std::string, std::string> json_type{"content-type",
                                                    "application/json"};
constexpr std::string_view outcome = R"({"status":200,"body":"done"})";

// One dispatcher over the fake node (it counts what reached it).
struct gate {
  test::fake_node node;
  webhook_handler handler;

  explicit gate(webhook_options opts) : handler(std::move(opts), node) {
    // nop
  }

  http_response send(http_request req) {
    std::optional<http_response> res;
    handler.handle(std::move(req), [&](http_response r) { res = r; });
    CAF_REQUIRE(res);
    return *res;
  }
};

std::optional<std::string> header(const http_response& res,
                                  std::string_view name) {
  for (auto& [k, v] : res.headers)
    if (k == name)
      return v;
  return std::nullopt;
}

bool has_cors_headers(const http_response& res) {
  for (auto& [k, v] : res.headers)
    if (k.rfind("Access-Control-", 0) == 0
        || k.rfind("access-control-", 0) == 0)
      return true;
  return false;
}

std::string type_of(const http_response& res) {
  constexpr std::string_view prefix = R"({"type":"https://oncegate.dev/problems/)";
  if (res.body.rfind(prefix, 0) != 0)
    return {};
  auto rest = res.body.substr(prefix.size());
  return rest.substr(0, rest.find('"'));
}

#define CHECK_PROBLEM(res, code, name)                                        \
  do {                                                                         \
    auto&& res_ = (res);                                                       \
    CAF_CHECK_EQUAL(res_.status, code);                                        \
    CAF_CHECK_EQUAL(type_of(res_), name);                                      \
  } while (false)

} // namespace

// -- loopback -----------------------------------------------------------------

CAF_TEST(loopback addresses are 127 0 0 0 8 and ::1 in every spelling) {
  for (auto text : {"127.0.0.1", "127.255.255.254", "127.0.0.2", "::1",
                    "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1",
                    "0:0:0:0:0:ffff:7f00:1"}) {
    CAF_MESSAGE("loopback: " << text);
    CAF_CHECK(is_loopback_address(text));
  }
  for (auto text : {"", "0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "::2",
                    "::ffff:10.0.0.1", "localhost", "127.0.0.1 ", " ::1",
                    "127.1", "0177.0.0.1", "[::1]", "::1%lo", "127.0.0.1/8"}) {
    CAF_MESSAGE("not loopback: '" << text << "'");
    CAF_CHECK(!is_loopback_address(text));
  }
}

// -- X-Forwarded-For ----------------------------------------------------------

CAF_TEST(x forwarded for names the right most hop that is not a trusted proxy) {
  CAF_CHECK_EQUAL(xff("1.2.3.4"), is("1.2.3.4"));
  CAF_CHECK_EQUAL(xff("1.2.3.4, 10.0.0.1"), is("1.2.3.4"));
  CAF_CHECK_EQUAL(xff("9.9.9.9, 1.2.3.4, 10.0.0.2, 10.0.0.1"), is("1.2.3.4"));
  CAF_CHECK_EQUAL(xff("  1.2.3.4 ,10.0.0.1\t"), is("1.2.3.4"));
  // Empty list elements are no hops (RFC 9110 5.6.1).
  CAF_CHECK_EQUAL(xff("1.2.3.4,, ,10.0.0.1,"), is("1.2.3.4"));
  // Every hop a trusted proxy: the left-most is the client.
  CAF_CHECK_EQUAL(xff("10.0.0.3, 10.0.0.2, 10.0.0.1"), is("10.0.0.3"));
  CAF_CHECK_EQUAL(xff("2001:db8::7, 2001:db8:ffff::1"), is("2001:db8::7"));
  CAF_CHECK_EQUAL(xff("::ffff:1.2.3.4, ::ffff:10.0.0.1"),
                  is("::ffff:1.2.3.4"));
}

CAF_TEST(x forwarded for accepts brackets and ports and nothing looser) {
  CAF_CHECK_EQUAL(xff("[2001:db8::1]:443"), is("2001:db8::1"));
  CAF_CHECK_EQUAL(xff("[2001:db8::1]"), is("2001:db8::1"));
  CAF_CHECK_EQUAL(xff("1.2.3.4:8080"), is("1.2.3.4"));
  for (auto bad :
       {"", ",", " , ", "garbage", "01.2.3.4", "1.2.3", "1.2.3.4.5",
        "256.1.1.1", "0x7f.0.0.1", "1.2.3.4 5.6.7.8", "fe80::1%eth0",
        "[1.2.3.4]", "[1.2.3.4]:80", "[::1", "::1]:80", "[::1]:", "[::1]x",
        "[::1]:123456", "[::1]:-1", "1.2.3.4:", "1.2.3.4:80:90",
        "1.2.3.4:http", "\"1.2.3.4\"", "_hidden", "for=1.2.3.4",
        "1.2.3.4, garbage", "1.2.3.4, 10.0.0.1:", "[2001:db8::1]:_obf"}) {
    CAF_MESSAGE("malformed: '" << bad << "'");
    CAF_CHECK_EQUAL(xff(bad), none);
  }
  // An embedded NUL never cuts an address short.
  CAF_CHECK_EQUAL(xff(std::string_view{"1.2.3.4\0", 8}), none);
  // Garbage left of the answer is never read.
  CAF_CHECK_EQUAL(xff("garbage, \"x\", [, 1.2.3.4, 10.0.0.1"), is("1.2.3.4"));
  // `unknown` (Squid without forwarded_for) names no address.
  CAF_CHECK_EQUAL(xff("unknown"), is("unknown"));
  CAF_CHECK_EQUAL(xff("1.2.3.4, UNKNOWN, 10.0.0.1"), is("unknown"));
}

// -- Forwarded (RFC 7239) -------------------------------------------------------

CAF_TEST(forwarded names the for parameter of the right most untrusted hop) {
  CAF_CHECK_EQUAL(fwd("for=1.2.3.4"), is("1.2.3.4"));
  CAF_CHECK_EQUAL(fwd("For=1.2.3.4;proto=https;by=10.0.0.1"), is("1.2.3.4"));
  CAF_CHECK_EQUAL(fwd("proto=https; for=1.2.3.4 ;by=10.0.0.1"), is("1.2.3.4"));
  CAF_CHECK_EQUAL(fwd("for=1.2.3.4, for=10.0.0.1"), is("1.2.3.4"));
  CAF_CHECK_EQUAL(fwd(R"(for="[2001:db8:cafe::17]:4711")"),
                  is("2001:db8:cafe::17"));
  CAF_CHECK_EQUAL(fwd(R"(for="[2001:db8:cafe::17]")"), is("2001:db8:cafe::17"));
  CAF_CHECK_EQUAL(fwd(R"(for="1.2.3.4:80")"), is("1.2.3.4"));
  CAF_CHECK_EQUAL(fwd(R"(for="[::1]:_obfport")"), is("::1"));
  // Quoted-pairs decode; commas inside quoted strings separate nothing.
  CAF_CHECK_EQUAL(fwd(R"(for="\1.2.3.4")"), is("1.2.3.4"));
  CAF_CHECK_EQUAL(fwd(R"(for=1.2.3.4, by="a,b";for=10.0.0.1)"), is("1.2.3.4"));
  CAF_CHECK_EQUAL(fwd(R"(for=1.2.3.4, by="x\",y";for=10.0.0.1)"),
                  is("1.2.3.4"));
  CAF_CHECK_EQUAL(fwd(R"(for=1.2.3.4, by="x\\";for=10.0.0.1)"), is("1.2.3.4"));
  CAF_CHECK_EQUAL(fwd("for=10.0.0.2, for=10.0.0.1"), is("10.0.0.2"));
}

CAF_TEST(forwarded obfuscated and unknown nodes name no address) {
  for (auto value : {"for=unknown", "for=UNKNOWN", "for=_hidden",
                     R"(for="_gazonk")", "for=_a.b-c_d",
                     R"(for=1.2.3.4, for="_secret", for=10.0.0.1)"}) {
    CAF_MESSAGE("unknown: " << value);
    CAF_CHECK_EQUAL(fwd(value), is("unknown"));
  }
  // Not obfuscated identifiers: a lone `_`, characters outside the set.
  for (auto value : {"for=_", R"(for="_a b")", R"(for="_a/b")"}) {
    CAF_MESSAGE("malformed: " << value);
    CAF_CHECK_EQUAL(fwd(value), none);
  }
}

CAF_TEST(malformed forwarded headers name nobody) {
  for (auto bad :
       {"", ",", "for=", "for", "=1.2.3.4", "proto=https", "by=10.0.0.1",
        "for=[::1]", "for=1.2.3.4:80", "for=::1", R"(for="2001:db8::1")",
        "for=1.2.3.4;for=5.6.7.8", R"(for="1.2.3.4)", R"(for="1.2.3.4\")",
        R"(for=1.2.3.4")", R"(for=1.2.3.4, for="10.0.0.1)",
        R"(for="1.2.3.4" x)", "for = 1.2.3.4", "for=1.2.3.4 5.6.7.8",
        "for=1.2.3.4;;by=", R"(for="1.2.3.4\")", "for=\"1.2.3.4\x01\"",
        R"(for=\"1.2.3.4\")", "for=01.2.3.4"}) {
    CAF_MESSAGE("malformed: " << bad);
    CAF_CHECK_EQUAL(fwd(bad), none);
  }
  // Empty pairs are allowed by the grammar.
  CAF_CHECK_EQUAL(fwd(";for=1.2.3.4;"), is("1.2.3.4"));
}

// -- bounds -----------------------------------------------------------------------

CAF_TEST(a huge forwarding header is read only from its right end) {
  // 100 KiB of (even hostile) hops left of the answer cost nothing.
  std::string junk;
  while (junk.size() < 100 * 1024)
    junk += "1.1.1.1, \"x\", for=, [, ";
  CAF_CHECK_EQUAL(xff(junk + "6.6.6.6, 10.0.0.1"), is("6.6.6.6"));
  CAF_CHECK_EQUAL(fwd(junk + R"(for=6.6.6.6, for=10.0.0.1)"), is("6.6.6.6"));
  // Hops of trusted proxies beyond the limit: the answer is out of reach.
  std::string chain;
  for (int i = 0; i < 10'000; ++i)
    chain += "10.0.0.1, ";
  chain += "10.0.0.1";
  CAF_CHECK_EQUAL(xff(chain), none);
  CAF_CHECK_EQUAL(xff(chain, proxies({forwarded_header::x_forwarded_for},
                                     chain.size())),
                  is("10.0.0.1"));
}

CAF_TEST(the byte limit is exact) {
  std::string value = "1.2.3.4, 10.0.0.1"; // 17 bytes
  auto limit = [](std::size_t n) {
    return proxies({forwarded_header::x_forwarded_for}, n);
  };
  CAF_CHECK_EQUAL(xff(value, limit(17)), is("1.2.3.4"));
  // One byte short: the left-most hop may have begun before what was read.
  CAF_CHECK_EQUAL(xff(value, limit(16)), none);
  // The last element counts as whole only with the comma before it.
  CAF_CHECK_EQUAL(xff("1.2.3.4, 6.6.6.6", limit(9)), is("6.6.6.6"));
  CAF_CHECK_EQUAL(xff("1.2.3.4, 6.6.6.6", limit(8)), none);
  // A quoted string (with escapes) that reaches past the limit.
  std::string quoted = R"(for=1.2.3.4;by="\\\\\\\"\\", for=10.0.0.1)";
  CAF_CHECK_EQUAL(fwd(quoted, proxies({forwarded_header::forwarded},
                                      quoted.size())),
                  is("1.2.3.4"));
  for (std::size_t n = 16; n < quoted.size(); ++n) {
    CAF_MESSAGE("limit " << n);
    CAF_CHECK_EQUAL(fwd(quoted, proxies({forwarded_header::forwarded}, n)),
                    none);
  }
}

// -- resolve_client -------------------------------------------------------------

CAF_TEST(forwarding headers count only from a trusted peer) {
  auto opts = proxies();
  header_list forged = {{"x-forwarded-for", "1.2.3.4"},
                        {"forwarded", "for=1.2.3.4"}};
  CAF_CHECK_EQUAL(resolve_client(opts, request("GET", "/", "127.0.0.1",
                                               forged)),
                  "127.0.0.1");
  CAF_CHECK_EQUAL(resolve_client(opts, request("GET", "/", "192.0.2.9",
                                               forged)),
                  "192.0.2.9");
  CAF_CHECK_EQUAL(resolve_client(opts, request("GET", "/", "10.0.0.1",
                                               forged)),
                  "1.2.3.4");
  // An IPv4-mapped peer is the IPv4 address.
  CAF_CHECK_EQUAL(resolve_client(opts, request("GET", "/", "::ffff:10.0.0.1",
                                               forged)),
                  "1.2.3.4");
  // No trusted proxies at all: never read.
  CAF_CHECK_EQUAL(resolve_client(proxy_options{},
                                 request("GET", "/", "10.0.0.1", forged)),
                  "10.0.0.1");
}

CAF_TEST(a trusted peer without a usable header is the client itself) {
  auto opts = proxies();
  CAF_CHECK_EQUAL(resolve_client(opts, request("GET", "/", "10.0.0.1")),
                  "10.0.0.1");
  CAF_CHECK_EQUAL(resolve_client(opts, request("GET", "/", "10.0.0.1",
                                               {{"x-forwarded-for", "junk"}})),
                  "10.0.0.1");
  CAF_CHECK_EQUAL(resolve_client(opts, request("GET", "/", "10.0.0.1",
                                               {{"x-forwarded-for", ""}})),
                  "10.0.0.1");
}

CAF_TEST(only the configured headers are read and the first present wins) {
  header_list both = {{"forwarded", "for=5.5.5.5"},
                      {"x-forwarded-for", "1.2.3.4"}};
  // Default: X-Forwarded-For only; a Forwarded header a proxy passed on
  // from its client is ignored.
  CAF_CHECK_EQUAL(resolve_client(proxies(), request("GET", "/", "10.0.0.1",
                                                    both)),
                  "1.2.3.4");
  CAF_CHECK_EQUAL(resolve_client(proxies(),
                                 request("GET", "/", "10.0.0.1",
                                         {{"forwarded", "for=5.5.5.5"}})),
                  "10.0.0.1");
  auto rfc_first = proxies(
    {forwarded_header::forwarded, forwarded_header::x_forwarded_for});
  CAF_CHECK_EQUAL(resolve_client(rfc_first, request("GET", "/", "10.0.0.1",
                                                    both)),
                  "5.5.5.5");
  CAF_CHECK_EQUAL(resolve_client(rfc_first,
                                 request("GET", "/", "10.0.0.1",
                                         {{"x-forwarded-for", "1.2.3.4"}})),
                  "1.2.3.4");
  // A present but malformed first header: the peer, not the next header.
  CAF_CHECK_EQUAL(resolve_client(rfc_first,
                                 request("GET", "/", "10.0.0.1",
                                         {{"forwarded", "for=[::1]"},
                                          {"x-forwarded-for", "1.2.3.4"}})),
                  "10.0.0.1");
}

CAF_TEST(repeated header lines are one list in order) {
  auto req = request("GET", "/", "10.0.0.1",
                     {{"x-forwarded-for", "9.9.9.9, 1.2.3.4"},
                      {"x-forwarded-for", "10.0.0.2"}});
  CAF_CHECK_EQUAL(resolve_client(proxies(), req), "1.2.3.4");
}

// -- relayed and local ------------------------------------------------------------

CAF_TEST(only a direct loopback peer on a loopback listener is local) {
  auto opts = proxies();
  auto local = [&](admin_options admin, http_request req) {
    return local_admin_request(admin, opts, req);
  };
  CAF_CHECK(local(no_token(), request("GET", "/", "127.0.0.1")));
  CAF_CHECK(local(no_token(), request("GET", "/", "127.0.0.2")));
  CAF_CHECK(local(no_token(), request("GET", "/", "::1")));
  CAF_CHECK(local(no_token(), request("GET", "/", "::ffff:127.0.0.1")));
  // The direct peer must be loopback too.
  CAF_CHECK(!local(no_token(), request("GET", "/", "192.0.2.1")));
  CAF_CHECK(!local(no_token(), request("GET", "/", "")));
  CAF_CHECK(!local(no_token(false, false), request("GET", "/", "127.0.0.1")));
  // Relayed: any forwarding header, even naming loopback.
  for (auto name : {"x-forwarded-for", "forwarded", "x-real-ip"}) {
    CAF_MESSAGE("relayed by " << name);
    CAF_CHECK(!local(no_token(),
                     request("GET", "/", "127.0.0.1", {{name, "127.0.0.1"}})));
  }
  // Relayed: a trusted proxy's peer address, even without headers.
  auto same_host = proxies();
  same_host.trusted = nets({"127.0.0.1/32"});
  CAF_CHECK(!local_admin_request(no_token(), same_host,
                                 request("GET", "/", "127.0.0.1")));
  CAF_CHECK(local_admin_request(no_token(), same_host,
                                request("GET", "/", "127.0.0.2")));
}

CAF_TEST(a local request names a loopback host) {
  for (auto host : {"127.0.0.1:8080", "127.0.0.1", "127.0.0.2:1", "localhost",
                    "LOCALHOST:80", "[::1]:8080", "[::1]", " [0:0:0:0:0:0:0:1] "}) {
    CAF_MESSAGE("loopback host: " << host);
    CAF_CHECK(loopback_host(request("GET", "/", "127.0.0.1",
                                    {{"host", host}})));
  }
  for (auto host : {"", "rebound.example:8080", "rebound.example",
                    "localhost.rebound.example", "127.0.0.1.rebound.example",
                    "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:123456",
                    "127.0.0.1:65536", "127.0.0.1:99999", "[::1]:99999",
                    " ", ":8080", "[]", "[]:8080",
                    "[::1", "[::1]x", "[::2]:80", "::1", "10.0.0.1:8080",
                    "[::ffff:10.0.0.1]"}) {
    CAF_MESSAGE("other host: '" << host << "'");
    CAF_CHECK(!loopback_host(request("GET", "/", "127.0.0.1",
                                     {{"host", host}})));
  }
  auto no_host = request("GET", "/", "127.0.0.1");
  no_host.headers.clear();
  CAF_CHECK(!loopback_host(no_host));
  CAF_CHECK(!local_admin_request(no_token(), proxies(), no_host));
}

CAF_TEST(a request with more than one host field is not local) {
  // RFC 9112 3.2: which of them names the host is anybody's guess (a
  // server must refuse such a request), so neither makes it local; an
  // empty one among them included.
  for (auto second : {"", "rebound.example", "127.0.0.1:8080", "localhost"}) {
    CAF_MESSAGE("second host: '" << second << "'");
    auto req = request("GET", "/", "127.0.0.1",
                       {{"host", "127.0.0.1:8080"}, {"host", second}});
    CAF_CHECK(!loopback_host(req));
    CAF_CHECK(!local_admin_request(no_token(), proxies(), req));
    auto refused = refuse_admin(no_token(), proxies(), req);
    CAF_REQUIRE(refused);
    CAF_CHECK_EQUAL(refused->status, 403);
  }
}

// -- cross-site ---------------------------------------------------------------------

CAF_TEST(cross site requests are told by origin and sec fetch site) {
  auto req = [](header_list headers) {
    headers.emplace_back("host", "admin.example:8080");
    return request("POST", "/v1/keys/k", "127.0.0.1", std::move(headers));
  };
  CAF_CHECK(!cross_site(req({})));
  CAF_CHECK(!cross_site(req({{"origin", "http://admin.example:8080"}})));
  CAF_CHECK(!cross_site(req({{"origin", "HTTPS://Admin.Example:8080"}})));
  CAF_CHECK(!cross_site(req({{"sec-fetch-site", "same-origin"}})));
  CAF_CHECK(!cross_site(req({{"sec-fetch-site", "none"}})));
  for (const header_list& bad : std::initializer_list<header_list>{
         {{"origin", "null"}},
        {{"origin", "http://evil.example"}},
        {{"origin", "http://admin.example"}},
        {{"origin", "http://admin.example:8081"}},
        {{"origin", "http://admin.example:8080/"}},
        {{"origin", "http://user@admin.example:8080"}},
        {{"origin", "ftp://admin.example:8080"}},
        {{"origin", "admin.example:8080"}},
        {{"origin", "http://"}},
        {{"origin", ""}},
        {{"origin", "http://admin.example:8080"},
         {"origin", "http://admin.example:8080"}},
        {{"sec-fetch-site", "cross-site"}},
        {{"sec-fetch-site", "same-site"}},
        {{"sec-fetch-site", "Same-Origin"}},
        {{"sec-fetch-site", ""}},
        {{"origin", "http://admin.example:8080"},
         {"sec-fetch-site", "cross-site"}}}) {
    CAF_MESSAGE("cross-site: " << bad.front().first << ": "
                               << bad.front().second);
    CAF_CHECK(cross_site(req(bad)));
  }
  // Without a Host there is nothing an Origin could be the same as.
  auto no_host = request("GET", "/", "127.0.0.1",
                         {{"origin", "http://127.0.0.1:8080"}});
  CAF_CHECK(!cross_site(no_host));
  no_host.headers.pop_back();
  CAF_CHECK(cross_site(no_host));
}

CAF_TEST(the default port of the origin scheme may be left out) {
  auto check = [](const char* origin, const char* host) {
    return !cross_site(request("GET", "/", "127.0.0.1",
                               {{"origin", origin}, {"host", host}}));
  };
  CAF_CHECK(check("https://admin.example", "admin.example"));
  CAF_CHECK(check("https://admin.example", "admin.example:443"));
  CAF_CHECK(check("https://admin.example:443", "admin.example"));
  CAF_CHECK(check("http://admin.example", "admin.example:80"));
  CAF_CHECK(check("http://[::1]:8080", "[::1]:8080"));
  CAF_CHECK(!check("https://admin.example", "admin.example:80"));
  CAF_CHECK(!check("http://admin.example", "admin.example:443"));
}

// -- the gate, through the dispatcher ------------------------------------------------

CAF_TEST(without a token reads stay open on loopback and changes do not) {
  gate g{gate_options(no_token())};
  auto read = g.send(request("GET", "/v1/keys/k", "127.0.0.1"));
  CAF_CHECK_EQUAL(read.status, 404); // reached the endpoint
  CAF_CHECK_EQUAL(g.node.lookups, 1);
  CAF_CHECK_EQUAL(g.send(request("GET", "/v1/cluster", "::1")).status, 200);
  using call = std::pair<const char*, const char*>;
  for (auto [method, target] : std::initializer_list<call>{
         {"DELETE", "/v1/keys/k"},
        {"DELETE", "/v1/keys/k?force=true"},
        {"POST", "/v1/keys/k/complete"},
        {"PUT", "/v1/keys/k"},
        {"PATCH", "/v1/keys/k"},
        {"OPTIONS", "/v1/keys/k"},
        {"POST", "/v1/cluster/transfer"},
        {"POST", "/v1/cluster/members/2"},
        {"DELETE", "/v1/cluster/members/2"}}) {
    CAF_MESSAGE(method << " " << target);
    auto res = g.send(request(method, target, "127.0.0.1", {json_type},
                              std::string{outcome}));
    CHECK_PROBLEM(res, 403, "admin-token-required");
    CAF_CHECK(res.body.find("admin.token-env") != std::string::npos);
  }
  CAF_CHECK_EQUAL(g.node.changes(), 0);
}

CAF_TEST(without a token nothing is open on a non loopback listener) {
  gate g{gate_options(no_token(true, false))};
  CHECK_PROBLEM(g.send(request("GET", "/v1/keys/k", "127.0.0.1")), 403,
                "forbidden");
  CHECK_PROBLEM(g.send(request("DELETE", "/v1/keys/k", "127.0.0.1")), 403,
                "admin-token-required");
  CAF_CHECK_EQUAL(g.node.lookups + g.node.changes(), 0);
}

CAF_TEST(the opt out admits changes only from a direct loopback peer) {
  gate g{gate_options(no_token(true), proxies())};
  CAF_CHECK_EQUAL(g.send(request("DELETE", "/v1/keys/k", "127.0.0.1")).status,
                  404);
  CAF_CHECK_EQUAL(g.send(request("POST", "/v1/keys/k/complete", "::1",
                                 {json_type}, std::string{outcome}))
                    .status,
                  404);
  CAF_CHECK_EQUAL(g.node.updates, 2);
  // A loopback listener reached from elsewhere (a port forward, a
  // container's published port) is not local.
  CHECK_PROBLEM(g.send(request("DELETE", "/v1/keys/k", "192.0.2.7")), 403,
                "admin-token-required");
  CHECK_PROBLEM(g.send(request("GET", "/v1/keys/k", "192.0.2.7")), 403,
                "forbidden");
  // Relayed: the forwarded address never counts, loopback or not.
  CHECK_PROBLEM(g.send(request("DELETE", "/v1/keys/k", "127.0.0.1",
                               {{"x-forwarded-for", "127.0.0.1"}})),
                403, "admin-token-required");
  CHECK_PROBLEM(g.send(request("DELETE", "/v1/keys/k", "10.0.0.1",
                               {{"x-forwarded-for", "127.0.0.1"}})),
                403, "admin-token-required");
  CAF_CHECK_EQUAL(g.node.updates, 2);
}

CAF_TEST(a page rebound to loopback is not local) {
  // DNS rebinding: the browser thinks it talks to rebound.example, so the
  // request is same-origin, but names that host.
  header_list rebound = {{"host", "rebound.example:8080"},
                         {"origin", "http://rebound.example:8080"},
                         {"sec-fetch-site", "same-origin"},
                         json_type};
  gate g{gate_options(no_token(true))};
  CHECK_PROBLEM(g.send(request("GET", "/v1/keys/k", "127.0.0.1", rebound)),
                403, "forbidden");
  CHECK_PROBLEM(g.send(request("DELETE", "/v1/keys/k", "127.0.0.1", rebound)),
                403, "admin-token-required");
  CAF_CHECK_EQUAL(g.node.lookups + g.node.changes(), 0);
  // A token is a credential such a page does not have; with it, the name
  // does not matter.
  gate t{gate_options(with_token())};
  auto with = rebound;
  with.push_back(valid_token);
  CAF_CHECK_EQUAL(t.send(request("DELETE", "/v1/keys/k", "127.0.0.1", with))
                    .status,
                  404);
}

CAF_TEST(a proxy on the same host does not make its clients local) {
  auto same_host = proxies();
  same_host.trusted = nets({"127.0.0.1/32"});
  gate g{gate_options(no_token(true), same_host)};
  for (const header_list& hdrs : std::initializer_list<header_list>{
         {}, {{"x-forwarded-for", "127.0.0.1"}},
         {{"x-forwarded-for", "203.0.113.5"}}}) {
    CHECK_PROBLEM(g.send(request("GET", "/v1/keys/k", "127.0.0.1", hdrs)), 403,
                  "forbidden");
    CHECK_PROBLEM(g.send(request("DELETE", "/v1/keys/k", "127.0.0.1", hdrs)),
                  403, "admin-token-required");
  }
  CAF_CHECK_EQUAL(g.node.lookups + g.node.changes(), 0);
}

CAF_TEST(a token is needed for everything once configured) {
  gate g{gate_options(with_token())};
  auto res = g.send(request("GET", "/v1/keys/k", "127.0.0.1"));
  CHECK_PROBLEM(res, 401, "unauthorized");
  CAF_CHECK_EQUAL(header(res, "WWW-Authenticate"), std::string{"Bearer"});
  CAF_CHECK_EQUAL(
    g.send(request("DELETE", "/v1/keys/k", "192.0.2.7", {valid_token})).status,
    404);
  CAF_CHECK_EQUAL(g.node.updates, 1);
}

CAF_TEST(cross site requests are refused whatever the token) {
  for (auto admin : {with_token(), no_token(true)}) {
    gate g{gate_options(admin)};
    for (const header_list& site : std::initializer_list<header_list>{
           {{"origin", "http://evil.example"}},
           {{"origin", "null"}},
           {{"sec-fetch-site", "cross-site"}}}) {
      for (auto method : {"GET", "DELETE", "POST"}) {
        auto hdrs = site;
        hdrs.push_back(valid_token);
        hdrs.push_back(json_type);
        hdrs.emplace_back("host", "127.0.0.1:8080");
        CAF_MESSAGE(method << " with " << site.front().first);
        auto target = std::string{method} == "POST" ? "/v1/keys/k/complete"
                                                    : "/v1/keys/k";
        CHECK_PROBLEM(g.send(request(method, target, "127.0.0.1", hdrs,
                                     std::string{outcome})),
                      403, "cross-site");
      }
    }
    CAF_CHECK_EQUAL(g.node.lookups + g.node.changes(), 0);
    // Same origin passes.
    CAF_CHECK_EQUAL(g.send(request("DELETE", "/v1/keys/k", "127.0.0.1",
                                   {valid_token,
                                    {"host", "127.0.0.1:8080"},
                                    {"origin", "http://127.0.0.1:8080"},
                                    {"sec-fetch-site", "same-origin"}}))
                      .status,
                    404);
  }
}

CAF_TEST(a cors preflight never succeeds) {
  gate g{gate_options(with_token())};
  auto res = g.send(request("OPTIONS", "/v1/keys/k", "127.0.0.1",
                            {{"host", "127.0.0.1:8080"},
                             {"origin", "http://evil.example"},
                             {"access-control-request-method", "DELETE"},
                             {"access-control-request-headers",
                              "authorization"}}));
  CHECK_PROBLEM(res, 403, "cross-site");
  CAF_CHECK(!has_cors_headers(res));
  // Authorised and same-site, OPTIONS is still no admin method.
  res = g.send(request("OPTIONS", "/v1/keys/k", "127.0.0.1", {valid_token}));
  CHECK_PROBLEM(res, 405, "method-not-allowed");
  CAF_CHECK(!has_cors_headers(res));
  res = g.send(request("OPTIONS", "/v1/cluster/transfer", "127.0.0.1",
                       {valid_token}));
  CHECK_PROBLEM(res, 405, "method-not-allowed");
  CAF_CHECK_EQUAL(g.node.changes(), 0);
}

CAF_TEST(a change with a body must declare json) {
  gate g{gate_options(with_token())};
  for (auto type : {"text/plain", "text/plain;charset=UTF-8",
                    "application/x-www-form-urlencoded",
                    "multipart/form-data; boundary=x", "application/jsonx",
                    "application/problem+json", "json", ""}) {
    CAF_MESSAGE("content type '" << type << "'");
    CHECK_PROBLEM(g.send(request("POST", "/v1/keys/k/complete", "127.0.0.1",
                                 {valid_token, {"content-type", type}},
                                 std::string{outcome})),
                  415, "unsupported-media-type");
  }
  // No Content-Type at all, or two of them.
  CHECK_PROBLEM(g.send(request("POST", "/v1/keys/k/complete", "127.0.0.1",
                               {valid_token}, std::string{outcome})),
                415, "unsupported-media-type");
  CHECK_PROBLEM(g.send(request("POST", "/v1/keys/k/complete", "127.0.0.1",
                               {valid_token, json_type, json_type},
                               std::string{outcome})),
                415, "unsupported-media-type");
  CAF_CHECK_EQUAL(g.node.changes(), 0);
  for (auto type : {"application/json", "Application/JSON; charset=utf-8",
                    " application/json ;charset=utf-8"}) {
    CAF_MESSAGE("content type '" << type << "'");
    CAF_CHECK_EQUAL(g.send(request("POST", "/v1/keys/k/complete",
                                   "127.0.0.1",
                                   {valid_token, {"content-type", type}},
                                   std::string{outcome}))
                      .status,
                    404);
  }
  CAF_CHECK_EQUAL(g.node.updates, 3);
}

CAF_TEST(a change without a body needs no content type) {
  gate g{gate_options(with_token())};
  CAF_CHECK_EQUAL(
    g.send(request("DELETE", "/v1/keys/k", "127.0.0.1", {valid_token})).status,
    404);
  CAF_CHECK_EQUAL(g.send(request("DELETE", "/v1/keys/k", "127.0.0.1",
                                 {valid_token, {"content-type", "text/plain"}}))
                    .status,
                  404);
  CAF_CHECK_EQUAL(g.send(request("POST", "/v1/cluster/transfer", "127.0.0.1",
                                 {valid_token}))
                    .status,
                  409); // not-a-cluster: it reached the endpoint
  // A read's body is not looked at.
  CAF_CHECK_EQUAL(g.send(request("GET", "/v1/keys/k", "127.0.0.1",
                                 {valid_token, {"content-type", "text/plain"}},
                                 "x"))
                    .status,
                  404);
  CAF_CHECK_EQUAL(g.node.updates, 2);
}

CAF_TEST(route allowlists see the client a trusted proxy names) {
  auto opts = gate_options(no_token(), proxies());
  opts.routes.routes[0].allow = nets({"1.2.3.4/32"});
  gate g{opts};
  auto post = [&](std::string remote, header_list hdrs) {
    hdrs.push_back(json_type);
    return g.send(request("POST", "/v1/webhook", std::move(remote),
                          std::move(hdrs),
                          R"({"id":")" + std::to_string(g.node.seen.size())
                            + R"("})"));
  };
  CAF_CHECK_EQUAL(post("10.0.0.1", {{"x-forwarded-for", "1.2.3.4"}}).status,
                  200);
  CAF_CHECK_EQUAL(post("10.0.0.1", {{"x-forwarded-for",
                                     "6.6.6.6, 1.2.3.4, 10.0.0.2"}})
                    .status,
                  200);
  // Forged by an untrusted peer, pushed left by a proxy, or unusable.
  CHECK_PROBLEM(post("192.0.2.1", {{"x-forwarded-for", "1.2.3.4"}}), 403,
                "forbidden");
  CHECK_PROBLEM(post("10.0.0.1", {{"x-forwarded-for", "1.2.3.4, 6.6.6.6"}}),
                403, "forbidden");
  CHECK_PROBLEM(post("10.0.0.1", {{"x-forwarded-for", "1.2.3.4, junk"}}), 403,
                "forbidden");
  CHECK_PROBLEM(post("10.0.0.1", {{"x-forwarded-for", "unknown"}}), 403,
                "forbidden");
  CHECK_PROBLEM(post("10.0.0.1", {{"forwarded", "for=1.2.3.4"}}), 403,
                "forbidden");
  CAF_CHECK_EQUAL(g.node.seen.size(), 2u);
}
