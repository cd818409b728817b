#pragma once

// The server side of TLS on the HTTP listener: one OpenSSL context made
// from a certificate chain and its key (PEM, e.g. certbot's fullchain.pem
// and privkey.pem). Each load makes a new, immutable context; a reload
// (SIGHUP, `http_server::reload_tls`) swaps which one new connections are
// made from, while open connections keep the one they started with. The
// connections themselves are `http/http_session.*`.

#include <cstddef>
#include <memory>
#include <string>

// OpenSSL and asio's SSL wrapper stay out of this header: it reaches
// http_server.hpp and everything above it.
namespace boost::asio::ssl {
class context;
} // namespace boost::asio::ssl

namespace oncegate::gateway {

/// The files the listener's TLS context is made of (PEM).
struct server_tls_files {
  /// The certificate chain, leaf first (certbot: `fullchain.pem`).
  std::string certificate;
  /// The leaf's private key, unencrypted (certbot: `privkey.pem`).
  std::string key;

  /// Which of the files a load failure is about.
  enum class part { certificate, key };
};

/// A server TLS context: the TLS profile (common/tls_profile.hpp: TLS 1.2
/// at least, AEAD suites only, the client's preference, no renegotiation,
/// no compression), ALPN `http/1.1`. Immutable once made; shared by the
/// connections made from it, each of which keeps it alive.
class server_tls {
public:
  /// Largest certificate or key file read: they come from outside.
  static constexpr std::size_t max_file_bytes = 1024 * 1024;

  ~server_tls();

  server_tls(const server_tls&) = delete;
  server_tls& operator=(const server_tls&) = delete;

  /// Reads `files` (each at most `max_file_bytes`) into a new context. On
  /// failure returns null, sets `error` to what went wrong naming the file
  /// (`cannot read /etc/x.pem: No such file or directory`, `no PEM
  /// certificate in /etc/x.pem`, `/etc/k.pem is not the key of /etc/x.pem`)
  /// and `culprit` to the file it is about. Never prompts for a passphrase:
  /// an encrypted key is refused.
  static std::shared_ptr<const server_tls> load(const server_tls_files& files,
                                                std::string& error,
                                                server_tls_files::part& culprit);

  const server_tls_files& files() const {
    return files_;
  }

  /// The leaf certificate's serial number (upper-case hex) and the end of
  /// its validity (`2026-11-30T05:39:41Z`), for log lines.
  const std::string& serial() const {
    return serial_;
  }
  const std::string& not_after() const {
    return not_after_;
  }

  /// Whether the leaf certificate's validity ended (or has not begun) at
  /// load time: served anyway, and warned about.
  bool out_of_validity() const {
    return out_of_validity_;
  }

  /// The context new connections are made from (asio wants it mutable;
  /// nothing changes it after `load`).
  boost::asio::ssl::context& context() const {
    return *ctx_;
  }

private:
  server_tls(server_tls_files files,
             std::unique_ptr<boost::asio::ssl::context> ctx);

  server_tls_files files_;
  std::unique_ptr<boost::asio::ssl::context> ctx_;
  std::string serial_;
  std::string not_after_;
  bool out_of_validity_ = false;
};

} // namespace oncegate::gateway
