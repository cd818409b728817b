#pragma once

// What a TLS context of ours offers (a client) or accepts (a server),
// checked against Mozilla's "intermediate" profile: TLS 1.2 at least, only
// AEAD suites with forward secrecy, each one named in Mozilla's list, and
// the client's cipher preference. The names are written out here from
// Mozilla's page, not read from common/tls_profile.hpp: a test that asked
// the product what is allowed would prove nothing.

#include <openssl/objects.h>
#include <openssl/ssl.h>

#include <set>
#include <string>
#include <vector>

namespace oncegate::test {

/// Mozilla's intermediate list (Server Side TLS 5.7): the TLS 1.2 suites,
/// then TLS 1.3's.
inline const std::set<std::string>& mozilla_intermediate_suites() {
  static const std::set<std::string> names{
    "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
    "DHE-RSA-AES128-GCM-SHA256",     "DHE-RSA-AES256-GCM-SHA384",
    "TLS_AES_128_GCM_SHA256",        "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256"};
  return names;
}

/// What one connection made from a context of ours would offer or accept
/// against the profile, one line per breach (`ECDHE-ECDSA-AES128-SHA: not
/// AEAD`); empty when it keeps to it. The suites are OpenSSL's own answer
/// (SSL_get1_supported_ciphers: the list after the protocol versions the
/// connection may use and the security level are applied).
inline std::vector<std::string> offer_violations(SSL* ssl) {
  std::vector<std::string> res;
  auto floor = SSL_get_min_proto_version(ssl);
  if (floor == 0 || floor < TLS1_2_VERSION)
    res.push_back("protocol floor below TLS 1.2 (" + std::to_string(floor)
                  + ")");
  if ((SSL_get_options(ssl) & SSL_OP_CIPHER_SERVER_PREFERENCE) != 0)
    res.push_back("server cipher preference (Mozilla: the client chooses)");
  auto suites = SSL_get1_supported_ciphers(ssl);
  if (suites == nullptr || sk_SSL_CIPHER_num(suites) == 0)
    res.push_back("no cipher suite at all");
  for (int i = 0; suites != nullptr && i < sk_SSL_CIPHER_num(suites); ++i) {
    auto c = sk_SSL_CIPHER_value(suites, i);
    std::string name = SSL_CIPHER_get_name(c);
    if (SSL_CIPHER_is_aead(c) != 1)
      res.push_back(name + ": not AEAD (CBC, MAC "
                    + OBJ_nid2sn(SSL_CIPHER_get_digest_nid(c)) + ")");
    auto kx = SSL_CIPHER_get_kx_nid(c);
    if (kx == NID_kx_rsa)
      res.push_back(name + ": RSA key exchange (no forward secrecy)");
    else if (kx != NID_kx_ecdhe && kx != NID_kx_dhe && kx != NID_kx_any)
      res.push_back(name + ": key exchange " + OBJ_nid2sn(kx));
    if (mozilla_intermediate_suites().count(name) == 0)
      res.push_back(name + ": not in Mozilla's intermediate list");
  }
  sk_SSL_CIPHER_free(suites);
  return res;
}

/// The same for a connection made from `ctx` now.
inline std::vector<std::string> offer_violations(SSL_CTX* ctx) {
  auto ssl = SSL_new(ctx);
  if (ssl == nullptr)
    return {"SSL_new failed"};
  auto res = offer_violations(ssl);
  SSL_free(ssl);
  return res;
}

/// The suites a connection made from `ctx` would offer, for messages.
inline std::string offered_suites(SSL_CTX* ctx) {
  std::string res;
  auto ssl = SSL_new(ctx);
  if (ssl == nullptr)
    return res;
  auto suites = SSL_get1_supported_ciphers(ssl);
  for (int i = 0; suites != nullptr && i < sk_SSL_CIPHER_num(suites); ++i) {
    if (!res.empty())
      res += ':';
    res += SSL_CIPHER_get_name(sk_SSL_CIPHER_value(suites, i));
  }
  sk_SSL_CIPHER_free(suites);
  SSL_free(ssl);
  return res;
}

} // namespace oncegate::test
