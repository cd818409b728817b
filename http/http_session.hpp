#pragma once

// @private: one client connection of the HTTP server: reading a request
// under its limits and deadlines, handing it to the handler, writing the
// answer back on the connection's strand. Must not live here: accepting,
// the connection cap and shutdown of the listener (`http/http_server.cpp`),
// anything of what a request means (the handler's).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "http/server_impl.hpp"

namespace oncegate::gateway::detail {

namespace http = beast::http;

/// A connection's phases, each under its own deadline (`arm`):
///
///   idle ──first bytes──> header ──> body ──> handling ──> writing ──┐
///    ^                                                               │
///    └────────────────────────── keep-alive ─────────────────────────┘
///
/// Past the deadline: idle closes, header and body answer 408, handling
/// answers 503, writing closes.
class http_session : public std::enable_shared_from_this<http_session> {
public:
  http_session(std::shared_ptr<http_server::impl> srv, tcp::socket&& sock,
               uint64_t id);

  void start();

  // Called by the server's sweep from another thread: cheap, no syscall.
  bool overdue(int64_t now_ns) const;

  // Runs the timeout on the session's strand if it is still due there.
  void check_deadline();

  static int64_t now_ns();

  // Sends 503 and closes: the connection cap is reached.
  void reject();

  // Server shutdown: idle connections close now, busy ones after their
  // response.
  void shutdown();

private:
  enum class phase { idle, header, body, handling, writing, closed };

  // A connection waits for its next request under the idle timeout; once
  // bytes of a request are seen, the header timeout applies. Beast parses a
  // header only when it is complete, so the first bytes are noticed by the
  // deadline check (see `on_timeout`), which runs every quarter header
  // timeout while the connection is idle.
  void wait_for_request();

  void read_header();

  void on_header(beast::error_code ec);

  void read_body();

  void on_read_error(beast::error_code ec);

  void dispatch_request();

  void write(http_response res);

  void build(http_response res);

  // How often an idle connection is looked at for the first bytes of a
  // request: a request's header timeout starts at most this late.
  std::chrono::milliseconds idle_check() const;

  // Sets the deadline of the current phase. No timer per connection: the
  // server's sweep checks every deadline a few times a second, which costs
  // no syscall per request (an asio timer re-armed per phase did, and its
  // cancelled waits each ran a handler).
  void arm(std::chrono::milliseconds timeout);

  void on_timeout();

  void close();

  std::shared_ptr<http_server::impl> srv_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  std::optional<http::response_serializer<http::string_body>> sr_;
  std::string remote_;
  uint64_t id_;
  uint64_t req_id_ = 0;
  std::atomic<int64_t> deadline_ns_{std::numeric_limits<int64_t>::max()};
  int64_t idle_since_ns_ = 0;
  phase phase_ = phase::idle;
  bool timed_out_ = false;
  bool keep_alive_ = true;
  /// The current response leaves the connection open.
  bool keep_open_ = true;
  /// The current request is a HEAD: headers only.
  bool head_ = false;
  /// HTTP version of the current request (10 or 11).
  unsigned version_ = 11;
};

} // namespace oncegate::gateway::detail
