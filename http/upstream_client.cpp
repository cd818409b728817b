#include "http/upstream_client.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/logging.hpp"
#include "common/mutant.hpp"

namespace oncegate::gateway {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using steady = std::chrono::steady_clock;

std::optional<upstream_target> parse_upstream_url(std::string_view url) {
  constexpr std::string_view scheme = "http://";
  if (url.substr(0, scheme.size()) != scheme)
    return std::nullopt;
  url.remove_prefix(scheme.size());
  auto slash = url.find('/');
  auto authority = url.substr(0, slash);
  upstream_target res;
  res.path = slash == std::string_view::npos ? "/"
                                             : std::string{url.substr(slash)};
  if (authority.empty() || authority.find('@') != std::string_view::npos)
    return std::nullopt;
  // [v6]:port, host:port, host
  std::string_view host = authority;
  std::string_view port;
  if (authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos)
      return std::nullopt;
    host = authority.substr(1, close - 1);
    auto rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':')
        return std::nullopt;
      port = rest.substr(1);
    }
  } else if (auto colon = authority.rfind(':');
             colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty())
    return std::nullopt;
  res.host = std::string{host};
  if (!port.empty()) {
    unsigned value = 0;
    for (auto c : port) {
      if (c < '0' || c > '9' || value > 65535)
        return std::nullopt;
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value == 0 || value > 65535)
      return std::nullopt;
    res.port = static_cast<uint16_t>(value);
  }
  return res;
}

namespace {

struct idle_conn {
  std::unique_ptr<beast::tcp_stream> stream;
  steady::time_point since;
};

struct pool {
  std::vector<idle_conn> idle;
  std::size_t busy = 0;
};

/// Idle keep-alive connections older than this are not reused: servers
/// commonly close them after 5-75 s, and a request on a connection the
/// server is closing has an unknowable fate.
constexpr auto max_idle_age = std::chrono::seconds(4);

/// Interim (1xx) answers skipped before the final one at most: a server
/// sends one or two (`100 Continue`, `103 Early Hints`); an endless stream
/// is broken, and the response timeout alone would let it hold the
/// exchange for seconds.
constexpr int max_interim = 8;

enum class idle_state {
  /// Open, nothing to read: the only state in which a request may go out.
  quiet,
  /// EOF or a socket error: the peer closed it.
  closed,
  /// Unread bytes: an answer to no request of ours, out of sync.
  unsolicited,
};

// Non-blocking: a peek, no read. A closed connection reads EOF (0) or an
// error; one with unexpected bytes reads them.
idle_state probe(tcp::socket& s) {
  char c;
  auto n = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0)
    return idle_state::unsolicited;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return idle_state::quiet;
  return idle_state::closed;
}

// Acknowledges what was read now instead of after the delayed-ACK timer
// (up to 40 ms on Linux). An upstream with Nagle on holds back a small
// write that follows its answer until that ACK: without this, its late
// bytes would come out with the ACK our next request carries, after every
// check, and be read as the next request's answer.
void ack_now(tcp::socket& s) {
#ifdef TCP_QUICKACK
  int one = 1;
  ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_QUICKACK, &one,
               sizeof(one));
#else
  (void) s;
#endif
}

void close_stream(beast::tcp_stream& s) {
  beast::error_code ignored;
  s.socket().shutdown(tcp::socket::shutdown_both, ignored);
  s.socket().close(ignored);
}

} // namespace

struct upstream_client::impl {
  net::io_context ioc{1};
  net::executor_work_guard<net::io_context::executor_type> work{
    ioc.get_executor()};
  std::unordered_map<std::string, pool> pools;
  std::thread thread;

  impl() : thread([this] { ioc.run(); }) {
    // nop
  }
};

