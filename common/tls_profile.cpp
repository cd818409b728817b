#include "common/tls_profile.hpp"

#include <cstdint>

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace oncegate::tls {

const char* const profile_tls12_ciphers
  = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

const char* const profile_tls13_ciphersuites
  = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
    "TLS_CHACHA20_POLY1305_SHA256";

const char* const profile_groups = "X25519:prime256v1:secp384r1";

namespace {

// OpenSSL's reason for the oldest error on the queue, the queue emptied.
std::string reason() {
  auto code = ERR_get_error();
  std::string res;
  if (code == 0) {
    res = "unknown error";
  } else if (auto text = ERR_reason_error_string(code)) {
    res = text;
  } else {
    res = "error " + std::to_string(ERR_GET_REASON(code));
  }
  ERR_clear_error();
  return res;
}

// One body for both overloads: OpenSSL has an SSL_CTX_ and an SSL_ call
// for each setting, and `Ops` names them.
template <class Ops, class T>
bool apply(T* x, std::string& error) {
  ERR_clear_error();
  // 0 is "no floor": SSL 3.0 and up, as far as the library goes.
  auto floor = Ops::get_min(x);
  if ((floor == 0 || floor < TLS1_2_VERSION)
      && Ops::set_min(x, TLS1_2_VERSION) != 1) {
    error = "cannot set the TLS 1.2 floor: " + reason();
    return false;
  }
  if (Ops::set_cipher_list(x, profile_tls12_ciphers) != 1) {
    error = "cannot set the TLS 1.2 cipher suites: " + reason();
    return false;
  }
  if (Ops::set_ciphersuites(x, profile_tls13_ciphersuites) != 1) {
    error = "cannot set the TLS 1.3 cipher suites: " + reason();
    return false;
  }
  if (Ops::set_groups(x, profile_groups) != 1) {
    error = "cannot set the key-exchange groups: " + reason();
    return false;
  }
  // Every suite left is strong: the client picks what it is fastest at.
  // Renegotiation would let a peer restart the handshake in the middle of
  // a connection (TLS 1.3 has none); compression leaks secrets (CRIME).
  Ops::clear_options(x, SSL_OP_CIPHER_SERVER_PREFERENCE);
  Ops::set_options(x, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  return true;
}

struct ctx_ops {
  static int get_min(SSL_CTX* x) {
    return static_cast<int>(SSL_CTX_get_min_proto_version(x));
  }
  static int set_min(SSL_CTX* x, int v) {
    return static_cast<int>(SSL_CTX_set_min_proto_version(x, v));
  }
  static int set_cipher_list(SSL_CTX* x, const char* s) {
    return SSL_CTX_set_cipher_list(x, s);
  }
  static int set_ciphersuites(SSL_CTX* x, const char* s) {
    return SSL_CTX_set_ciphersuites(x, s);
  }
  static int set_groups(SSL_CTX* x, const char* s) {
    return static_cast<int>(SSL_CTX_set1_groups_list(x, s));
  }
  static void clear_options(SSL_CTX* x, uint64_t o) {
    SSL_CTX_clear_options(x, o);
  }
  static void set_options(SSL_CTX* x, uint64_t o) {
    SSL_CTX_set_options(x, o);
  }
};

struct ssl_ops {
  static int get_min(SSL* x) {
    return static_cast<int>(SSL_get_min_proto_version(x));
  }
  static int set_min(SSL* x, int v) {
    return static_cast<int>(SSL_set_min_proto_version(x, v));
  }
  static int set_cipher_list(SSL* x, const char* s) {
    return SSL_set_cipher_list(x, s);
  }
  static int set_ciphersuites(SSL* x, const char* s) {
    return SSL_set_ciphersuites(x, s);
  }
  static int set_groups(SSL* x, const char* s) {
    return static_cast<int>(SSL_set1_groups_list(x, s));
  }
  static void clear_options(SSL* x, uint64_t o) {
    SSL_clear_options(x, o);
  }
  static void set_options(SSL* x, uint64_t o) {
    SSL_set_options(x, o);
  }
};

} // namespace

bool apply_profile(SSL_CTX* ctx, std::string& error) {
  return apply<ctx_ops>(ctx, error);
}

bool apply_profile(SSL* ssl, std::string& error) {
  return apply<ssl_ops>(ssl, error);
}

} // namespace oncegate::tls
