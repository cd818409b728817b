#pragma once

// The client side of TLS to https upstreams: one OpenSSL context per set of
// files (trust, client certificate), made once when the routes are loaded,
// and what a connection needs from it (SNI, host-name verification, error
// text). The connections themselves are `http/upstream_conn.*`; which
// failure is "not sent" and which "maybe sent" is decided by the exchange
// in `http/upstream_client.cpp`.

#include <memory>
#include <string>
#include <tuple>

#include <boost/system/error_code.hpp>

// OpenSSL and asio's SSL wrapper stay out of this header: it reaches
// api/routes.hpp and everything above it.
namespace boost::asio::ssl {
class context;
} // namespace boost::asio::ssl

struct ssl_st;

namespace oncegate::gateway {

/// The files an upstream TLS context is made of (PEM).
struct upstream_tls_files {
  /// CA certificates trusted instead of the system store; empty: the
  /// system store (OpenSSL's default verify paths).
  std::string ca_file;
  /// Certificate chain (leaf first) and key presented to an upstream that
  /// asks for one (mTLS); both or neither.
  std::string client_cert;
  std::string client_key;

  /// Which of the files a load failure is about.
  enum class part { ca_file, client_cert, client_key };

  std::string& file(part x) {
    return x == part::ca_file       ? ca_file
           : x == part::client_cert ? client_cert
                                    : client_key;
  }

  friend bool operator<(const upstream_tls_files& x,
                        const upstream_tls_files& y) {
    return std::tie(x.ca_file, x.client_cert, x.client_key)
           < std::tie(y.ca_file, y.client_cert, y.client_key);
  }
};

/// A client TLS context: the TLS profile (common/tls_profile.hpp: TLS 1.2
/// at least, AEAD suites only), the peer's certificate verified
/// against the trusted CAs, an optional client certificate. Immutable once
/// made and shared by every connection that uses the same files; only the
/// upstream client's thread makes connections from it.
class upstream_tls {
public:
  ~upstream_tls();

  upstream_tls(const upstream_tls&) = delete;
  upstream_tls& operator=(const upstream_tls&) = delete;

  /// Loads `files` into a new context; on failure returns null, sets
  /// `error` to what went wrong naming the file (e.g. `cannot load CA
  /// certificates from /etc/x.pem: no certificate or crl found`) and
  /// `culprit` to the file it is about.
  static std::shared_ptr<const upstream_tls>
  make(const upstream_tls_files& files, std::string& error,
       upstream_tls_files::part& culprit);

  const upstream_tls_files& files() const {
    return files_;
  }

  /// The context new connections are made from (asio wants it mutable;
  /// nothing changes it after `make`).
  boost::asio::ssl::context& context() const {
    return *ctx_;
  }

private:
  upstream_tls(upstream_tls_files files,
               std::unique_ptr<boost::asio::ssl::context> ctx);

  upstream_tls_files files_;
  std::unique_ptr<boost::asio::ssl::context> ctx_;
};

namespace detail {

/// Prepares a new client connection to `host` before its handshake: SNI
/// (for a DNS name; RFC 6066 has none for addresses) and the name or
/// address the certificate must carry. False, with `error`, when OpenSSL
/// refuses the name.
bool prepare_tls_client(ssl_st* ssl, const std::string& host,
                        std::string& error);

/// What a TLS-level failure on `ssl` was, for logs and problem details:
/// OpenSSL's reason with the verification result when the certificate was
/// refused (`certificate verify failed (hostname mismatch)`), the alert
/// the upstream sent (`tlsv13 alert certificate required`), or the plain
/// message of a transport error.
std::string describe_tls_error(const boost::system::error_code& ec,
                               ssl_st* ssl);

} // namespace detail

} // namespace oncegate::gateway