namespace {

using impl_t = upstream_client::impl;

/// One request and its answer, on a pooled or a new connection.
///
/// ```
///   start -- idle conn, quiet --> send_now -- all taken ----------> read
///     |                             |  part taken --> write ------^
///     |                             |  refused (no byte out):
///     |                             |    next idle conn, or connect
///     +-- none left --> connect --> send_now (refused: not_sent)
///
///   read -- 1xx, at most 8 --> read
///        -- 200-599 --> response (pooled when reusable)
///        -- 101, a 9th 1xx, outside 100-599, error, timeout --> maybe_sent
/// ```
///
/// At most once: anything after the first byte went out is `response` or
/// `maybe_sent`, never retried; `not_sent` only when no byte went out.
///
/// HTTP/1.1 cannot tell which request an answer belongs to: the first
/// bytes read after a request are taken as its answer. So a connection goes
/// back to the pool only after a complete, keep-alive final answer with
/// nothing after it, and is checked quiet again right before the request is
/// handed to the kernel, in the same turn of the event loop.
/// Residual risk: bytes the upstream sends unasked that are still in flight
/// during that check (sent within about one round trip before our request,
/// or held back by the upstream's own TCP stack despite `ack_now`) arrive
/// after our request and are indistinguishable from its answer.
class exchange : public std::enable_shared_from_this<exchange> {
public:
  exchange(impl_t& owner, const upstream_target& target,
           upstream_request&& req, std::function<void(upstream_result)> done)
    : owner_(owner),
      target_(target),
      key_(target.host + ':' + std::to_string(target.port)),
      done_(std::move(done)),
      resolver_(owner.ioc) {
    http::request<http::string_body> msg;
    msg.method(http::verb::post);
    msg.target(target.path);
    msg.version(11);
    msg.set(http::field::host, target.host);
    msg.set(http::field::user_agent, "oncegate");
    msg.set(http::field::content_type, req.content_type.empty()
                                         ? std::string{"application/json"}
                                         : req.content_type);
    if (!req.idempotency_key.empty())
      msg.set("Idempotency-Key", req.idempotency_key);
    msg.keep_alive(true);
    msg.body() = std::move(req.body);
    msg.prepare_payload();
    std::ostringstream out;
    out << msg;
    wire_ = std::move(out).str();
  }

  void start() {
    auto& p = owner_.pools[key_];
    auto now = steady::now();
    while (!p.idle.empty()) {
      auto conn = std::move(p.idle.back());
      p.idle.pop_back();
      auto state = now - conn.since < max_idle_age
                     ? probe(conn.stream->socket())
                     : idle_state::closed;
      if (state == idle_state::unsolicited)
        log::gateway()->warn("upstream.unsolicited_bytes upstream={} "
                             "when=idle",
                             key_);
      if (state != idle_state::quiet) {
        close_stream(*conn.stream);
        continue;
      }
      ++p.busy;
      stream_ = std::move(conn.stream);
      reused_ = true;
      if (!send_now()) {
        // The kernel took no byte: certain that nothing went out, so the
        // next connection may carry it.
        --p.busy;
        close_stream(*stream_);
        stream_.reset();
        continue;
      }
      return write();
    }
    if (p.busy >= target_.max_connections)
      return finish(not_sent("upstream connection pool exhausted"));
    ++p.busy;
    reused_ = false;
    stream_ = std::make_unique<beast::tcp_stream>(owner_.ioc);
    resolver_.async_resolve(
      target_.host, std::to_string(target_.port),
      [self = shared_from_this()](beast::error_code ec,
                                  tcp::resolver::results_type results) {
        if (ec)
          return self->finish(self->not_sent("resolve: " + ec.message()));
        self->stream_->expires_after(self->target_.connect_timeout);
        self->stream_->async_connect(
          results, [self](beast::error_code ec, const tcp::endpoint&) {
            if (ec && ONCEGATE_MUTANT("connect-timeout-in-doubt")
                && ec == beast::error::timeout)
              return self->finish(self->maybe_sent("connect: timeout", true));
            if (ec)
              return self->finish(self->not_sent("connect: " + ec.message()));
            if (!self->send_now())
              return self->finish(self->not_sent("write: " + self->error_));
            self->write();
          });
      });
  }

private:
  upstream_result not_sent(std::string why) {
    upstream_result res;
    res.outcome = upstream_result::kind::not_sent;
    res.error = std::move(why);
    return res;
  }

  upstream_result maybe_sent(std::string why, bool timed_out) {
    upstream_result res;
    res.outcome = upstream_result::kind::maybe_sent;
    res.error = std::move(why);
    res.timed_out = timed_out;
    return res;
  }

  // Hands as much of the request as the kernel takes, at once, so that no
  // other handler runs between the quiet check and the send. False when
  // the kernel refused it (reset, broken pipe): no byte went out.
  bool send_now() {
    auto n = ::send(stream_->socket().native_handle(), wire_.data(),
                    wire_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) {
      written_ = static_cast<std::size_t>(n);
      return true;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
      return true; // the rest goes asynchronously
    error_ = std::strerror(errno);
    return false;
  }

  // The response timeout runs from the first byte sent to the final
  // answer, across write chunks and interim answers.
  void write() {
    stream_->expires_after(target_.response_timeout);
    write_rest();
  }

  void write_rest() {
    if (written_ == wire_.size())
      return read();
    if (reused_ && probe(stream_->socket()) != idle_state::quiet) {
      // The upstream spoke before it had our whole request: stale bytes or
      // an early answer, one cannot tell which. Not ours to store.
      if (written_ == 0)
        return finish(not_sent("upstream connection out of sync"));
      return finish(maybe_sent("upstream answered before the request was "
                               "complete",
                               false));
    }
    stream_->async_write_some(
      net::buffer(wire_.data() + written_, wire_.size() - written_),
      [self = shared_from_this()](beast::error_code ec, std::size_t n) {
        self->written_ += n;
        if (ec == beast::error::timeout && self->written_ > 0)
          return self->finish(
            self->maybe_sent("write: no progress in time", true));
        if (ec)
          // Bytes handed to the kernel may have arrived.
          return self->finish(
            self->written_ == 0
              ? self->not_sent("write: " + ec.message())
              : self->maybe_sent("write: " + ec.message(), false));
        self->write_rest();
      });
  }

  // One message per call, a fresh parser each: interim answers are
  // complete messages of their own; `buffer_` keeps what follows them.
  void read() {
    parser_.emplace();
    parser_->body_limit(target_.max_response);
    http::async_read(*stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec,
                                                 std::size_t) {
                       self->on_read(ec);
                     });
  }

