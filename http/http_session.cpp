#include "http/http_session.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "common/logging.hpp"
#include "common/stage_trace.hpp"
#include "http/response_render.hpp"
#include "http/server_tls.hpp"
#include "http/transport_errors.hpp"
#include "http/upstream_tls.hpp"

namespace oncegate::gateway::detail {

namespace {

using plain_stream = beast::tcp_stream;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;

/// A header buffer larger than this is freed after its answer is written.
constexpr std::size_t kept_head_capacity = 4 * 1024;

/// The first byte of every TLS connection: a handshake record (RFC 8446
/// 5.1, the same since SSL 3). A plain HTTP request starts with a letter.
constexpr unsigned char tls_handshake_record = 0x16;

/// How long a close_notify may take after the last response over TLS.
constexpr auto close_notify_wait = std::chrono::milliseconds(1000);

/// The answer to plain HTTP on the HTTPS port, sent in plain text: what
/// nginx does, and more useful to whoever typed `http://` than a reset.
constexpr std::string_view plain_on_tls_answer =
  "HTTP/1.1 400 Bad Request\r\n"
  "Content-Type: application/problem+json\r\n"
  "Cache-Control: no-store\r\n"
  "Connection: close\r\n"
  "Content-Length: 135\r\n"
  "\r\n"
  "{\"type\":\"https://oncegate.dev/problems/bad-request\","
  "\"title\":\"Bad request\",\"status\":400,"
  "\"detail\":\"this port speaks HTTPS: use https://\"}";

static_assert(plain_on_tls_answer.size()
                - plain_on_tls_answer.find("\r\n\r\n") - 4
              == 135);

template <class Stream>
Stream open_stream(tcp::socket&& sock, const server_tls* tls) {
  if constexpr (std::is_same_v<Stream, plain_stream>)
    return Stream{std::move(sock)};
  else
    return Stream{std::move(sock), tls->context()};
}

} // namespace

int64_t session_base::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

std::shared_ptr<session_base>
make_session(std::shared_ptr<http_server::impl> srv, tcp::socket&& sock,
             uint64_t id, std::shared_ptr<const server_tls> tls) {
  if (tls)
    return std::make_shared<http_session<tls_stream>>(std::move(srv),
                                                      std::move(sock), id,
                                                      std::move(tls));
  return std::make_shared<http_session<plain_stream>>(std::move(srv),
                                                      std::move(sock), id,
                                                      nullptr);
}

template <class Stream>
http_session<Stream>::http_session(std::shared_ptr<http_server::impl> srv,
                                   tcp::socket&& sock, uint64_t id,
                                   std::shared_ptr<const server_tls> tls)
  : srv_(std::move(srv)),
    tls_(std::move(tls)),
    stream_(open_stream<Stream>(std::move(sock), tls_.get())),
    // Headers plus one read's worth of body in flight at most.
    buffer_(srv_->opts.header_limit + 64 * 1024),
    id_(id) {
  beast::error_code ec;
  auto ep = socket().remote_endpoint(ec);
  if (!ec)
    remote_ = ep.address().to_string();
  if constexpr (is_tls) {
    // TLS writes small records of its own (the handshake's last flight,
    // TLS 1.3's session tickets) right before the response: with Nagle's
    // algorithm the response then waits for the client's delayed ACK
    // (measured: 40 ms per new connection). A plain response is one write.
    socket().set_option(tcp::no_delay(true), ec);
  }
}

template <class Stream>
void http_session<Stream>::start() {
  net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
    if constexpr (is_tls) {
      self->phase_ = phase::handshake;
      self->arm(self->srv_->opts.tls_handshake_timeout);
      self->await_client_hello();
    } else {
      self->wait_for_request();
    }
  });
}

template <class Stream>
void http_session<Stream>::check_deadline() {
  net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
    if (self->phase_ != phase::closed && self->overdue(now_ns()))
      self->on_timeout();
  });
}

template <class Stream>
void http_session<Stream>::reject() {
  if constexpr (is_tls) {
    over_cap_ = true;
    start();
  } else {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      self->write(transport_problem(503, "Too many connections",
                                    "connection limit reached"));
    });
  }
}

template <class Stream>
void http_session<Stream>::shutdown() {
  net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
    if (self->phase_ == phase::idle || self->phase_ == phase::handshake)
      self->close();
  });
}

