#include "gateway/upstream_client.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <optional>
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

// Whether an idle connection is still open and quiet. A closed one reads
// EOF; one with unexpected bytes is out of sync. Both are dropped.
bool still_open(beast::tcp_stream& s) {
  char c;
  auto n = ::recv(s.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
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

class exchange : public std::enable_shared_from_this<exchange> {
public:
  exchange(impl_t& owner, const upstream_target& target,
           upstream_request&& req, std::function<void(upstream_result)> done)
    : owner_(owner),
      target_(target),
      key_(target.host + ':' + std::to_string(target.port)),
      done_(std::move(done)),
      resolver_(owner.ioc) {
    req_.method(http::verb::post);
    req_.target(target.path);
    req_.version(11);
    req_.set(http::field::host, target.host);
    req_.set(http::field::user_agent, "oncegate");
    req_.set(http::field::content_type, req.content_type.empty()
                                          ? std::string{"application/json"}
                                          : req.content_type);
    if (!req.idempotency_key.empty())
      req_.set("Idempotency-Key", req.idempotency_key);
    req_.keep_alive(true);
    req_.body() = std::move(req.body);
    req_.prepare_payload();
  }

  void start() {
    auto& p = owner_.pools[key_];
    auto now = steady::now();
    while (!p.idle.empty()) {
      auto conn = std::move(p.idle.back());
      p.idle.pop_back();
      if (now - conn.since < max_idle_age && still_open(*conn.stream)) {
        ++p.busy;
        stream_ = std::move(conn.stream);
        return write();
      }
      beast::error_code ignored;
      conn.stream->socket().close(ignored);
    }
    if (p.busy >= target_.max_connections)
      return finish(not_sent("upstream connection pool exhausted"));
    ++p.busy;
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
            if (ec)
              return self->finish(self->not_sent("connect: " + ec.message()));
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

  void write() {
    stream_->expires_after(target_.response_timeout);
    http::async_write(*stream_, req_,
                      [self = shared_from_this()](beast::error_code ec,
                                                  std::size_t n) {
                        if (ec)
                          // Bytes handed to the kernel may have arrived.
                          return self->finish(
                            n == 0 ? self->not_sent("write: " + ec.message())
                                   : self->maybe_sent("write: " + ec.message(),
                                                      false));
                        self->read();
                      });
  }

  void read() {
    parser_.emplace();
    parser_->body_limit(target_.max_response);
    http::async_read(*stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec,
                                                 std::size_t) {
                       if (ec == beast::error::timeout)
                         return self->finish(
                           self->maybe_sent("no response in time", true));
                       if (ec)
                         return self->finish(
                           self->maybe_sent("read: " + ec.message(), false));
                       auto& msg = self->parser_->get();
                       upstream_result res;
                       res.outcome = upstream_result::kind::response;
                       res.status = static_cast<int>(msg.result_int());
                       res.content_type = std::string{
                         msg[http::field::content_type]};
                       res.body = std::move(msg.body());
                       self->keep_ = msg.keep_alive();
                       self->finish(std::move(res));
                     });
  }

  void finish(upstream_result res) {
    auto& p = owner_.pools[key_];
    if (stream_) {
      --p.busy;
      if (keep_ && res.outcome == upstream_result::kind::response
          && p.idle.size() + p.busy < target_.max_connections) {
        stream_->expires_never();
        p.idle.push_back(idle_conn{std::move(stream_), steady::now()});
      } else {
        beast::error_code ignored;
        stream_->socket().shutdown(tcp::socket::shutdown_both, ignored);
        stream_->socket().close(ignored);
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
  http::request<http::string_body> req_;
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