  void on_read(beast::error_code ec) {
    if (ec == beast::error::timeout)
      return finish(maybe_sent("no response in time", true));
    if (ec)
      return finish(maybe_sent("read: " + ec.message(), false));
    auto status = static_cast<int>(parser_->get().result_int());
    // Beast reads any three digits.
    if (status == 101)
      return finish(maybe_sent("upstream switched protocols (101), which "
                               "was never asked for",
                               false));
    if (status >= 100 && status <= 199) {
      if (++interim_ > max_interim)
        return finish(maybe_sent("more than "
                                   + std::to_string(max_interim)
                                   + " interim (1xx) answers",
                                 false));
      // The final answer may wait behind our ACK (see `ack_now`).
      ack_now(stream_->socket());
      return read();
    }
    if (status < 200 || status > 599)
      return finish(maybe_sent("upstream status " + std::to_string(status)
                                 + " is outside 200-599",
                               false));
    auto& msg = parser_->get();
    upstream_result res;
    res.outcome = upstream_result::kind::response;
    res.status = status;
    res.content_type = std::string{msg[http::field::content_type]};
    res.body = std::move(msg.body());
    // False for `Connection: close`, HTTP/1.0 without keep-alive and a
    // body that ends at EOF.
    keep_ = parser_->keep_alive();
    finish(std::move(res));
  }

  // Whether the connection may carry another request: a complete final
  // answer the upstream means to keep alive, and nothing after it.
  bool reusable(const upstream_result& res, const pool& p) {
    if (res.outcome != upstream_result::kind::response || !keep_
        || p.idle.size() + p.busy >= target_.max_connections)
      return false;
    ack_now(stream_->socket());
    if (buffer_.size() == 0 && probe(stream_->socket()) == idle_state::quiet)
      return true;
    log::gateway()->warn("upstream.unsolicited_bytes upstream={} "
                         "when=after_answer",
                         key_);
    return false;
  }

  void finish(upstream_result res) {
    auto& p = owner_.pools[key_];
    if (stream_) {
      --p.busy;
      if (reusable(res, p)) {
        stream_->expires_never();
        p.idle.push_back(idle_conn{std::move(stream_), steady::now()});
      } else {
        close_stream(*stream_);
      }
    }
    auto done = std::move(done_);
    done(std::move(res));
  }

  impl_t& owner_;
  upstream_target target_;
  std::string key_;
  std::function<void(upstream_result)> done_;
  tcp::resolver resolver_;
  /// The serialized request.
  std::string wire_;
  /// Bytes of `wire_` the kernel took.
  std::size_t written_ = 0;
  /// Why `send_now` failed.
  std::string error_;
  /// Whether `stream_` came from the pool.
  bool reused_ = false;
  int interim_ = 0;
  std::unique_ptr<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> parser_;
  bool keep_ = false;
};

} // namespace

upstream_client::upstream_client() : impl_(std::make_shared<impl>()) {
  // nop
}

upstream_client::~upstream_client() {
  impl_->work.reset();
  impl_->ioc.stop();
  impl_->thread.join();
}

void upstream_client::send(const upstream_target& target, upstream_request req,
                           std::function<void(upstream_result)> done) {
  auto ex = std::make_shared<exchange>(*impl_, target, std::move(req),
                                       std::move(done));
  net::post(impl_->ioc, [ex] { ex->start(); });
}

void upstream_client::after(std::chrono::milliseconds delay,
                            std::function<void()> fn) {
  auto timer = std::make_shared<net::steady_timer>(impl_->ioc, delay);
  timer->async_wait([timer, fn = std::move(fn)](beast::error_code ec) {
    if (!ec)
      fn();
  });
}

} // namespace oncegate::gateway
