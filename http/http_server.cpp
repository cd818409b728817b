#include "http/http_server.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/logging.hpp"

namespace oncegate::gateway {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

class session;

std::atomic<uint64_t> internal_errors_total{0};
std::atomic<uint64_t> accept_errors_total{0};

/// At most one `http.accept_failed` line per this interval; the others are
/// counted in the next line's `suppressed`.
constexpr auto accept_log_interval = std::chrono::seconds(5);
/// First and longest wait before accepting again after a failed accept.
constexpr auto accept_backoff_min = std::chrono::milliseconds(10);
constexpr auto accept_backoff_max = std::chrono::milliseconds(1000);

const char* reason_type(int status) {
  switch (status) {
    case 400:
      return "bad-request";
    case 408:
      return "request-timeout";
    case 413:
      return "body-too-large";
    case 431:
      return "headers-too-large";
    case 500:
      return "internal-error";
    case 501:
      return "not-implemented";
    case 503:
      return "unavailable";
    default:
      return "error";
  }
}

// A problem response produced by the transport itself (before a request
// reached the handler).
http_response transport_problem(int status, const char* title,
                                const char* detail) {
  http_response res;
  res.status = status;
  res.close = true;
  res.set("Content-Type", "application/problem+json");
  res.set("Cache-Control", "no-store");
  if (status == 503)
    res.set("Retry-After", "1");
  res.body = std::string{"{\"type\":\"https://oncegate.dev/problems/"}
             + reason_type(status) + "\",\"title\":\"" + title
             + "\",\"status\":" + std::to_string(status) + ",\"detail\":\""
             + detail + "\"}";
  return res;
}

// The answer to a request whose handler threw or whose answer could not be
// serialised. Fixed text: building it cannot throw in turn.
http_response internal_error_problem() {
  return transport_problem(500, "Internal error",
                           "the answer could not be produced; retry later");
}

// Counts and logs an exception caught on the way to a response.
void report_internal_error(uint64_t conn, uint64_t req, const char* where,
                           const char* what) {
  internal_errors_total.fetch_add(1, std::memory_order_relaxed);
  log::gateway()->error("[C{}][R{}] http.internal_error where={} what={}",
                        conn, req, where, what);
}

// HTTP forbids a body in these final answers (RFC 9110 6.4.1).
bool bodiless_status(int status) {
  return status == 204 || status == 304;
}

} // namespace

http_transport_counters transport_counters() {
  http_transport_counters res;
  res.internal_errors = internal_errors_total.load(std::memory_order_relaxed);
  res.accept_errors = accept_errors_total.load(std::memory_order_relaxed);
  return res;
}

std::size_t fitting_connections(std::size_t wanted, std::size_t reserve,
                                std::uint64_t nofile) {
  if (nofile >= reserve && nofile - reserve >= wanted)
    return wanted;
  if (nofile > reserve)
    return static_cast<std::size_t>(nofile - reserve);
  return std::min<std::size_t>(
    wanted, std::max<std::size_t>(1, static_cast<std::size_t>(nofile / 2)));
}

struct http_server::impl : std::enable_shared_from_this<impl> {
  http_server_options opts;
  request_handler& handler;
  net::io_context ioc;
  tcp::acceptor acceptor;
  net::signal_set signals;
  net::steady_timer grace;
  /// One timer for every connection's deadline (see `session::arm`).
  net::steady_timer sweeper;
  /// Waits before the next accept after a failed one (out of descriptors:
  /// accepting again at once fails again at once, a busy loop).
  net::steady_timer accept_retry;
  // The accept state below is only touched on the acceptor's strand.
  std::chrono::milliseconds accept_backoff{0};
  std::chrono::steady_clock::time_point accept_logged_at{};
  uint64_t accept_suppressed = 0;
  uint64_t accept_failures = 0;
  std::atomic<uint64_t> next_conn{1};
  std::atomic<std::size_t> connections{0};
  std::atomic<bool> stopping{false};
  std::mutex mtx;
  std::unordered_map<uint64_t, std::weak_ptr<session>> sessions;

  impl(const http_server_options& o, request_handler& h)
    : opts(o),
      handler(h),
      ioc(static_cast<int>(std::max(1u, o.threads))),
      acceptor(net::make_strand(ioc)),
      signals(ioc),
      grace(acceptor.get_executor()),
      sweeper(acceptor.get_executor()),
      accept_retry(acceptor.get_executor()) {
    // nop
  }

