#pragma once

// A TLS upstream for the upstream client's tests: a blocking OpenSSL
// server on 127.0.0.1 (port 0), one thread per connection, that counts
// handshakes and requests; and the certificates it and the client use,
// made with the openssl CLI in a temporary directory.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct ssl_ctx_st;

namespace oncegate::test {

/// PEM files made once per process (EC P-256, valid for two days) and
/// removed at exit.
struct test_certs {
  std::string dir;
  /// The CA the client trusts, and its key.
  std::string ca, ca_key;
  /// Signed by `ca`, for DNS:localhost and IP:127.0.0.1.
  std::string server, server_key;
  /// Signed by `ca`, for DNS:wrong.example only.
  std::string wrong_name, wrong_name_key;
  /// A CA nobody trusts, and a certificate for localhost / 127.0.0.1
  /// signed by it.
  std::string other_ca, stranger, stranger_key;
  /// A client certificate (clientAuth) signed by `ca`.
  std::string client, client_key;

  /// The files, made on first use.
  static const test_certs& get();
};

struct tls_server_options {
  /// Certificate and key; both empty: plain HTTP (for comparisons).
  std::string cert;
  std::string key;
  /// Non-empty: a client certificate from this CA is required.
  std::string client_ca;
  /// TLS1_2_VERSION caps the server at TLS 1.2; 0: the library's highest.
  int max_version = 0;
  enum class mode {
    /// 200 `ok <Idempotency-Key>`, kept alive.
    answer,
    /// Reads the request and closes the connection without an answer.
    close_after_request,
    /// Reads the request's head and closes the connection with the body
    /// unread (the kernel resets it).
    close_after_head,
    /// Answers (kept alive by its headers), then sends close_notify and
    /// closes.
    close_after_answer,
  };
  mode what = mode::answer;
};

/// The server. Every count is over all connections so far.
class tls_server {
public:
  explicit tls_server(tls_server_options opts);
  ~tls_server();

  tls_server(const tls_server&) = delete;
  tls_server& operator=(const tls_server&) = delete;

  uint16_t port() const {
    return port_;
  }

  /// TCP connections accepted.
  int connections() const {
    return connections_;
  }

  /// Handshakes completed, and failed (with OpenSSL's reason).
  int handshakes() const {
    return handshakes_;
  }
  int failed_handshakes() const {
    return failed_;
  }

  /// Complete requests read.
  int requests() const {
    return requests_;
  }

  /// The server name (SNI) of every completed handshake, "" for none.
  std::vector<std::string> server_names() const;

  /// The reason of every failed handshake.
  std::vector<std::string> failures() const;

  /// Waits (bounded, 10 s) until `n` connections were closed by the server
  /// (after their last write).
  bool wait_closed(int n);

private:
  void accept_loop();
  void serve(int fd);

  tls_server_options opts_;
  ssl_ctx_st* ctx_ = nullptr;
  int listener_ = -1;
  int stop_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::atomic<int> connections_{0};
  std::atomic<int> handshakes_{0};
  std::atomic<int> failed_{0};
  std::atomic<int> requests_{0};
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  int closed_ = 0;
  std::vector<int> fds_;
  std::vector<std::string> names_;
  std::vector<std::string> failures_;
  std::vector<std::thread> workers_;
  std::thread acceptor_;
};

/// A listener that never accepts: the kernel completes connects to it,
/// and nobody ever answers a byte (a TLS handshake there times out).
class silent_listener {
public:
  silent_listener();
  ~silent_listener();

  uint16_t port() const {
    return port_;
  }

private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

} // namespace oncegate::test
