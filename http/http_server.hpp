#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "http/http_types.hpp"

namespace oncegate::gateway {

class server_tls;

/// Limits and addresses of the HTTP listener. Every limit is explicit.
struct http_server_options {
  std::string host = "127.0.0.1";
  /// 0 picks a free port (see `http_server::port`).
  uint16_t port = 8080;
  /// Threads running the asio event loop.
  unsigned threads = 1;
  /// Largest request body, also when chunked; beyond: 413 and close.
  std::size_t body_limit = 64 * 1024;
  /// Largest request header block; beyond: 431 and close.
  std::size_t header_limit = 16 * 1024;
  /// From the first byte of a request to its last header byte; beyond: 408.
  std::chrono::milliseconds header_timeout{5000};
  /// From the end of the headers to the end of the body; beyond: 408.
  std::chrono::milliseconds body_timeout{5000};
  /// Keep-alive connection with no request for this long is closed.
  std::chrono::milliseconds idle_timeout{60000};
  /// From a complete request to its response being written; beyond: 503.
  std::chrono::milliseconds response_timeout{10000};
  /// Open connections at most; beyond, new ones get 503 and are closed.
  /// `listen` lowers it when the descriptor limit cannot fit it (see
  /// `fd_reserve`).
  std::size_t max_connections = 10000;
  /// Descriptors kept for everything but client connections (SQLite files,
  /// logs, Raft, upstream pools: add each upstream's connection cap). At
  /// `listen`, a soft RLIMIT_NOFILE below `max_connections + fd_reserve` is
  /// raised up to the hard limit; if that is still too small, the
  /// connection cap is lowered to fit, with a warning.
  std::size_t fd_reserve = 64;
  /// Longest wait for in-flight requests on shutdown.
  std::chrono::milliseconds shutdown_grace{10000};
  /// HTTPS on the listener with this context (`server_tls::load`); null:
  /// plain HTTP. `reload_tls` replaces it for new connections.
  std::shared_ptr<const server_tls> tls;
  /// From accept to the end of the TLS handshake; beyond: closed. The
  /// handshake counts against `max_connections` like any connection.
  std::chrono::milliseconds tls_handshake_timeout{5000};
  /// Called on each event-loop thread before it serves, with a way to queue
  /// work on the loop (it runs after the handler running now returns, on
  /// one of the loop's threads); `on_loop_end` on the same thread once its
  /// loop stopped. The node runs the actors its requests wake this way
  /// (common/inline_execution.hpp). Empty: nothing.
  std::function<void(std::function<void(std::function<void()>)>)>
    on_loop_start;
  std::function<void()> on_loop_end;
  /// With one loop thread: a job queued that way which has run this long
  /// (a commit on the asking thread stalled by its disk) gets a second
  /// thread to serve the loop until it returns, one handler at a time, so
  /// that other requests, probes and timeouts are still answered. Checked
  /// every `stall_rescue` by a thread that does nothing else. 0: never.
  std::chrono::milliseconds stall_rescue{20};
};

/// An asynchronous HTTP/1.1 server (Boost.Beast). It never blocks its
/// threads: each complete request goes to the handler, whose answer is
/// posted back onto the connection's strand.
class http_server {
public:
  /// Binds and listens. On failure returns null and sets `error`.
  static std::unique_ptr<http_server> listen(const http_server_options& opts,
                                             request_handler& handler,
                                             std::string& error);

  ~http_server();

  /// The bound port.
  uint16_t port() const;

  /// The effective connection cap (`max_connections`, or less when the
  /// descriptor limit could not fit it).
  std::size_t max_connections() const;

  /// Whether the listener speaks HTTPS.
  bool tls() const;

  /// Catches signals from now on: SIGINT and SIGTERM stop the server,
  /// SIGHUP reloads its TLS files (`reload_tls`; logged and ignored without
  /// TLS). Call before announcing readiness, so that no signal sent after
  /// it meets the default action; `run(true)` calls it if nobody did.
  void handle_signals();

  /// Re-reads the certificate and key files into a new TLS context: new
  /// connections use it, open ones keep theirs. When the files do not load
  /// (or the listener has no TLS) the current context stays; returns false
  /// with `error` saying why. Logged either way. Thread-safe.
  bool reload_tls(std::string& error);

  /// Serves until `stop` (or SIGINT/SIGTERM when `handle_signals`), using
  /// `threads` threads including the caller; returns once every connection
  /// closed or the shutdown grace ran out.
  void run(bool handle_signals);

  /// Stops accepting, lets in-flight requests finish, closes idle
  /// connections. Thread-safe, idempotent.
  void stop();

  /// @private: shared with the connection sessions of the implementation.
  struct impl;

private:
  explicit http_server(std::shared_ptr<impl> ptr);
  std::shared_ptr<impl> impl_;
};

/// Transport events of every server in the process, for `/metrics`.
struct http_transport_counters {
  /// Requests answered 500 because the handler threw or its answer could
  /// not be serialised (a bug: see `http.internal_error` in the log).
  uint64_t internal_errors = 0;
  /// Failed `accept` calls (out of descriptors and similar).
  uint64_t accept_errors = 0;
};

/// Returns the current counts.
http_transport_counters transport_counters();

/// The connection cap that fits `nofile` descriptors: `wanted` when
/// `wanted + reserve` fit, else what the reserve leaves, else (not even the
/// reserve fits) half of them, at least one.
std::size_t fitting_connections(std::size_t wanted, std::size_t reserve,
                                std::uint64_t nofile);

} // namespace oncegate::gateway
