#include "http/upstream_tls.hpp"
#include "common/tls_profile.hpp"
#include "http/tls_support.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>

namespace oncegate::gateway {

namespace ssl = boost::asio::ssl;

using detail::openssl_reason;

namespace {

// Whether `path` opens for reading; sets `error` to why not. OpenSSL's own
// message for a missing file ("system lib") says less than errno.
bool readable(const std::string& path, std::string& error) {
  std::ifstream in{path, std::ios::binary};
  if (in)
    return true;
  error = "cannot read " + path + ": " + std::strerror(errno);
  return false;
}

} // namespace

upstream_tls::upstream_tls(upstream_tls_files files,
                           std::unique_ptr<ssl::context> ctx)
  : files_(std::move(files)), ctx_(std::move(ctx)) {
  // nop
}

upstream_tls::~upstream_tls() {
  // nop
}

std::shared_ptr<const upstream_tls>
upstream_tls::make(const upstream_tls_files& files, std::string& error,
                   upstream_tls_files::part& culprit) {
  using part = upstream_tls_files::part;
  ERR_clear_error();
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
  auto native = ctx->native_handle();
  // Protocol versions, cipher suites, groups, renegotiation: the one
  // profile of every TLS context we make. An upstream that speaks only
  // CBC suites (or TLS 1.1) fails the handshake: not sent.
  culprit = part::ca_file;
  if (!tls::apply_profile(native, error))
    return nullptr;
  // No callback: OpenSSL's verdict (chain, validity, the host name set per
  // connection) stands, and any failure ends the handshake.
  SSL_CTX_set_verify(native, SSL_VERIFY_PEER, nullptr);
  // A pooled connection lives as long as the pool keeps it: sessions are
  // not resumed, so there is no ticket to keep (and no 0-RTT data, which
  // an attacker could replay: the opposite of idempotency).
  SSL_CTX_set_session_cache_mode(native, SSL_SESS_CACHE_OFF);
  if (files.ca_file.empty()) {
    if (SSL_CTX_set_default_verify_paths(native) != 1) {
      culprit = part::ca_file;
      error = "cannot load the system CA store: " + openssl_reason();
      return nullptr;
    }
  } else {
    culprit = part::ca_file;
    if (!readable(files.ca_file, error))
      return nullptr;
    if (SSL_CTX_load_verify_locations(native, files.ca_file.c_str(), nullptr)
        != 1) {
      error = "cannot load CA certificates from " + files.ca_file + ": "
              + openssl_reason();
      return nullptr;
    }
  }
  if (!files.client_cert.empty()) {
    culprit = part::client_cert;
    if (!readable(files.client_cert, error))
      return nullptr;
    if (SSL_CTX_use_certificate_chain_file(native, files.client_cert.c_str())
        != 1) {
      error = "cannot load a certificate chain from " + files.client_cert
              + ": " + openssl_reason();
      return nullptr;
    }
  }
  if (!files.client_key.empty()) {
    culprit = part::client_key;
    if (!readable(files.client_key, error))
      return nullptr;
    if (SSL_CTX_use_PrivateKey_file(native, files.client_key.c_str(),
                                    SSL_FILETYPE_PEM)
        != 1) {
      // OpenSSL checks the key against the certificate as it loads it.
      unsigned long code = 0;
      auto reason = openssl_reason(&code);
      if (ERR_GET_LIB(code) == ERR_LIB_X509
          && ERR_GET_REASON(code) == X509_R_KEY_VALUES_MISMATCH)
        error = files.client_key + " is not the key of " + files.client_cert;
      else
        error = "cannot load a private key from " + files.client_key + ": "
                + reason;
      return nullptr;
    }
    if (SSL_CTX_check_private_key(native) != 1) {
      error = files.client_key + " is not the key of " + files.client_cert
              + ": " + openssl_reason();
      return nullptr;
    }
  }
  return std::shared_ptr<const upstream_tls>{
    new upstream_tls(files, std::move(ctx))};
}

namespace detail {

bool prepare_tls_client(ssl_st* ssl, const std::string& host,
                        std::string& error) {
  ERR_clear_error();
  boost::system::error_code not_ip;
  boost::asio::ip::make_address(host, not_ip);
  if (!not_ip) {
    // An address in the URL: the certificate must name it (an IP
    // subjectAltName); no SNI.
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str())
        != 1) {
      error = "cannot verify the address " + host + ": " + openssl_reason();
      return false;
    }
    return true;
  }
  if (SSL_set_tlsext_host_name(ssl, host.c_str()) != 1) {
    error = "cannot send the server name " + host + ": " + openssl_reason();
    return false;
  }
  // `*.example.com` matches `a.example.com`, never `a*.example.com`
  // patterns or more than one label.
  SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  if (SSL_set1_host(ssl, host.c_str()) != 1) {
    error = "cannot verify the name " + host + ": " + openssl_reason();
    return false;
  }
  return true;
}

std::string describe_tls_error(const boost::system::error_code& ec,
                               ssl_st* ssl) {
  if (ec == boost::beast::error::timeout)
    return "timeout";
  if (ec == ssl::error::stream_truncated)
    return "connection closed without a TLS close_notify";
  if (ec.category() != boost::asio::error::get_ssl_category())
    return ec.message();
  // Asio's message appends the library ("(SSL routines)"), which says
  // nothing here; the verification result says what was wrong with the
  // certificate.
  auto code = static_cast<unsigned long>(ec.value());
  auto reason = ERR_reason_error_string(code);
  std::string res = reason ? reason : ec.message();
  if (ssl != nullptr && ERR_GET_REASON(code) == SSL_R_CERTIFICATE_VERIFY_FAILED) {
    auto result = SSL_get_verify_result(ssl);
    if (result != X509_V_OK) {
      res += " (";
      res += X509_verify_cert_error_string(result);
      res += ')';
    }
  }
  return res;
}

} // namespace detail

} // namespace oncegate::gateway
