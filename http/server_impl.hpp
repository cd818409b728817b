#pragma once

// @private: the listener's state, shared by the accept loop
// (`http/http_server.cpp`) and the connections (`http/http_session.*`).
// Only state and the listener's own steps; a connection's reading, writing
// and deadlines are the session's.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/error.hpp>

#include "http/http_server.hpp"

namespace oncegate::gateway {

// Private to the server's translation units, as they were in one file.
namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace detail {

class session_base;

} // namespace detail

struct http_server::impl : std::enable_shared_from_this<impl> {
  http_server_options opts;
  request_handler& handler;
  net::io_context ioc;
  tcp::acceptor acceptor;
  net::signal_set signals;
  net::steady_timer grace;
  /// One timer for every connection's deadline (see `http_session::arm`).
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
  /// `handle_signals` ran (once per server).
  std::atomic<bool> signals_caught{false};
  std::mutex mtx;
  std::unordered_map<uint64_t, std::weak_ptr<detail::session_base>> sessions;
  /// Whether the listener speaks HTTPS (fixed at `listen`).
  bool tls_on = false;
  /// The TLS context new connections are made from; a reload swaps it.
  /// Under `tls_mtx`, taken once per accepted TLS connection.
  std::mutex tls_mtx;
  std::shared_ptr<const server_tls> tls;
  // The stall rescue (`stall_rescue`, one loop thread only). A queued job
  // runs on the loop's thread since `job_since` (steady ns; 0: none);
  // while `rescuing`, the watcher serves the loop and the job's thread,
  // done, waits for it before serving again (no strands: one thread runs
  // handlers at a time). All three under `rescue_mtx`.
  std::mutex rescue_mtx;
  std::condition_variable rescue_cv;
  int64_t job_since = 0;
  bool rescuing = false;
  bool watch_stopped = false;
  std::thread::id loop_thread;

  impl(const http_server_options& o, request_handler& h)
    : opts(o),
      handler(h),
      ioc(static_cast<int>(std::max(1u, o.threads))),
      acceptor(net::make_strand(ioc)),
      signals(ioc),
      grace(acceptor.get_executor()),
      sweeper(acceptor.get_executor()),
      accept_retry(acceptor.get_executor()),
      tls_on(o.tls != nullptr),
      // Held here only: `opts` keeping it would pin the first context
      // after every reload.
      tls(std::move(opts.tls)) {
    // nop
  }

  /// Where a new connection's handlers run: serialised per connection.
  net::any_io_executor connection_executor();
  void do_accept();
  void on_accept(beast::error_code ec, tcp::socket sock);
  void on_accept_error(beast::error_code ec);
  void fit_fd_limit();
  void serve();
  /// Runs `job` queued by `on_loop_start`'s deferrer (see `watch`).
  void run_job(const std::function<void()>& job);
  /// The watcher: rescues the loop from a job stalled past `stall_rescue`.
  void watch();
  void begin_stop();
  void session_closed(uint64_t id);
  void sweep();
  /// The context for the next connection (null: plain HTTP).
  std::shared_ptr<const server_tls> current_tls();
  bool reload_tls(std::string& error);
};

} // namespace oncegate::gateway