  void do_accept();
  void on_accept(beast::error_code ec, tcp::socket sock);
  void on_accept_error(beast::error_code ec);
  void fit_fd_limit();
  void serve();
  void begin_stop();
  void session_closed(uint64_t id);
  void sweep();
};

namespace {

class session : public std::enable_shared_from_this<session> {
public:
  session(std::shared_ptr<http_server::impl> srv, tcp::socket&& sock,
          uint64_t id)
    : srv_(std::move(srv)),
      stream_(std::move(sock)),
      // Headers plus one read's worth of body in flight at most.
      buffer_(srv_->opts.header_limit + 64 * 1024),
      id_(id) {
    beast::error_code ec;
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec)
      remote_ = ep.address().to_string();
  }

  void start() {
    net::dispatch(stream_.get_executor(),
                  [self = shared_from_this()] { self->wait_for_request(); });
  }

  // Called by the server's sweep from another thread: cheap, no syscall.
  bool overdue(int64_t now_ns) const {
    return deadline_ns_.load(std::memory_order_relaxed) <= now_ns;
  }

  // Runs the timeout on the session's strand if it is still due there.
  void check_deadline() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->phase_ != phase::closed && self->overdue(now_ns()))
        self->on_timeout();
    });
  }

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
  }

  // Sends 503 and closes: the connection cap is reached.
  void reject() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      self->write(transport_problem(503, "Too many connections",
                                    "connection limit reached"));
    });
  }

  // Server shutdown: idle connections close now, busy ones after their
  // response.
  void shutdown() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->phase_ == phase::idle)
        self->close();
    });
  }