template <class Stream>
void http_session<Stream>::await_client_hello() {
  if constexpr (is_tls) {
    socket().async_wait(
      tcp::socket::wait_read,
      [self = this->shared_from_this()](beast::error_code ec) {
        if (ec || self->phase_ != phase::handshake)
          return self->close();
        unsigned char first = 0;
        auto n = self->socket().receive(net::buffer(&first, 1),
                                        tcp::socket::message_peek, ec);
        if (ec || n == 0)
          return self->close();
        if (first != tls_handshake_record)
          return self->refuse_plain();
        self->handshake();
      });
  }
}

template <class Stream>
void http_session<Stream>::handshake() {
  if constexpr (is_tls) {
    stream_.async_handshake(
      net::ssl::stream_base::server,
      [self = this->shared_from_this()](beast::error_code ec) {
        if (self->phase_ != phase::handshake)
          return self->close();
        if (ec) {
          log::gateway()->debug("[C{}] http.tls_handshake_failed peer={} "
                                "error={}",
                                self->id_, self->remote_,
                                describe_tls_error(ec,
                                                   self->stream_
                                                     .native_handle()));
          return self->close();
        }
        if (self->over_cap_)
          return self->write(transport_problem(503, "Too many connections",
                                               "connection limit reached"));
        self->wait_for_request();
      });
  }
}

template <class Stream>
void http_session<Stream>::refuse_plain() {
  log::gateway()->debug("[C{}] http.plain_on_tls peer={}", id_, remote_);
  phase_ = phase::writing;
  arm(srv_->opts.body_timeout);
  // The request's first bytes are read (and dropped) before the answer:
  // closing a socket with unread bytes resets the connection, and the
  // client might see the reset instead of the 400.
  beast::error_code ec;
  auto waiting = socket().available(ec);
  if (!ec && waiting > 0) {
    buffer_.clear();
    auto n = socket().read_some(
      buffer_.prepare(std::min<std::size_t>(waiting, buffer_.max_size())), ec);
    buffer_.clear();
    (void) n;
  }
  net::async_write(socket(),
                   net::buffer(plain_on_tls_answer.data(),
                               plain_on_tls_answer.size()),
                   [self = this->shared_from_this()](beast::error_code,
                                                     std::size_t) {
                     self->close();
                   });
}

template <class Stream>
void http_session<Stream>::wait_for_request() {
  if (srv_->stopping) {
    close();
    return;
  }
  timed_out_ = false;
  head_ = false;
  version_ = 11;
  ++req_id_;
  parser_.emplace();
  parser_->body_limit(srv_->opts.body_limit);
  parser_->header_limit(
    static_cast<std::uint32_t>(srv_->opts.header_limit));
  if (buffer_.size() > 0) { // pipelined bytes are already here
    phase_ = phase::header;
    arm(srv_->opts.header_timeout);
  } else {
    phase_ = phase::idle;
    idle_since_ns_ = now_ns();
    arm(std::min(idle_check(), srv_->opts.idle_timeout));
  }
  read_header();
}

template <class Stream>
void http_session<Stream>::read_header() {
  http::async_read_some(
    stream_, buffer_, *parser_,
    [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      stage_trace::mark("http.read", self->id_);
      if (ec)
        return self->on_read_error(ec);
      if (self->phase_ == phase::idle) {
        self->phase_ = phase::header;
        self->arm(self->srv_->opts.header_timeout);
      }
      if (self->parser_->is_header_done())
        return self->on_header({});
      self->read_header();
    });
}

template <class Stream>
void http_session<Stream>::on_header(beast::error_code ec) {
  if (ec)
    return on_read_error(ec);
  auto& req = parser_->request();
  head_ = parser_->is_head();
  version_ = parser_->version();
  std::size_t handler_limit = 0;
  if (!run_guarded(id_, req_id_, "body_limit", [&] {
        handler_limit = srv_->handler.body_limit(req.target);
      }))
    return write(internal_error_problem());
  auto limit = std::min(srv_->opts.body_limit, handler_limit);
  parser_->body_limit(limit);
  if (auto len = parser_->content_length(); len && *len > limit)
    return write(transport_problem(413, "Body too large",
                                   "request body exceeds the limit"));
  // Only plain chunked framing is understood; anything else (gzip, ...)
  // would hand the handler bytes it cannot read.
  if (auto te = req.header("transfer-encoding");
      te && !te->empty() && !beast::iequals(*te, "chunked"))
    return write(transport_problem(501, "Not implemented",
                                   "unsupported transfer coding"));
  if (parser_->is_done())
    return dispatch_request();
  phase_ = phase::body;
  arm(srv_->opts.body_timeout);
  if (auto expect = req.header("expect");
      expect && beast::iequals(*expect, "100-continue")) {
    static constexpr std::string_view cont = "HTTP/1.1 100 Continue\r\n\r\n";
    net::async_write(stream_, net::buffer(cont.data(), cont.size()),
                     [self = this->shared_from_this()](beast::error_code ec,
                                                       std::size_t) {
                       if (ec)
                         return self->close();
                       self->read_body();
                     });
    return;
  }
  read_body();
}

