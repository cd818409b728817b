// The listener: binding, the accept loop with its back-off, the
// connection cap and descriptor limit, the deadline sweep, signals, the
// TLS context's reload, and shutdown. A connection's own reading and
// writing (and its TLS handshake) is `http/http_session.*`; making a TLS
// context from files is `http/server_tls.*`.
#include "http/http_server.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include "common/logging.hpp"
#include "http/http_session.hpp"
#include "http/server_impl.hpp"
#include "http/server_tls.hpp"
#include "http/transport_errors.hpp"

namespace oncegate::gateway {

namespace {

/// At most one `http.accept_failed` line per this interval; the others are
/// counted in the next line's `suppressed`.
constexpr auto accept_log_interval = std::chrono::seconds(5);
/// First and longest wait before accepting again after a failed accept.
constexpr auto accept_backoff_min = std::chrono::milliseconds(10);
constexpr auto accept_backoff_max = std::chrono::milliseconds(1000);

// Waits for the next signal: SIGHUP reloads the TLS context and waits
// again; SIGINT and SIGTERM stop the server.
void wait_for_signal(std::shared_ptr<http_server::impl> ptr) {
  auto& signals = ptr->signals;
  signals.async_wait([ptr = std::move(ptr)](beast::error_code ec, int sig) {
    if (ec)
      return;
    log::gateway()->info("http.signal signal={}", sig);
    if (sig == SIGHUP) {
      // Loading files is not for the acceptor's strand (accepts would
      // wait); the swap itself is under the TLS lock.
      std::string error;
      ptr->reload_tls(error);
      if (!ptr->stopping)
        wait_for_signal(ptr);
      return;
    }
    // On the acceptor's strand, like `stop`: the accept state (retry
    // timer included) is only touched there.
    net::post(ptr->acceptor.get_executor(), [ptr] { ptr->begin_stop(); });
  });
}

} // namespace

std::size_t fitting_connections(std::size_t wanted, std::size_t reserve,
                                std::uint64_t nofile) {
  if (nofile >= reserve && nofile - reserve >= wanted)
    return wanted;
  if (nofile > reserve)
    return static_cast<std::size_t>(nofile - reserve);
  return std::min<std::size_t>(
    wanted, std::max<std::size_t>(1, static_cast<std::size_t>(nofile / 2)));
}

net::any_io_executor http_server::impl::connection_executor() {
  // One thread runs every handler in order already: a strand per
  // connection would only add its lock and type-erased hops to every
  // read, write and answer (measured: 7 % of a duplicate's CPU). With
  // more threads, each connection's handlers need their strand.
  if (opts.threads <= 1)
    return ioc.get_executor();
  return net::make_strand(ioc);
}

void http_server::impl::do_accept() {
  acceptor.async_accept(connection_executor(),
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
  auto s = detail::make_session(shared_from_this(), std::move(sock), id,
                                tls_on ? current_tls() : nullptr);
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
  detail::count_accept_error();
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
  if (opts.on_loop_start)
    opts.on_loop_start([this](std::function<void()> fn) {
      net::post(ioc, [this, fn = std::move(fn)] { run_job(fn); });
    });
  while (!detail::run_guarded(0, 0, "event_loop", [this] { ioc.run(); }))
    continue;
  if (opts.on_loop_end)
    opts.on_loop_end();
}

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

} // namespace

void http_server::impl::run_job(const std::function<void()>& job) {
  // Watched only on the one loop thread, set when there is a watcher (it
  // runs such jobs too while it rescues; they never block there: nothing
  // commits on a thread that does not run its own loop).
  if (std::this_thread::get_id() != loop_thread) {
    job();
    return;
  }
  {
    std::lock_guard<std::mutex> guard{rescue_mtx};
    job_since = steady_ns();
  }
  struct done {
    impl* self;
    ~done() {
      std::unique_lock<std::mutex> guard{self->rescue_mtx};
      self->job_since = 0;
      self->rescue_cv.wait(guard, [this] { return !self->rescuing; });
    }
  } ending{this};
  job();
}

void http_server::impl::watch() {
  auto period = opts.stall_rescue;
  std::unique_lock<std::mutex> guard{rescue_mtx};
  for (;;) {
    rescue_cv.wait_for(guard, period, [this] { return watch_stopped; });
    if (watch_stopped)
      return;
    if (job_since == 0
        || steady_ns() - job_since
             < std::chrono::duration_cast<std::chrono::nanoseconds>(period)
                 .count())
      continue;
    rescuing = true;
    log::gateway()->warn("http.loop_rescued stalled_ms={}",
                         (steady_ns() - job_since) / 1'000'000);
    while (job_since != 0 && !watch_stopped && !ioc.stopped()) {
      guard.unlock();
      detail::run_guarded(0, 0, "event_loop_rescue", [this, period] {
        ioc.run_one_for(period);
      });
      guard.lock();
    }
    rescuing = false;
    rescue_cv.notify_all();
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
  std::vector<std::shared_ptr<detail::session_base>> due;
  auto now = detail::session_base::now_ns();
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
  std::vector<std::shared_ptr<detail::session_base>> open;
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

std::shared_ptr<const server_tls> http_server::impl::current_tls() {
  std::lock_guard<std::mutex> guard{tls_mtx};
  return tls;
}

bool http_server::impl::reload_tls(std::string& error) {
  auto old = current_tls();
  if (!old) {
    error = "the listener has no TLS (http.tls-certificate)";
    log::gateway()->info("http.tls_reload_skipped reason=no_tls");
    return false;
  }
  server_tls_files::part culprit{};
  auto fresh = server_tls::load(old->files(), error, culprit);
  if (!fresh) {
    log::gateway()->error("http.tls_reload_failed error={} (new "
                          "connections keep certificate serial={} "
                          "not_after={})",
                          error, old->serial(), old->not_after());
    return false;
  }
  {
    std::lock_guard<std::mutex> guard{tls_mtx};
    tls = fresh;
  }
  log::gateway()->info("http.tls_reloaded certificate={} serial={} "
                       "not_after={} previous_serial={}",
                       fresh->files().certificate, fresh->serial(),
                       fresh->not_after(), old->serial());
  if (fresh->out_of_validity())
    log::gateway()->warn("http.tls_certificate_out_of_validity "
                         "certificate={} not_after={} (clients refuse it)",
                         fresh->files().certificate, fresh->not_after());
  return true;
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

bool http_server::tls() const {
  return impl_->tls_on;
}

bool http_server::reload_tls(std::string& error) {
  return impl_->reload_tls(error);
}

void http_server::handle_signals() {
  auto& st = *impl_;
  if (st.signals_caught.exchange(true))
    return;
  st.signals.add(SIGINT);
  st.signals.add(SIGTERM);
  st.signals.add(SIGHUP);
  wait_for_signal(impl_);
}

uint16_t http_server::port() const {
  beast::error_code ec;
  auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

void http_server::run(bool handle_signals) {
  auto& st = *impl_;
  if (handle_signals)
    this->handle_signals();
  net::dispatch(st.acceptor.get_executor(), [ptr = impl_] {
    if (!ptr->stopping) {
      ptr->do_accept();
      ptr->sweep();
    }
  });
  std::vector<std::thread> extra;
  for (unsigned i = 1; i < std::max(1u, st.opts.threads); ++i)
    extra.emplace_back([ptr = impl_] { ptr->serve(); });
  std::thread watcher;
  if (st.opts.threads <= 1 && st.opts.stall_rescue.count() > 0) {
    st.loop_thread = std::this_thread::get_id();
    watcher = std::thread{[ptr = impl_] { ptr->watch(); }};
  }
  st.serve();
  for (auto& t : extra)
    t.join();
  if (watcher.joinable()) {
    {
      std::lock_guard<std::mutex> guard{st.rescue_mtx};
      st.watch_stopped = true;
    }
    st.rescue_cv.notify_all();
    watcher.join();
  }
}

void http_server::stop() {
  net::post(impl_->acceptor.get_executor(),
            [ptr = impl_] { ptr->begin_stop(); });
}

} // namespace oncegate::gateway
