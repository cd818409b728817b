#include "link/link_impl.hpp"

// The TLS context of the node link (see link_impl.hpp): this node's
// certificate, key and the cluster CA read and checked at start (errors
// name the option's file and the reason), mutual TLS with the one profile
// of every TLS context oncegate makes.

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "common/tls_profile.hpp"
#include "link/tls_identity.hpp"

namespace oncegate::link::detail {

namespace {

// Fails with `error` set unless `path` names a readable regular file.
bool readable(const char* what, const std::string& path, std::string& error) {
  if (path.empty()) {
    error = std::string{what} + " is not set";
    return false;
  }
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    error = std::string{what} + " " + path + ": "
            + (ec ? ec.message() : "no such file");
    return false;
  }
  if (!std::filesystem::is_regular_file(st)) {
    error = std::string{what} + " " + path + ": not a regular file";
    return false;
  }
  auto f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    error = std::string{what} + " " + path + ": " + std::strerror(errno);
    return false;
  }
  std::fclose(f);
  return true;
}

// The message for a certificate that did not load or check (tests and
// operators read the file's option name, its path and the reason).
std::string describe(const tls::identity_failure& why, const tls_files& f) {
  using failure = tls::identity_failure;
  switch (why.step) {
    case failure::ca_unreadable:
    case failure::ca_empty:
      return "ca_file " + f.ca_file + ": no CA certificate loaded: "
             + why.detail;
    case failure::ca_several:
      return "ca_file " + f.ca_file + ": holds more than "
             + std::to_string(tls::max_cluster_cas)
             + " certificates (expected the cluster CA, two while it is "
               "replaced)";
    case failure::ca_not_ca:
      return "ca_file " + f.ca_file + ": holds a certificate that is no CA";
    case failure::cert_unreadable:
    case failure::cert_empty:
      return "cert_file " + f.cert_file + ": no certificate loaded: "
             + why.detail;
    case failure::key_unreadable:
    case failure::key_unusable:
      return "key_file " + f.key_file
             + ": no private key loaded (encrypted keys are not supported): "
             + why.detail;
    case failure::key_mismatch:
      return "key_file " + f.key_file + " does not match cert_file "
             + f.cert_file;
    case failure::untrusted:
      return "cert_file " + f.cert_file + " does not verify against ca_file "
             + f.ca_file + " as a TLS "
             + (why.purpose == tls::tls_purpose::server ? "server" : "client")
             + ": " + why.detail;
    default: // names are checked by iface_init, against raft_init's id
      return "cert_file " + f.cert_file + ": " + why.detail;
  }
}

} // namespace

SSL_CTX* make_context(const tls_files& f, std::string& error) {
  if (!readable("ca_file", f.ca_file, error)
      || !readable("cert_file", f.cert_file, error)
      || !readable("key_file", f.key_file, error))
    return nullptr;
  ERR_clear_error();
  auto ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) {
    error = "SSL_CTX_new: " + tls::openssl_error();
    return nullptr;
  }
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> guard{ctx, SSL_CTX_free};
  if (!tls::apply_profile(ctx, error)) {
    error = "TLS profile: " + error;
    return nullptr;
  }
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  // Every connection is a full handshake: no session state to reason about.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx, 0);
  static const unsigned char sid_ctx[] = "oncegate-link";
  SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof(sid_ctx) - 1);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  // Our own certificate must pass what peers will check, in both roles:
  // better a clear error at start than refusals everywhere later.
  tls::ca_bundle cas;
  tls::node_identity self;
  tls::identity_failure why;
  if (!tls::load_ca(f.ca_file, cas, why)
      || !tls::load_identity({f.cert_file, f.key_file, {}}, cas,
                             {tls::tls_purpose::server,
                              tls::tls_purpose::client},
                             0, self, why)) {
    error = describe(why, f);
    return nullptr;
  }
  ERR_clear_error();
  for (auto& ca : cas) {
    if (X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca.get()) != 1) {
      error = "ca_file " + f.ca_file + ": no CA certificate loaded: "
              + tls::openssl_error();
      return nullptr;
    }
  }
  auto used = SSL_CTX_use_certificate(ctx, self.leaf.get()) == 1;
  for (auto& c : self.chain)
    used = used && SSL_CTX_add1_chain_cert(ctx, c.get()) == 1;
  if (!used) {
    error = "cert_file " + f.cert_file + ": no certificate loaded: "
            + tls::openssl_error();
    return nullptr;
  }
  if (SSL_CTX_use_PrivateKey(ctx, self.key.get()) != 1) {
    error = "key_file " + f.key_file + ": " + tls::openssl_error();
    return nullptr;
  }
  return guard.release();
}

} // namespace oncegate::link::detail