template <class Stream>
void http_session<Stream>::read_body() {
  http::async_read(stream_, buffer_, *parser_,
                   [self = this->shared_from_this()](beast::error_code ec,
                                                     std::size_t) {
                     if (ec)
                       return self->on_read_error(ec);
                     self->dispatch_request();
                   });
}

template <class Stream>
void http_session<Stream>::on_read_error(beast::error_code ec) {
  if (timed_out_)
    return write(transport_problem(408, "Request timeout",
                                   "request not received in time"));
  // The read buffer is capped too: chunk extensions and trailers do not
  // count against the parser's body limit, and an endless one must not
  // grow memory.
  if (ec == http::error::body_limit
      || (ec == http::error::buffer_overflow && phase_ == phase::body))
    return write(transport_problem(413, "Body too large",
                                   "request body exceeds the limit"));
  if (ec == http::error::buffer_overflow)
    return write(transport_problem(431, "Headers too large",
                                   "request headers exceed the limit"));
  if (ec == http::error::header_limit)
    return write(transport_problem(431, "Headers too large",
                                   "request headers exceed the limit"));
  if (ec == http::error::end_of_stream || ec == net::error::eof
      || ec == net::error::operation_aborted
      || ec == net::error::connection_reset || ec == http::error::partial_message)
    return close();
  if (ec.category() == http::make_error_code(http::error::bad_method)
                         .category())
    return write(transport_problem(400, "Bad request",
                                   "malformed HTTP request"));
  close();
}

template <class Stream>
void http_session<Stream>::dispatch_request() {
  stage_trace::mark("http.req", id_);
  phase_ = phase::handling;
  arm(srv_->opts.response_timeout);
  keep_alive_ = parser_->keep_alive();
  http_request req = std::move(parser_->request());
  req.remote = remote_;
  req.conn_id = id_;
  req.req_id = req_id_;
  deadline_ = std::make_shared<response_deadline>();
  req.deadline = deadline_;
  auto id = req_id_;
  // A handler that throws (before or after answering) gets a 500: the
  // phase check drops an answer it may have posted already.
  responder done = [self = this->shared_from_this(), id](http_response res) {
    stage_trace::mark("http.done", id);
    net::post(self->stream_.get_executor(),
              [self, id, res = std::move(res)]() mutable {
                stage_trace::mark("http.answer", self->id_);
                if (self->phase_ == phase::handling && self->req_id_ == id)
                  self->write(std::move(res));
              });
  };
  if (!run_guarded(id_, req_id_, "handler", [&] {
        srv_->handler.handle(std::move(req), std::move(done));
      }))
    write(internal_error_problem());
}

template <class Stream>
void http_session<Stream>::write(http_response res) {
  phase_ = phase::writing;
  deadline_.reset();
  arm(srv_->opts.body_timeout);
  // What must not be sent (no final status, a field that would inject
  // another, one over the size limit) gets a 500 instead: a handler bug
  // neither ends the process nor reaches the client.
  if (!run_guarded(id_, req_id_, "response", [&] { build(std::move(res)); }))
    build(internal_error_problem());
  auto on_written = [self = this->shared_from_this()](beast::error_code ec,
                                                      std::size_t) {
    // An idle connection keeps a small header buffer for its next
    // answer, not the memory of the last one.
    stage_trace::mark("http.written", self->id_);
    std::string{}.swap(self->body_);
    if (self->head_block_.capacity() > kept_head_capacity)
      std::string{}.swap(self->head_block_);
    if (ec)
      return self->close();
    if (!self->keep_open_)
      return self->finish();
    self->wait_for_request();
  };
  // One write: the header block and the body, unless HEAD or a bodiless
  // status leaves the body out.
  std::array<net::const_buffer, 2> bufs{
    net::buffer(head_block_),
    net::buffer(body_.data(), send_body_ ? body_.size() : 0)};
  net::async_write(stream_, bufs, std::move(on_written));
}

