#pragma once

// One connection of the upstream client's pool, plain or TLS over one TCP
// stream: the writes and reads an exchange makes on it, the check that it
// is quiet before it carries a request, and closing it. Internal to the
// upstream client (`http/upstream_client.cpp`), which decides what a
// failure on it means.

#include <cstddef>
#include <memory>
#include <utility>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "http/upstream_tls.hpp"

namespace oncegate::gateway::detail {

/// What a connection holds while nothing is asked of it.
enum class idle_state {
  /// Open, nothing to read: the only state in which a request may go out.
  quiet,
  /// EOF or a socket error: the peer closed it.
  closed,
  /// Unread bytes on a plain connection: an answer to no request of ours,
  /// out of sync.
  unsolicited,
  /// Unread TLS records (at the socket or buffered by OpenSSL): most
  /// likely the upstream's close_notify before it closes an idle
  /// connection, possibly anything; unreadable without reading them, so
  /// never taken for an answer either.
  tls_records,
};

/// The TCP stream under a TLS connection, counting the bytes the kernel
/// took. A TLS write that fails reports no count of what went out, and
/// whether any byte of a request left is what tells "not sent" from "maybe
/// sent". Otherwise the TCP stream itself (its deadlines, its socket).
class counting_stream {
public:
  using executor_type = boost::beast::tcp_stream::executor_type;
  using lowest_layer_type = boost::beast::tcp_stream::socket_type;

  explicit counting_stream(boost::asio::io_context& ioc) : next_(ioc) {
    // nop
  }

  executor_type get_executor() noexcept {
    return next_.get_executor();
  }

  lowest_layer_type& lowest_layer() noexcept {
    return next_.socket();
  }

  boost::beast::tcp_stream& next_layer() noexcept {
    return next_;
  }

  /// Bytes the kernel took so far, handshakes included.
  std::size_t written() const noexcept {
    return written_;
  }

  template <class MutableBuffers, class Handler>
  void async_read_some(const MutableBuffers& buffers, Handler&& handler) {
    next_.async_read_some(buffers, std::forward<Handler>(handler));
  }

  template <class ConstBuffers, class Handler>
  void async_write_some(const ConstBuffers& buffers, Handler&& handler) {
    // Completes on the stream's executor, as the wrapped handler would
    // (asio's TLS operations carry no executor of their own here).
    next_.async_write_some(
      buffers, [this, h = std::forward<Handler>(handler)](
                 boost::beast::error_code ec, std::size_t n) mutable {
        written_ += n;
        h(ec, n);
      });
  }

private:
  boost::beast::tcp_stream next_;
  std::size_t written_ = 0;
};

class upstream_conn {
public:
  using tls_stream = boost::beast::ssl_stream<counting_stream>;

  /// A plain connection, not yet connected.
  explicit upstream_conn(boost::asio::io_context& ioc);

  /// A TLS connection from the context of `tls`, not yet connected; its
  /// handshake is the exchange's to make (see `tls`).
  upstream_conn(boost::asio::io_context& ioc, const upstream_tls& tls);

  upstream_conn(const upstream_conn&) = delete;
  upstream_conn& operator=(const upstream_conn&) = delete;

  /// The TCP stream below (the deadlines, the socket).
  boost::beast::tcp_stream& tcp() {
    return tls_ ? tls_->next_layer().next_layer() : *plain_;
  }

  /// Bytes of TLS records (handshakes included) the kernel took so far; 0
  /// for a plain connection.
  std::size_t tls_written() const {
    return tls_ ? tls_->next_layer().written() : 0;
  }

  /// The TLS stream, or null for a plain connection.
  tls_stream* tls() {
    return tls_.get();
  }

  /// Non-blocking, reads nothing: whether the upstream sent anything or
  /// closed since the last read.
  idle_state probe();

  /// Acknowledges what was read now (TCP_QUICKACK; see the .cpp).
  void ack_now();

  /// Sends small writes at once (TCP_NODELAY): over TLS the request follows
  /// the handshake's last flight, which Nagle would hold it behind.
  void no_delay();

  /// Closes the socket; pending operations end with an error.
  void close();

  /// Writes some of `buf`: as is (plain) or as TLS records.
  template <class Handler>
  void async_write_some(boost::asio::const_buffer buf, Handler handler) {
    if (tls_)
      tls_->async_write_some(buf, std::move(handler));
    else
      plain_->async_write_some(buf, std::move(handler));
  }

  /// Reads one HTTP message into `parser`, keeping what follows it in
  /// `buffer`.
  template <class Parser, class Handler>
  void async_read(boost::beast::flat_buffer& buffer, Parser& parser,
                  Handler handler) {
    if (tls_)
      boost::beast::http::async_read(*tls_, buffer, parser,
                                     std::move(handler));
    else
      boost::beast::http::async_read(*plain_, buffer, parser,
                                     std::move(handler));
  }

private:
  std::unique_ptr<boost::beast::tcp_stream> plain_;
  std::unique_ptr<tls_stream> tls_;
};

} // namespace oncegate::gateway::detail
