#include "http/upstream_client.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
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
#include <boost/beast/ssl.hpp>

#include "common/logging.hpp"
#include "common/mutant.hpp"
#include "http/upstream_conn.hpp"

namespace oncegate::gateway {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using steady = std::chrono::steady_clock;

std::optional<upstream_target> parse_upstream_url(std::string_view url) {
  constexpr std::string_view http_scheme = "http://";
  constexpr std::string_view https_scheme = "https://";
  upstream_target res;
  if (url.substr(0, http_scheme.size()) == http_scheme) {
    url.remove_prefix(http_scheme.size());
  } else if (url.substr(0, https_scheme.size()) == https_scheme) {
    url.remove_prefix(https_scheme.size());
    res.https = true;
    res.port = 443;
  } else {
    return std::nullopt;
  }
  auto slash = url.find('/');
  auto authority = url.substr(0, slash);
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

using detail::idle_state;
using detail::upstream_conn;

struct idle_conn {
  std::unique_ptr<upstream_conn> conn;
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

// `host:port`, `https://host:port` over TLS: the upstream in log lines.
std::string upstream_name(const upstream_target& t) {
  auto name = t.host + ':' + std::to_string(t.port);
  return t.https ? "https://" + name : name;
}

// One pool per upstream and TLS context: a connection only ever carries
// requests with the trust and client certificate it was made with.
std::string pool_key(const upstream_target& t) {
  auto key = upstream_name(t);
  if (t.tls)
    key += " tls=" + std::to_string(reinterpret_cast<uintptr_t>(t.tls.get()));
  return key;
}

// `Host`: the port only when it is not the scheme's (RFC 9110, 7.2), an
// IPv6 address in brackets.
std::string host_header(const upstream_target& t) {
  auto host = t.host.find(':') == std::string::npos ? t.host
                                                    : '[' + t.host + ']';
  if (t.port != (t.https ? 443 : 80))
    host += ':' + std::to_string(t.port);
  return host;
}

// A connection found not quiet, `idle` in the pool or right after an
// answer. Plain bytes are an upstream out of sync; TLS records on an idle
// connection are most likely its close_notify, not worth a warning.
void report(const std::string& name, idle_state state, bool idle) {
  auto when = idle ? "idle" : "after_answer";
  if (state == idle_state::unsolicited)
    log::gateway()->warn("upstream.unsolicited_bytes upstream={} when={}",
                         name, when);
  else if (state == idle_state::tls_records && idle)
    log::gateway()->debug("upstream.tls_records upstream={} when={}", name,
                          when);
  else if (state == idle_state::tls_records)
    log::gateway()->warn("upstream.tls_records upstream={} when={}", name,
                         when);
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
///     |          |                  |  part taken --> write ------^
///     |          |                  |  refused (no byte out):
///     |          |                  |    next idle conn, or connect
///     |          +-- (TLS) -------------------------> write
///     +-- none left --> connect --> send_now (refused: not_sent)
///                          +-- (TLS) --> handshake --> write
///                                          (failed, timeout: not_sent)
///
///   read -- 1xx, at most 8 --> read
///        -- 200-599 --> response (pooled when reusable)
///        -- 101, a 9th 1xx, outside 100-599, error, timeout --> maybe_sent
/// ```
///
/// At most once: anything after the first byte went out is `response` or
/// `maybe_sent`, never retried; `not_sent` only when no byte went out.
/// Over TLS the handshake carries no byte of the request, so its failures
/// (an untrusted certificate, a wrong name, a timeout within the connect
/// deadline) are `not_sent`. The request goes out as TLS records; once the
/// kernel took a byte of them (`counting_stream`, since a failed TLS write
/// reports no count), every failure is `maybe_sent`. Under TLS 1.3 an
/// upstream refuses a client certificate after our handshake is done: the
/// refusal usually comes after the request was handed over (maybe sent),
/// and is `not_sent` only when its reset came first.
///
/// HTTP/1.1 cannot tell which request an answer belongs to: the first
/// bytes read after a request are taken as its answer. So a connection goes
/// back to the pool only after a complete, keep-alive final answer with
/// nothing after it, and is checked quiet again right before the request is
/// handed over, in the same turn of the event loop (for TLS, asio's write
/// of the first record starts within that turn too).
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
      name_(upstream_name(target)),
      pool_key_(pool_key(target)),
      done_(std::move(done)),
      resolver_(owner.ioc) {
    http::request<http::string_body> msg;
    msg.method(req.get ? http::verb::get : http::verb::post);
    msg.target(req.get ? req.path : target.path);
    msg.version(11);
    msg.set(http::field::host, host_header(target));
    msg.set(http::field::user_agent, "oncegate");
    if (!req.get)
      msg.set(http::field::content_type, req.content_type.empty()
                                           ? std::string{"application/json"}
                                           : req.content_type);
    if (!req.idempotency_key.empty())
      msg.set("Idempotency-Key", req.idempotency_key);
    if (!req.attempt.empty())
      msg.set("Oncegate-Attempt", req.attempt);
    msg.keep_alive(true);
    msg.body() = std::move(req.body);
    msg.prepare_payload();
    std::ostringstream out;
    out << msg;
    wire_ = std::move(out).str();
  }

  void start() {
    // The route loader gives every https target its context.
    if (target_.https && !target_.tls)
      return finish(not_sent("https upstream without a TLS context"));
    auto& p = owner_.pools[pool_key_];
    auto now = steady::now();
    while (!p.idle.empty()) {
      auto idle = std::move(p.idle.back());
      p.idle.pop_back();
      auto state = now - idle.since < max_idle_age ? idle.conn->probe()
                                                   : idle_state::closed;
      report(name_, state, true);
      if (state != idle_state::quiet) {
        idle.conn->close();
        continue;
      }
      ++p.busy;
      conn_ = std::move(idle.conn);
      reused_ = true;
      if (conn_->tls())
        return write();
      if (!send_now()) {
        // The kernel took no byte: certain that nothing went out, so the
        // next connection may carry it.
        --p.busy;
        conn_->close();
        conn_.reset();
        continue;
      }
      return write();
    }
    if (p.busy >= target_.max_connections)
      return finish(not_sent("upstream connection pool exhausted"));
    ++p.busy;
    reused_ = false;
    conn_ = target_.tls
              ? std::make_unique<upstream_conn>(owner_.ioc, *target_.tls)
              : std::make_unique<upstream_conn>(owner_.ioc);
    resolver_.async_resolve(
      target_.host, std::to_string(target_.port),
      [self = shared_from_this()](beast::error_code ec,
                                  tcp::resolver::results_type results) {
        if (ec)
          return self->finish(self->not_sent("resolve: " + ec.message()));
        // One deadline for the connect and, over TLS, the handshake.
        self->conn_->tcp().expires_after(self->target_.connect_timeout);
        self->conn_->tcp().async_connect(
          results, [self](beast::error_code ec, const tcp::endpoint&) {
            if (ec && ONCEGATE_MUTANT("connect-timeout-in-doubt")
                && ec == beast::error::timeout)
              return self->finish(self->maybe_sent("connect: timeout", true));
            if (ec)
              return self->finish(self->not_sent("connect: " + ec.message()));
            self->conn_->no_delay();
            if (self->conn_->tls())
              return self->handshake();
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

  // What `ec` was; over TLS with OpenSSL's reason and verification result.
  std::string describe(const beast::error_code& ec) {
    if (auto tls = conn_ ? conn_->tls() : nullptr)
      return detail::describe_tls_error(ec, tls->native_handle());
    return ec.message();
  }

  // Whether a byte of the request may have left: the kernel took one, of
  // the request itself (plain) or of a TLS record after the handshake.
  bool sent_any() const {
    return written_ > 0 || conn_->tls_written() > tls_mark_;
  }

  // Still within the connect's deadline (`connect_timeout`). What crosses
  // the wire here is the handshake only: a failure is `not_sent`.
  void handshake() {
    auto ssl = conn_->tls()->native_handle();
    std::string why;
    if (!detail::prepare_tls_client(ssl, target_.host, why))
      return finish(not_sent("tls: " + why));
    conn_->tls()->async_handshake(
      net::ssl::stream_base::client,
      [self = shared_from_this()](beast::error_code ec) {
        if (ec && ONCEGATE_MUTANT("tls-handshake-in-doubt")) // mutant
          return self->finish(self->maybe_sent(
            "tls handshake: " + self->describe(ec), false));
        if (ec)
          return self->finish(
            self->not_sent("tls handshake: " + self->describe(ec)));
        self->write();
      });
  }

  // Hands as much of the request as the kernel takes, at once, so that no
  // other handler runs between the quiet check and the send. False when
  // the kernel refused it (reset, broken pipe): no byte went out. Plain
  // connections only.
  bool send_now() {
    auto n = ::send(conn_->tcp().socket().native_handle(), wire_.data(),
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
    conn_->tcp().expires_after(target_.response_timeout);
    tls_mark_ = conn_->tls_written();
    write_rest();
  }

  void write_rest() {
    if (written_ == wire_.size())
      return read();
    if (reused_ && conn_->probe() != idle_state::quiet) {
      // The upstream spoke before it had our whole request: stale bytes or
      // an early answer, one cannot tell which. Not ours to store.
      if (!sent_any())
        return finish(not_sent("upstream connection out of sync"));
      return finish(maybe_sent("upstream answered before the request was "
                               "complete",
                               false));
    }
    conn_->async_write_some(
      net::buffer(wire_.data() + written_, wire_.size() - written_),
      [self = shared_from_this()](beast::error_code ec, std::size_t n) {
        self->written_ += n;
        if (ec == beast::error::timeout && self->sent_any())
          return self->finish(
            self->maybe_sent("write: no progress in time", true));
        if (ec)
          // Bytes handed to the kernel may have arrived.
          return self->finish(
            self->sent_any()
              ? self->maybe_sent("write: " + self->describe(ec), false)
              : self->not_sent("write: " + self->describe(ec)));
        self->write_rest();
      });
  }

  // One message per call, a fresh parser each: interim answers are
  // complete messages of their own; `buffer_` keeps what follows them.
  // The answer may wait behind our ACK (see `ack_now`): after interim
  // answers, and over TLS 1.3 behind the session tickets the upstream sent
  // after the handshake (with Nagle on its side and a delayed ACK on ours,
  // 40 ms on every new connection).
  void read() {
    conn_->ack_now();
    parser_.emplace();
    parser_->body_limit(target_.max_response);
    conn_->async_read(buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec,
                                                  std::size_t) {
                        self->on_read(ec);
                      });
  }

  void on_read(beast::error_code ec) {
    if (ec == beast::error::timeout)
      return finish(maybe_sent("no response in time", true));
    if (ec)
      return finish(maybe_sent("read: " + describe(ec), false));
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
    conn_->ack_now();
    auto state = buffer_.size() != 0 ? idle_state::unsolicited
                                     : conn_->probe();
    if (state == idle_state::quiet)
      return true;
    report(name_, state, false);
    return false;
  }

  void finish(upstream_result res) {
    auto& p = owner_.pools[pool_key_];
    if (conn_) {
      --p.busy;
      if (reusable(res, p)) {
        conn_->tcp().expires_never();
        p.idle.push_back(idle_conn{std::move(conn_), steady::now()});
      } else {
        conn_->close();
      }
    }
    auto done = std::move(done_);
    done(std::move(res));
  }

  impl_t& owner_;
  upstream_target target_;
  /// The upstream in log lines, and the pool its connections live in.
  std::string name_;
  std::string pool_key_;
  std::function<void(upstream_result)> done_;
  tcp::resolver resolver_;
  /// The serialized request.
  std::string wire_;
  /// Bytes of `wire_` the kernel took (plain), or encrypted and written
  /// as TLS records (asio counts only writes that succeed).
  std::size_t written_ = 0;
  /// TLS bytes the kernel had taken on this connection before this
  /// request (handshake, earlier requests).
  std::size_t tls_mark_ = 0;
  /// Why `send_now` failed.
  std::string error_;
  /// Whether `conn_` came from the pool.
  bool reused_ = false;
  int interim_ = 0;
  std::unique_ptr<upstream_conn> conn_;
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