template <class Stream>
void http_session<Stream>::build(http_response res) {
  keep_open_ = keep_alive_ && !res.close && !srv_->stopping;
  render_options opts;
  opts.keep_open = keep_open_;
  opts.http10 = version_ < 11;
  opts.head = head_;
  auto rendered = render_head(res, opts, head_block_);
  if (rendered.body_dropped)
    log::gateway()->debug("[C{}][R{}] http.body_dropped status={} bytes={}",
                          id_, req_id_, res.status, res.body.size());
  send_body_ = rendered.send_body;
  body_ = std::move(res.body);
}

template <class Stream>
void http_session<Stream>::finish() {
  if constexpr (is_tls) {
    // close_notify tells the client the stream ended on purpose (OpenSSL 3
    // reports an EOF without one as an error). No read is pending here.
    phase_ = phase::closing;
    arm(std::min(close_notify_wait, srv_->opts.body_timeout));
    stream_.async_shutdown(
      [self = this->shared_from_this()](beast::error_code) {
        self->close();
      });
  } else {
    close();
  }
}

template <class Stream>
std::chrono::milliseconds http_session<Stream>::idle_check() const {
  return std::max(srv_->opts.header_timeout / 4,
                  std::chrono::milliseconds(100));
}

template <class Stream>
void http_session<Stream>::arm(std::chrono::milliseconds timeout) {
  deadline_ns_.store(now_ns()
                       + std::chrono::duration_cast<std::chrono::nanoseconds>(
                           timeout)
                           .count(),
                     std::memory_order_relaxed);
}

template <class Stream>
void http_session<Stream>::on_timeout() {
  switch (phase_) {
    case phase::idle: {
      beast::error_code ec;
      auto waiting = socket().available(ec);
      if (buffer_.size() > 0 || (!ec && waiting > 0)) {
        // A request has begun: from now on it has the header timeout.
        phase_ = phase::header;
        arm(srv_->opts.header_timeout);
        break;
      }
      auto idle_for = std::chrono::nanoseconds(now_ns() - idle_since_ns_);
      auto idle_limit = std::chrono::duration_cast<std::chrono::nanoseconds>(
        srv_->opts.idle_timeout);
      if (idle_for >= idle_limit) {
        close();
        break;
      }
      arm(std::min(idle_check(),
                   std::chrono::duration_cast<std::chrono::milliseconds>(
                     idle_limit - idle_for)
                     + std::chrono::milliseconds(1)));
      break;
    }
    case phase::handshake:
      log::gateway()->debug("[C{}] http.tls_handshake_timeout peer={}", id_,
                            remote_);
      close();
      break;
    case phase::writing:
    case phase::closing:
      close();
      break;
    case phase::header:
    case phase::body: {
      // Abort the read; its handler answers 408. Cancelling alone is not
      // enough: a client that keeps sending completes every read at once,
      // so there is rarely a pending one to cancel. Shutting the receive
      // side ends every further read, while the 408 can still be written.
      timed_out_ = true;
      beast::error_code ignored;
      socket().cancel(ignored);
      socket().shutdown(tcp::socket::shutdown_receive, ignored);
      break;
    }
    case phase::handling: {
      // 503 says nothing was executed: only while the handler has begun
      // nothing that may have effects; otherwise the answer it registered.
      auto answer = deadline_ ? deadline_->expire() : std::nullopt;
      deadline_.reset();
      write(answer ? std::move(*answer)
                   : transport_problem(503, "Response timeout",
                                       "no decision in time; retry"));
      break;
    }
    case phase::closed:
      break;
  }
}

template <class Stream>
void http_session<Stream>::close() {
  if (phase_ == phase::closed)
    return;
  phase_ = phase::closed;
  deadline_ns_.store(std::numeric_limits<int64_t>::max(),
                     std::memory_order_relaxed);
  beast::error_code ignored;
  socket().shutdown(tcp::socket::shutdown_both, ignored);
  socket().close(ignored);
  srv_->session_closed(id_);
}

template class http_session<plain_stream>;
template class http_session<tls_stream>;

} // namespace oncegate::gateway::detail