private:
  enum class phase { idle, header, body, handling, writing, closed };

  // A connection waits for its next request under the idle timeout; once
  // bytes of a request are seen, the header timeout applies. Beast parses a
  // header only when it is complete, so the first bytes are noticed by the
  // deadline check (see `on_timeout`), which runs every quarter header
  // timeout while the connection is idle.
  void wait_for_request() {
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

  void read_header() {
    http::async_read_some(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, std::size_t) {
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

  void on_header(beast::error_code ec) {
    if (ec)
      return on_read_error(ec);
    auto& req = parser_->get();
    head_ = req.method() == http::verb::head;
    version_ = req.version();
    std::size_t handler_limit = 0;
    try {
      handler_limit = srv_->handler.body_limit(req.target());
    } catch (const std::exception& e) {
      report_internal_error(id_, req_id_, "body_limit", e.what());
      return write(internal_error_problem());
    } catch (...) {
      report_internal_error(id_, req_id_, "body_limit", "unknown exception");
      return write(internal_error_problem());
    }
    auto limit = std::min(srv_->opts.body_limit, handler_limit);
    parser_->body_limit(limit);
    if (auto len = parser_->content_length(); len && *len > limit)
      return write(transport_problem(413, "Body too large",
                                     "request body exceeds the limit"));
    // Only plain chunked framing is understood; anything else (gzip, ...)
    // would hand the handler bytes it cannot read.
    if (auto te = req[http::field::transfer_encoding];
        !te.empty() && !beast::iequals(te, "chunked"))
      return write(transport_problem(501, "Not implemented",
                                     "unsupported transfer coding"));
    if (parser_->is_done())
      return dispatch_request();
    phase_ = phase::body;
    arm(srv_->opts.body_timeout);
    auto expect = req[http::field::expect];
    if (beast::iequals(expect, "100-continue")) {
      static constexpr std::string_view cont = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(cont.data(), cont.size()),
                       [self = shared_from_this()](beast::error_code ec,
                                                   std::size_t) {
                         if (ec)
                           return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec,
                                                 std::size_t) {
                       if (ec)
                         return self->on_read_error(ec);
                       self->dispatch_request();
                     });
  }

  void on_read_error(beast::error_code ec) {
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

  void dispatch_request() {
    phase_ = phase::handling;
    arm(srv_->opts.response_timeout);
    auto msg = parser_->release();
    keep_alive_ = msg.keep_alive();
    http_request req;
    req.method = std::string{msg.method_string()};
    req.target = std::string{msg.target()};
    req.headers.reserve(8);
    for (auto& f : msg) {
      std::string name{f.name_string()};
      for (auto& c : name)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req.headers.emplace_back(std::move(name), std::string{f.value()});
    }
    req.body = std::move(msg.body());
    req.remote = remote_;
    req.conn_id = id_;
    req.req_id = req_id_;
    auto id = req_id_;
    // A handler that throws (before or after answering) gets a 500: the
    // phase check drops an answer it may have posted already.
    try {
      srv_->handler.handle(
        std::move(req), [self = shared_from_this(), id](http_response res) {
          net::post(self->stream_.get_executor(),
                    [self, id, res = std::move(res)]() mutable {
                      if (self->phase_ == phase::handling
                          && self->req_id_ == id)
                        self->write(std::move(res));
                    });
        });
    } catch (const std::exception& e) {
      report_internal_error(id_, req_id_, "handler", e.what());
      write(internal_error_problem());
    } catch (...) {
      report_internal_error(id_, req_id_, "handler", "unknown exception");
      write(internal_error_problem());
    }
  }

  void write(http_response res) {
    phase_ = phase::writing;
    arm(srv_->opts.body_timeout);
    // Beast throws for what it cannot serialise (a status beyond 999, a
    // field over 64 KiB), and so does `build` for a status that is no final
    // answer: the request gets a 500 instead of the exception ending the
    // process.
    try {
      build(std::move(res));
    } catch (const std::exception& e) {
      report_internal_error(id_, req_id_, "response", e.what());
      build(internal_error_problem());
    } catch (...) {
      report_internal_error(id_, req_id_, "response", "unknown exception");
      build(internal_error_problem());
    }
    sr_.emplace(res_);
    auto on_written = [self = shared_from_this()](beast::error_code ec,
                                                  std::size_t) {
      self->sr_.reset();
      if (ec || !self->keep_open_)
        return self->close();
      self->wait_for_request();
    };
    // A HEAD answer is the GET answer's header block, Content-Length
    // included, without the body (RFC 9110 9.3.2).
    if (head_)
      http::async_write_header(stream_, *sr_, std::move(on_written));
    else
      http::async_write(stream_, *sr_, std::move(on_written));
  }

  void build(http_response res) {
    if (res.status < 200 || res.status > 599)
      throw std::invalid_argument("status " + std::to_string(res.status)
                                  + " is not a final HTTP status");
    res_ = {};
    res_.version(11);
    res_.result(static_cast<unsigned>(res.status));
    for (auto& [k, v] : res.headers)
      res_.insert(k, v);
    keep_open_ = keep_alive_ && !res.close && !srv_->stopping;
    res_.keep_alive(keep_open_);
    // An HTTP/1.0 client keeps the connection only when told so.
    if (keep_open_ && version_ < 11)
      res_.set(http::field::connection, "keep-alive");
    if (bodiless_status(res.status)) {
      // No body, and no Content-Length either (RFC 9110 8.6): whatever the
      // handler put there would be read as the start of the next response.
      if (!res.body.empty())
        log::gateway()->debug("[C{}][R{}] http.body_dropped status={} bytes={}",
                              id_, req_id_, res.status, res.body.size());
      res_.erase(http::field::content_length);
      res_.erase(http::field::transfer_encoding);
      return;
    }
    res_.body() = std::move(res.body);
    res_.prepare_payload();
  }

  // How often an idle connection is looked at for the first bytes of a
  // request: a request's header timeout starts at most this late.
  std::chrono::milliseconds idle_check() const {
    return std::max(srv_->opts.header_timeout / 4,
                    std::chrono::milliseconds(100));
  }

  // Sets the deadline of the current phase. No timer per connection: the
  // server's sweep checks every deadline a few times a second, which costs
  // no syscall per request (an asio timer re-armed per phase did, and its
  // cancelled waits each ran a handler).
  void arm(std::chrono::milliseconds timeout) {
    deadline_ns_.store(now_ns()
                         + std::chrono::duration_cast<std::chrono::nanoseconds>(
                             timeout)
                             .count(),
                       std::memory_order_relaxed);
  }

  void on_timeout() {
    switch (phase_) {
      case phase::idle: {
        beast::error_code ec;
        auto waiting = stream_.socket().available(ec);
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
      case phase::writing:
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
        stream_.socket().cancel(ignored);
        stream_.socket().shutdown(tcp::socket::shutdown_receive, ignored);
        break;
      }
      case phase::handling:
        write(transport_problem(503, "Response timeout",
                                "no decision in time; retry"));
        break;
      case phase::closed:
        break;
    }
  }

  void close() {
    if (phase_ == phase::closed)
      return;
    phase_ = phase::closed;
    deadline_ns_.store(std::numeric_limits<int64_t>::max(),
                       std::memory_order_relaxed);
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    srv_->session_closed(id_);
  }

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

} // namespace

void http_server::impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc),
                        [self = shared_from_this()](beast::error_code ec,
                                                    tcp::socket sock) {
                          self->on_accept(ec, std::move(sock));
                        });
}

