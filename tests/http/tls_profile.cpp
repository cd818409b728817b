#define CAF_SUITE http.tls_profile
#include "caf/test/unit_test.hpp"

// Every TLS context http/ makes keeps to the one profile
// (common/tls_profile.hpp): the listener's and the upstream client's (the
// admin CLI's HTTPS client is an upstream_tls too).

#include <string>

#include <boost/asio/ssl/context.hpp>
#include <openssl/ssl.h>

#include "http/server_tls.hpp"
#include "http/upstream_tls.hpp"
#include "tests/common/tls_offer.hpp"
#include "tests/http/tls_server.hpp"

using namespace oncegate::gateway;
using oncegate::test::test_certs;

namespace {

void check_keeps_to_profile(SSL_CTX* ctx) {
  CAF_MESSAGE("offered: " << oncegate::test::offered_suites(ctx));
  auto breaches = oncegate::test::offer_violations(ctx);
  for (auto& x : breaches)
    CAF_MESSAGE("breach: " << x);
  CAF_CHECK(breaches.empty());
}

} // namespace

CAF_TEST(the listener context offers only the Mozilla intermediate suites) {
  auto& c = test_certs::get();
  std::string error;
  auto culprit = server_tls_files::part::certificate;
  auto tls = server_tls::load({c.server, c.server_key}, error, culprit);
  if (tls == nullptr)
    CAF_FAIL("cannot load: " << error);
  check_keeps_to_profile(tls->context().native_handle());
}

CAF_TEST(the upstream client context offers only the Mozilla intermediate
           suites) {
  auto& c = test_certs::get();
  upstream_tls_files system_store;
  upstream_tls_files own_ca;
  own_ca.ca_file = c.ca;
  upstream_tls_files with_client_cert = own_ca;
  with_client_cert.client_cert = c.client;
  with_client_cert.client_key = c.client_key;
  for (auto& files : {system_store, own_ca, with_client_cert}) {
    std::string error;
    auto culprit = upstream_tls_files::part::ca_file;
    auto tls = upstream_tls::make(files, error, culprit);
    if (tls == nullptr)
      CAF_FAIL("cannot make: " << error);
    check_keeps_to_profile(tls->context().native_handle());
  }
}
