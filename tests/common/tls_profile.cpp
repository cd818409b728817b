#define CAF_SUITE common.tls_profile
#include "caf/test/unit_test.hpp"

#include "common/tls_profile.hpp"

#include <memory>
#include <string>

#include <openssl/ssl.h>

#include "tests/common/tls_offer.hpp"

using namespace oncegate;

namespace {

struct ctx_free {
  void operator()(SSL_CTX* x) const {
    SSL_CTX_free(x);
  }
};
using ctx_ptr = std::unique_ptr<SSL_CTX, ctx_free>;

bool offers(SSL_CTX* ctx, const std::string& name) {
  return (":" + test::offered_suites(ctx) + ":").find(":" + name + ":")
         != std::string::npos;
}

void check_keeps_to_profile(SSL_CTX* ctx) {
  CAF_MESSAGE("offered: " << test::offered_suites(ctx));
  auto breaches = test::offer_violations(ctx);
  for (auto& x : breaches)
    CAF_MESSAGE("breach: " << x);
  CAF_CHECK(breaches.empty());
}

} // namespace

CAF_TEST(the check sees the CBC suites of the OpenSSL defaults) {
  // The same defaults the listener had (testssl.sh: LUCKY13 "potentially
  // vulnerable"): the check must not pass them.
  ctx_ptr ctx{SSL_CTX_new(TLS_server_method())};
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  auto breaches = test::offer_violations(ctx.get());
  bool cbc = false;
  for (auto& x : breaches)
    cbc = cbc || x.find("not AEAD") != std::string::npos;
  CAF_CHECK(cbc);
}

CAF_TEST(a server or client context with the profile offers only AEAD suites
           of the Mozilla intermediate list over TLS 1.2 and 1.3) {
  for (auto method : {TLS_server_method(), TLS_client_method(), TLS_method()}) {
    ctx_ptr ctx{SSL_CTX_new(method)};
    // As asio's context and a careless caller leave it: server preference.
    SSL_CTX_set_options(ctx.get(), SSL_OP_CIPHER_SERVER_PREFERENCE);
    std::string error;
    CAF_REQUIRE(tls::apply_profile(ctx.get(), error));
    CAF_CHECK_EQUAL(error, "");
    check_keeps_to_profile(ctx.get());
    CAF_CHECK_EQUAL(SSL_CTX_get_min_proto_version(ctx.get()), TLS1_2_VERSION);
    CAF_CHECK((SSL_CTX_get_options(ctx.get()) & SSL_OP_NO_COMPRESSION) != 0);
    CAF_CHECK((SSL_CTX_get_options(ctx.get()) & SSL_OP_NO_RENEGOTIATION) != 0);
    // Not so tight that nothing is left: both protocol versions, both
    // certificate types, both ciphers.
    for (auto name : {"ECDHE-ECDSA-AES128-GCM-SHA256",
                      "ECDHE-RSA-AES256-GCM-SHA384",
                      "ECDHE-ECDSA-CHACHA20-POLY1305", "TLS_AES_128_GCM_SHA256",
                      "TLS_AES_256_GCM_SHA384",
                      "TLS_CHACHA20_POLY1305_SHA256"})
      CAF_CHECK(offers(ctx.get(), name));
  }
}

CAF_TEST(a higher protocol floor set before the profile stays) {
  ctx_ptr ctx{SSL_CTX_new(TLS_method())};
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION);
  std::string error;
  CAF_REQUIRE(tls::apply_profile(ctx.get(), error));
  CAF_CHECK_EQUAL(SSL_CTX_get_min_proto_version(ctx.get()), TLS1_3_VERSION);
  CAF_CHECK(!offers(ctx.get(), "ECDHE-ECDSA-AES128-GCM-SHA256"));
  check_keeps_to_profile(ctx.get());
}

CAF_TEST(the profile on a connection replaces the list its context got after
           ours) {
  // What libcaf_openssl does: its own list after we had our say.
  ctx_ptr ctx{SSL_CTX_new(TLS_method())};
  std::string error;
  CAF_REQUIRE(tls::apply_profile(ctx.get(), error));
  CAF_REQUIRE_EQUAL(SSL_CTX_set_cipher_list(ctx.get(), "HIGH:!aNULL:!MD5"), 1);
  CAF_CHECK(!test::offer_violations(ctx.get()).empty());
  auto ssl = SSL_new(ctx.get());
  CAF_REQUIRE(ssl != nullptr);
  CAF_CHECK(tls::apply_profile(ssl, error));
  auto breaches = test::offer_violations(ssl);
  for (auto& x : breaches)
    CAF_MESSAGE("breach: " << x);
  CAF_CHECK(breaches.empty());
  SSL_free(ssl);
}