void http_server::impl::on_accept(beast::error_code ec, tcp::socket sock) {
  if (ec)
    return on_accept_error(ec);
  if (stopping)
    return;
  if (accept_failures > 0) {
    log::gateway()->info("http.accept_recovered failures={} suppressed={}",
                         accept_failures, accept_suppressed);
    accept_failures = 0;
    accept_suppressed = 0;
    accept_logged_at = {};
  }
  accept_backoff = std::chrono::milliseconds{0};
  auto id = next_conn++;
  auto s = std::make_shared<session>(shared_from_this(), std::move(sock), id);
  {
    std::lock_guard<std::mutex> guard{mtx};
    sessions.emplace(id, s);
  }
  if (++connections > opts.max_connections)
    s->reject();
  else
    s->start();
  do_accept();
}

// Out of descriptors (EMFILE, ENFILE) and similar: the pending connection
// stays in the backlog, so accepting again at once fails again at once.
// Wait instead, 10 ms doubling to 1 s, until an accept succeeds; log one
// line per interval with the count of the others.
void http_server::impl::on_accept_error(beast::error_code ec) {
  if (ec == net::error::operation_aborted || stopping)
    return;
  accept_errors_total.fetch_add(1, std::memory_order_relaxed);
  ++accept_failures;
  accept_backoff = accept_backoff.count() == 0
                     ? accept_backoff_min
                     : std::min(accept_backoff * 2,
                                std::chrono::milliseconds{accept_backoff_max});
  auto now = std::chrono::steady_clock::now();
  if (accept_logged_at == std::chrono::steady_clock::time_point{}
      || now - accept_logged_at >= accept_log_interval) {
    log::gateway()->warn("http.accept_failed error={} connections={} "
                         "retry_in_ms={} suppressed={}",
                         ec.message(), connections.load(),
                         accept_backoff.count(), accept_suppressed);
    accept_logged_at = now;
    accept_suppressed = 0;
  } else {
    ++accept_suppressed;
  }
  accept_retry.expires_after(accept_backoff);
  accept_retry.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec && !self->stopping)
      self->do_accept();
  });
}

// One descriptor per connection plus the reserve: raise the soft limit up
// to the hard one if needed, else lower the cap so that accept does not run
// out of descriptors under a full load.
void http_server::impl::fit_fd_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY)
    return;
  auto need = static_cast<rlim_t>(opts.max_connections)
              + static_cast<rlim_t>(opts.fd_reserve);
  if (lim.rlim_cur >= need)
    return;
  auto target = lim.rlim_max == RLIM_INFINITY ? need
                                               : std::min(need, lim.rlim_max);
  if (target > lim.rlim_cur) {
    rlimit raised = lim;
    raised.rlim_cur = target;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      log::gateway()->info("http.fd_limit_raised from={} to={} hard={}",
                           lim.rlim_cur, target, lim.rlim_max);
      lim.rlim_cur = target;
    }
  }
  if (lim.rlim_cur >= need)
    return;
  auto cap = fitting_connections(opts.max_connections, opts.fd_reserve,
                                 lim.rlim_cur);
  log::gateway()->warn("http.max_connections_lowered configured={} "
                       "effective={} nofile_limit={} reserve={} (raise the "
                       "descriptor limit to at least {}: ulimit -n, "
                       "LimitNOFILE)",
                       opts.max_connections, cap, lim.rlim_cur,
                       opts.fd_reserve, need);
  opts.max_connections = cap;
}

// Runs the event loop on this thread. An exception escaping a handler (none
// should: requests catch theirs) is counted and the loop goes on, rather
// than ending the process and every request in it.
void http_server::impl::serve() {
  for (;;) {
    try {
      ioc.run();
      return;
    } catch (const std::exception& e) {
      report_internal_error(0, 0, "event_loop", e.what());
    } catch (...) {
      report_internal_error(0, 0, "event_loop", "unknown exception");
    }
  }
}

