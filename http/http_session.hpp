#pragma once

// @private: one client connection of the HTTP server: reading a request
// under its limits and deadlines, handing it to the handler, writing the
// answer back on the connection's strand; over TLS, the handshake first.
// Must not live here: accepting, the connection cap and shutdown of the
// listener (`http/http_server.cpp`), the TLS context and its reload
// (`http/server_tls.*`), anything of what a request means (the handler's).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "http/request_reader.hpp"
#include "http/server_impl.hpp"

namespace oncegate::gateway::detail {

namespace http = beast::http;

/// What the listener needs of every connection, whatever its stream: the
/// sweep's deadline check, start and shutdown. Virtual calls happen only
/// there (once per connection, or when a deadline is due), never per byte:
/// the reading and writing are the stream's own type's
/// (`http_session<Stream>`).
class session_base {
public:
  virtual ~session_base() = default;

  /// Begins serving: over TLS the handshake, then requests.
  virtual void start() = 0;

  /// Sends 503 and closes: the connection cap is reached (over TLS after
  /// the handshake, so that the client can read it).
  virtual void reject() = 0;

  /// Runs the timeout on the session's strand if it is still due there.
  virtual void check_deadline() = 0;

  /// Server shutdown: idle connections close now, busy ones after their
  /// response.
  virtual void shutdown() = 0;

  /// Called by the server's sweep from another thread: cheap, no syscall.
  bool overdue(int64_t now_ns) const {
    return deadline_ns_.load(std::memory_order_relaxed) <= now_ns;
  }

  static int64_t now_ns();

protected:
  std::atomic<int64_t> deadline_ns_{std::numeric_limits<int64_t>::max()};
};

/// A new connection on `sock`: plain HTTP when `tls` is null, else HTTPS
/// made from that context, which the connection keeps alive (a reload does
/// not change it). Not started yet.
std::shared_ptr<session_base>
make_session(std::shared_ptr<http_server::impl> srv, tcp::socket&& sock,
             uint64_t id, std::shared_ptr<const server_tls> tls);

/// A connection's phases, each under its own deadline (`arm`):
///
///   (TLS: handshake) ──> idle ──first bytes──> header ──> body ──>
///      handling ──> writing ──┬── keep-alive ──> idle
///                             └── (TLS: closing, close_notify) ──> closed
///
/// Past the deadline: handshake, idle and closing close, header and body
/// answer 408, handling answers 503, writing closes.
///
/// `Stream` is `beast::tcp_stream` (plain) or
/// `beast::ssl_stream<beast::tcp_stream>` (TLS); both are instantiated in
/// `http_session.cpp` only. The plain one has no TLS step at all.
template <class Stream>
class http_session : public session_base,
                     public std::enable_shared_from_this<http_session<Stream>> {
public:
  static constexpr bool is_tls = !std::is_same_v<Stream, beast::tcp_stream>;

  http_session(std::shared_ptr<http_server::impl> srv, tcp::socket&& sock,
               uint64_t id, std::shared_ptr<const server_tls> tls);

  void start() override;

  void reject() override;

  void check_deadline() override;

  void shutdown() override;

private:
  enum class phase {
    handshake,
    idle,
    header,
    body,
    handling,
    writing,
    closing,
    closed
  };

  tcp::socket& socket() {
    return beast::get_lowest_layer(stream_).socket();
  }

  // TLS only: waits for the client's first byte. A TLS record starts the
  // handshake; anything else is plain HTTP sent to the HTTPS port, which
  // gets a plain 400 (`refuse_plain`) instead of a failed handshake.
  void await_client_hello();

  void handshake();

  void refuse_plain();

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

  // After the last response: over TLS a close_notify first (bounded by the
  // closing deadline), then `close`.
  void finish();

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
  /// The TLS context `stream_` was made from (null: plain): declared
  /// before it, so that it outlives the stream.
  std::shared_ptr<const server_tls> tls_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<request_reader> parser_;
  /// The current answer: its header block (the buffer is reused from
  /// answer to answer) and its body.
  std::string head_block_;
  std::string body_;
  bool send_body_ = false;
  std::string remote_;
  /// The current request's answer on a response timeout.
  std::shared_ptr<response_deadline> deadline_;
  uint64_t id_;
  uint64_t req_id_ = 0;
  int64_t idle_since_ns_ = 0;
  phase phase_ = phase::idle;
  bool timed_out_ = false;
  bool keep_alive_ = true;
  /// The current response leaves the connection open.
  bool keep_open_ = true;
  /// The current request is a HEAD: headers only.
  bool head_ = false;
  /// TLS: the connection is over the cap; answer 503 after the handshake.
  bool over_cap_ = false;
  /// HTTP version of the current request (10 or 11).
  unsigned version_ = 11;
};

} // namespace oncegate::gateway::detail
