#define CAF_SUITE http.upstream_tls
#include "caf/test/unit_test.hpp"

#include "http/upstream_tls.hpp"

#include <openssl/ssl.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "http/upstream_client.hpp"
#include "tests/http/tls_server.hpp"
#include "tests/http/upstream_fixture.hpp"

using namespace oncegate::gateway;
using oncegate::test::test_certs;
using oncegate::test::tls_server;
using oncegate::test::tls_server_options;
using mode = tls_server_options::mode;
using part = upstream_tls_files::part;

namespace {

constexpr auto response = upstream_result::kind::response;
constexpr auto not_sent = upstream_result::kind::not_sent;
constexpr auto maybe_sent = upstream_result::kind::maybe_sent;

int kind(const upstream_result& r) {
  return static_cast<int>(r.outcome);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::shared_ptr<const upstream_tls> context(upstream_tls_files files) {
  std::string error;
  auto culprit = part::ca_file;
  auto ctx = upstream_tls::make(files, error, culprit);
  if (!ctx)
    CAF_FAIL("context: " << error);
  return ctx;
}

/// Trusts the test CA; with the client certificate if `client`.
std::shared_ptr<const upstream_tls> trusting_ca(bool client = false) {
  auto& c = test_certs::get();
  upstream_tls_files files;
  files.ca_file = c.ca;
  if (client) {
    files.client_cert = c.client;
    files.client_key = c.client_key;
  }
  return context(files);
}

upstream_target https_target(uint16_t port,
                             std::shared_ptr<const upstream_tls> tls,
                             std::string host = "127.0.0.1") {
  upstream_target t;
  t.host = std::move(host);
  t.port = port;
  t.path = "/orders";
  t.https = true;
  t.tls = std::move(tls);
  t.response_timeout = std::chrono::milliseconds{3000};
  return t;
}

tls_server_options serving(std::string cert, std::string key,
                           mode what = mode::answer) {
  tls_server_options opts;
  opts.cert = std::move(cert);
  opts.key = std::move(key);
  opts.what = what;
  return opts;
}

tls_server_options good_server(mode what = mode::answer) {
  auto& c = test_certs::get();
  return serving(c.server, c.server_key, what);
}

tls_server_options requiring_client_cert(int max_version = 0) {
  auto opts = good_server();
  opts.client_ca = test_certs::get().ca;
  opts.max_version = max_version;
  return opts;
}

using fixture = oncegate::test::upstream_fixture;

} // namespace

CAF_TEST(a tls context loads its files or names the one that does not) {
  auto& c = test_certs::get();
  auto garbage = c.dir + "/garbage.pem";
  std::ofstream{garbage} << "not a certificate\n";
  struct row {
    upstream_tls_files files;
    part culprit;
    std::string says;
  };
  std::vector<row> rows{
    {{c.dir + "/missing.pem", "", ""}, part::ca_file,
     "cannot read " + c.dir + "/missing.pem: No such file or directory"},
    {{garbage, "", ""}, part::ca_file,
     "cannot load CA certificates from " + garbage},
    {{c.ca, garbage, c.client_key}, part::client_cert,
     "cannot load a certificate chain from " + garbage},
    {{c.ca, c.client, garbage}, part::client_key,
     "cannot load a private key from " + garbage},
    {{c.ca, c.client, c.server_key}, part::client_key,
     c.server_key + " is not the key of " + c.client},
  };
  for (auto& r : rows) {
    std::string error;
    auto culprit = part::ca_file;
    auto ctx = upstream_tls::make(r.files, error, culprit);
    CAF_CHECK(ctx == nullptr);
    CAF_CHECK(culprit == r.culprit);
    CAF_CHECK(contains(error, r.says));
    CAF_MESSAGE("refused: " << error);
  }
  CAF_CHECK(trusting_ca(true) != nullptr);
  // The system store.
  CAF_CHECK(context({}) != nullptr);
}

CAF_TEST_FIXTURE_SCOPE(upstream_tls_tests, fixture)

CAF_TEST(a request over https is answered and the next reuses the connection) {
  tls_server up{good_server()};
  auto target = https_target(up.port(), trusting_ca());
  auto r = send(target, "k1");
  CAF_REQUIRE_EQUAL(kind(r), static_cast<int>(response));
  CAF_CHECK_EQUAL(r.status, 200);
  CAF_CHECK_EQUAL(r.body, "ok k1");
  r = send(target, "k2");
  CAF_CHECK_EQUAL(kind(r), static_cast<int>(response));
  CAF_CHECK_EQUAL(r.body, "ok k2");
  // One handshake for two requests; no SNI for an address.
  CAF_CHECK_EQUAL(up.handshakes(), 1);
  CAF_CHECK_EQUAL(up.connections(), 1);
  CAF_CHECK_EQUAL(up.requests(), 2);
  CAF_CHECK_EQUAL(up.server_names(), std::vector<std::string>{""});
}

CAF_TEST(a host name is sent as the server name and verified) {
  tls_server up{good_server()};
  auto r = send(https_target(up.port(), trusting_ca(), "localhost"), "k1");
  CAF_REQUIRE_EQUAL(kind(r), static_cast<int>(response));
  CAF_CHECK_EQUAL(r.body, "ok k1");
  CAF_CHECK_EQUAL(up.server_names(), std::vector<std::string>{"localhost"});
}

CAF_TEST(a certificate for another name is not sent and never maybe sent) {
  auto& c = test_certs::get();
  tls_server up{serving(c.wrong_name, c.wrong_name_key)};
  for (auto host : {"127.0.0.1", "localhost"}) {
    auto r = send(https_target(up.port(), trusting_ca(), host), "k1");
    CAF_CHECK_EQUAL(kind(r), static_cast<int>(not_sent));
    CAF_MESSAGE(host << ": " << r.error);
    CAF_CHECK(contains(r.error, "tls handshake: certificate verify failed ("));
    CAF_CHECK(contains(r.error, std::string{host} == "localhost"
                                  ? "hostname mismatch"
                                  : "IP address mismatch"));
  }
  CAF_CHECK_EQUAL(up.handshakes(), 0);
  CAF_CHECK_EQUAL(up.requests(), 0);
}

CAF_TEST(an untrusted certificate is not sent) {
  auto& c = test_certs::get();
  tls_server up{serving(c.stranger, c.stranger_key)};
  auto r = send(https_target(up.port(), trusting_ca()), "k1");
  CAF_CHECK_EQUAL(kind(r), static_cast<int>(not_sent));
  CAF_CHECK_EQUAL(r.error, "tls handshake: certificate verify failed "
                           "(unable to get local issuer certificate)");
  // The system store does not know the test CA either: verification is
  // never off.
  tls_server good{good_server()};
  r = send(https_target(good.port(), context({})), "k2");
  CAF_CHECK_EQUAL(kind(r), static_cast<int>(not_sent));
  CAF_CHECK(contains(r.error, "certificate verify failed"));
  CAF_CHECK_EQUAL(up.requests() + good.requests(), 0);
}

CAF_TEST(a handshake that does not finish within the connect timeout is not sent) {
  oncegate::test::silent_listener hole;
  auto target = https_target(hole.port(), trusting_ca());
  target.connect_timeout = std::chrono::milliseconds{300};
  auto started = std::chrono::steady_clock::now();
  auto r = send(target, "k1");
  auto took = std::chrono::steady_clock::now() - started;
  CAF_CHECK_EQUAL(kind(r), static_cast<int>(not_sent));
  CAF_CHECK_EQUAL(r.error, "tls handshake: timeout");
  CAF_CHECK(took >= std::chrono::milliseconds{290});
  CAF_CHECK(took < std::chrono::seconds{5});
}

CAF_TEST(an https target without a tls context is never sent) {
  tls_server up{good_server()};
  auto r = send(https_target(up.port(), nullptr), "k1");
  CAF_CHECK_EQUAL(kind(r), static_cast<int>(not_sent));
  CAF_CHECK_EQUAL(up.connections(), 0);
}

CAF_TEST(an upstream that requires a client certificate gets it) {
  tls_server up{requiring_client_cert()};
  auto target = https_target(up.port(), trusting_ca(true));
  auto r = send(target, "k1");
  CAF_REQUIRE_EQUAL(kind(r), static_cast<int>(response));
  CAF_CHECK_EQUAL(r.body, "ok k1");
  r = send(target, "k2");
  CAF_CHECK_EQUAL(r.body, "ok k2");
  CAF_CHECK_EQUAL(up.handshakes(), 1);
}

// TLS 1.3 (RFC 8446, 4.4.2): the client's handshake ends with its
// Finished, before the server has judged its (missing) certificate; the
// request goes out right after, and the refusal comes back as an alert on
// the first read. The server never read the request, but the client cannot
// prove that: the kernel took the request's records, so it is in doubt.
// Only when the server's reset arrived before the request went out (the
// server closed with our Finished unread) is it provably not sent. Either
// way it is never taken for an answer.
CAF_TEST(a client certificate refused under tls 1.3 is maybe sent or provably not) {
  tls_server up{requiring_client_cert()};
  auto r = send(https_target(up.port(), trusting_ca()), "k1");
  CAF_MESSAGE("tls 1.3, no client certificate: "
              << (r.outcome == maybe_sent ? "maybe_sent" : "not_sent")
              << ", " << r.error);
  CAF_CHECK_NOT_EQUAL(kind(r), static_cast<int>(response));
  if (r.outcome == not_sent)
    CAF_CHECK(contains(r.error, "write: "));
  CAF_CHECK(!r.error.empty());
  CAF_REQUIRE(up.wait_closed(1));
  CAF_CHECK_EQUAL(up.failed_handshakes(), 1);
  CAF_CHECK_EQUAL(up.requests(), 0);
}

// TLS 1.2: the server refuses before its own Finished, so the client's
// handshake fails and nothing of the request left.
CAF_TEST(a client certificate refused under tls 1.2 is not sent) {
  tls_server up{requiring_client_cert(TLS1_2_VERSION)};
  auto r = send(https_target(up.port(), trusting_ca()), "k1");
  CAF_CHECK_EQUAL(kind(r), static_cast<int>(not_sent));
  CAF_MESSAGE("tls 1.2, no client certificate: " << r.error);
  CAF_CHECK(contains(r.error, "tls handshake: "));
  CAF_CHECK_EQUAL(up.requests(), 0);
}

CAF_TEST(a connection closed after the upstream read the request is maybe sent) {
  tls_server up{good_server(mode::close_after_request)};
  auto r = send(https_target(up.port(), trusting_ca()), "k1");
  CAF_CHECK_EQUAL(kind(r), static_cast<int>(maybe_sent));
  CAF_CHECK(!r.timed_out);
  CAF_MESSAGE("closed after the request: " << r.error);
  CAF_CHECK_EQUAL(up.requests(), 1);
}

// The upstream resets the connection while the kernel still takes the
// request's records: the failing write is in doubt, not "not sent".
CAF_TEST(a tls write that fails partway is maybe sent) {
  tls_server up{good_server(mode::close_after_head)};
  // Far more than the socket buffers hold: the reset comes mid-request.
  auto r = send(https_target(up.port(), trusting_ca()), "k1",
                std::string(32 * 1024 * 1024, 'x'));
  CAF_CHECK_EQUAL(kind(r), static_cast<int>(maybe_sent));
  CAF_MESSAGE("reset mid-request: " << r.error);
  CAF_CHECK(contains(r.error, "write: "));
  CAF_CHECK_EQUAL(up.requests(), 0);
}

CAF_TEST(a pooled tls connection the upstream closed is not reused) {
  tls_server up{good_server(mode::close_after_answer)};
  auto target = https_target(up.port(), trusting_ca());
  auto r = send(target, "k1");
  CAF_REQUIRE_EQUAL(kind(r), static_cast<int>(response));
  // Its close_notify and FIN are at our socket before the next request.
  CAF_REQUIRE(up.wait_closed(1));
  r = send(target, "k2");
  CAF_CHECK_EQUAL(kind(r), static_cast<int>(response));
  CAF_CHECK_EQUAL(r.body, "ok k2");
  CAF_CHECK_EQUAL(up.handshakes(), 2);
  CAF_CHECK_EQUAL(up.requests(), 2);
}

CAF_TEST_FIXTURE_SCOPE_END()

namespace {

using clock_type = std::chrono::steady_clock;

double micros(clock_type::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

struct cost {
  double first_us;
  double reused_us;
};

// The median of the first request on a new connection (connect, for
// https the handshake) and of later ones on the kept-alive connection.
// Each round has a client of its own, warmed up by a request to `warm`
// (asio's resolver thread starts with the first name it resolves).
cost measure(const upstream_target& target, const upstream_target& warm,
             int rounds, int reuses) {
  std::vector<double> first, reused;
  for (int i = 0; i < rounds; ++i) {
    upstream_client client;
    auto r = oncegate::test::forward_and_wait(client, warm, "warm-up");
    CAF_REQUIRE_EQUAL(kind(r), static_cast<int>(response));
    auto t0 = clock_type::now();
    r = oncegate::test::forward_and_wait(client, target, "first");
    first.push_back(micros(clock_type::now() - t0));
    CAF_REQUIRE_EQUAL(kind(r), static_cast<int>(response));
    for (int j = 0; j < reuses; ++j) {
      t0 = clock_type::now();
      r = oncegate::test::forward_and_wait(client, target, "again");
      reused.push_back(micros(clock_type::now() - t0));
      CAF_REQUIRE_EQUAL(kind(r), static_cast<int>(response));
    }
  }
  return {median(first), median(reused)};
}

} // namespace

CAF_TEST(the first https request pays the handshake and later ones do not) {
  constexpr int rounds = 20;
  constexpr int reuses = 50;
  tls_server tls_up{good_server()};
  tls_server plain_up{tls_server_options{}};
  tls_server warm_up{tls_server_options{}};
  auto warm = https_target(warm_up.port(), nullptr);
  warm.https = false;
  auto https = measure(https_target(tls_up.port(), trusting_ca()), warm,
                       rounds, reuses);
  auto plain_target = https_target(plain_up.port(), nullptr);
  plain_target.https = false;
  auto plain = measure(plain_target, warm, rounds, reuses);
  // One handshake per round, none per reused request.
  CAF_CHECK_EQUAL(tls_up.handshakes(), rounds);
  CAF_CHECK_EQUAL(tls_up.requests(), rounds * (reuses + 1));
  CAF_MESSAGE("median us, first request on a new connection / request on "
              "the kept-alive one ("
              << rounds << " x (1 + " << reuses
              << "), loopback, TLS 1.3, EC P-256):");
  CAF_MESSAGE("  https: " << https.first_us << " / " << https.reused_us);
  CAF_MESSAGE("  http:  " << plain.first_us << " / " << plain.reused_us);
  CAF_CHECK(https.first_us > https.reused_us);
}