void http_server::impl::session_closed(uint64_t id) {
  {
    std::lock_guard<std::mutex> guard{mtx};
    sessions.erase(id);
  }
  if (--connections == 0 && stopping)
    net::post(acceptor.get_executor(), [self = shared_from_this()] {
      self->grace.cancel();
      self->sweeper.cancel();
    });
}

/// Deadline granularity: timeouts fire up to this much late.
constexpr auto sweep_interval = std::chrono::milliseconds(100);

void http_server::impl::sweep() {
  std::vector<std::shared_ptr<session>> due;
  auto now = session::now_ns();
  {
    std::lock_guard<std::mutex> guard{mtx};
    for (auto& [id, weak] : sessions)
      if (auto s = weak.lock(); s && s->overdue(now))
        due.push_back(std::move(s));
  }
  for (auto& s : due)
    s->check_deadline();
  if (stopping && connections == 0)
    return;
  sweeper.expires_after(sweep_interval);
  sweeper.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec)
      self->sweep();
  });
}

void http_server::impl::begin_stop() {
  if (stopping.exchange(true))
    return;
  log::gateway()->info("http.stopping connections={}", connections.load());
  beast::error_code ignored;
  acceptor.close(ignored);
  accept_retry.cancel();
  signals.cancel(ignored);
  std::vector<std::shared_ptr<session>> open;
  {
    std::lock_guard<std::mutex> guard{mtx};
    for (auto& [id, weak] : sessions)
      if (auto s = weak.lock())
        open.push_back(std::move(s));
  }
  for (auto& s : open)
    s->shutdown();
  if (connections == 0) {
    sweeper.cancel();
    return;
  }
  grace.expires_after(opts.shutdown_grace);
  grace.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) {
      log::gateway()->warn("http.shutdown_grace_expired connections={}",
                           self->connections.load());
      self->ioc.stop();
    }
  });
}

std::unique_ptr<http_server>
http_server::listen(const http_server_options& opts, request_handler& handler,
                    std::string& error) {
  auto ptr = std::make_shared<impl>(opts, handler);
  ptr->fit_fd_limit();
  beast::error_code ec;
  auto addr = net::ip::make_address(opts.host, ec);
  if (ec) {
    error = "invalid http host '" + opts.host + "': " + ec.message();
    return nullptr;
  }
  tcp::endpoint ep{addr, opts.port};
  ptr->acceptor.open(ep.protocol(), ec);
  if (!ec)
    ptr->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    ptr->acceptor.bind(ep, ec);
  if (!ec)
    ptr->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    error = "cannot listen on " + opts.host + ":" + std::to_string(opts.port)
            + ": " + ec.message();
    return nullptr;
  }
  return std::unique_ptr<http_server>{new http_server(std::move(ptr))};
}

http_server::http_server(std::shared_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

http_server::~http_server() {
  impl_->ioc.stop();
}

std::size_t http_server::max_connections() const {
  return impl_->opts.max_connections;
}

uint16_t http_server::port() const {
  beast::error_code ec;
  auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

void http_server::run(bool handle_signals) {
  auto& st = *impl_;
  if (handle_signals) {
    st.signals.add(SIGINT);
    st.signals.add(SIGTERM);
    st.signals.async_wait([ptr = impl_](beast::error_code ec, int sig) {
      if (!ec) {
        log::gateway()->info("http.signal signal={}", sig);
        // On the acceptor's strand, like `stop`: the accept state (retry
        // timer included) is only touched there.
        net::post(ptr->acceptor.get_executor(),
                  [ptr] { ptr->begin_stop(); });
      }
    });
  }
  net::dispatch(st.acceptor.get_executor(), [ptr = impl_] {
    if (!ptr->stopping) {
      ptr->do_accept();
      ptr->sweep();
    }
  });
  std::vector<std::thread> extra;
  for (unsigned i = 1; i < std::max(1u, st.opts.threads); ++i)
    extra.emplace_back([ptr = impl_] { ptr->serve(); });
  st.serve();
  for (auto& t : extra)
    t.join();
}

void http_server::stop() {
  net::post(impl_->acceptor.get_executor(),
            [ptr = impl_] { ptr->begin_stop(); });
}

} // namespace oncegate::gateway
