#define CAF_SUITE http.http_server
#include "caf/test/unit_test.hpp"

#include "http/http_server.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/http/sockets.hpp"

using namespace oncegate::gateway;
using oncegate::test::lower;

namespace {

/// Answers by path: `/throw` throws, `/no-content` and `/not-modified` carry
/// a body HTTP forbids, `/bad-status` and `/interim` are no final status,
/// `/huge-header` has a field over the limit, `/crlf-header` a value that
/// would inject a field, `/bad-name` a name that is no token,
/// `/answer-then-throw` throws
/// after answering; anything else is 200 with a body naming the method.
class scripted_handler : public request_handler {
public:
  void handle(http_request req, responder done) override {
    auto path = req.path();
    if (path == "/throw")
      throw std::runtime_error("handler bug");
    if (path == "/never" || path == "/effect-then-never") {
      // Keeps the responder, as a handler waiting for the store does, and
      // never answers: the response timeout does.
      if (path == "/effect-then-never") {
        http_response late;
        late.status = 504;
        late.set("Content-Type", "text/plain");
        late.body = "may have happened";
        if (!req.deadline || !req.deadline->begin_effect(std::move(late)))
          throw std::logic_error("no deadline, or expired already");
      }
      std::lock_guard<std::mutex> guard{mtx_};
      parked_.push_back(std::move(done));
      return;
    }
    http_response res;
    res.set("Content-Type", "text/plain");
    res.body = "hello " + req.method;
    if (path == "/no-content")
      res.status = 204;
    else if (path == "/not-modified")
      res.status = 304;
    else if (path == "/bad-status")
      res.status = 1000;
    else if (path == "/interim")
      res.status = 103;
    else if (path == "/huge-header")
      res.set("X-Huge", std::string(70000, 'a'));
    else if (path == "/crlf-header")
      res.set("X-Note", "a\r\nSet-Cookie: session=stolen");
    else if (path == "/bad-name")
      res.set("X Bad:", "v");
    else if (path == "/echo") {
      res.body = req.method + " " + req.target + "\n";
      for (auto& [name, value] : req.headers)
        res.body += name + "=" + value + "\n";
      res.body += "body=" + req.body;
    } else if (path == "/own-framing") {
      res.set("Content-Length", "999");
      res.set("connection", "close");
      res.set("Transfer-Encoding", "chunked");
    }
    done(std::move(res));
    if (path == "/answer-then-throw")
      throw std::logic_error("handler bug after answering");
  }

  /// Answers every parked request now (late: the timeout answered).
  void answer_parked() {
    std::vector<responder> parked;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      parked.swap(parked_);
    }
    for (auto& done : parked) {
      http_response res;
      res.body = "too late";
      done(std::move(res));
    }
  }

private:
  std::mutex mtx_;
  std::vector<responder> parked_;
};

struct parsed_response {
  int status = 0;
  std::string version;
  /// Lower-case names.
  std::map<std::string, std::string> headers;
  std::string body;

  bool has(const std::string& name) const {
    return headers.count(name) > 0;
  }

  std::string get(const std::string& name) const {
    auto i = headers.find(name);
    return i == headers.end() ? std::string{} : i->second;
  }
};

/// One raw TCP connection to 127.0.0.1 with bounded reads.
class raw_client {
public:
  explicit raw_client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    auto addr = oncegate::test::loopback(port);
    if (fd_ < 0
        || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))
             != 0)
      std::abort();
  }

  ~raw_client() {
    ::close(fd_);
  }

  raw_client(const raw_client&) = delete;
  raw_client& operator=(const raw_client&) = delete;

  void send(std::string_view bytes) {
    oncegate::test::send_all(fd_, bytes);
  }

  /// The next response; `head` when it answers a HEAD request (no body
  /// whatever Content-Length says). None on timeout or a closed connection.
  std::optional<parsed_response> read(bool head = false) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{5};
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill(deadline))
        return std::nullopt;
    parsed_response res;
    auto head_block = buf_.substr(0, end);
    auto line_end = head_block.find("\r\n");
    auto status_line = head_block.substr(0, line_end);
    res.version = status_line.substr(0, status_line.find(' '));
    res.status = std::atoi(status_line.c_str() + res.version.size() + 1);
    size_t pos = line_end == std::string::npos ? head_block.size()
                                               : line_end + 2;
    while (pos < head_block.size()) {
      auto next = head_block.find("\r\n", pos);
      if (next == std::string::npos)
        next = head_block.size();
      auto line = head_block.substr(pos, next - pos);
      auto colon = line.find(':');
      auto value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ')
        value.erase(0, 1);
      res.headers[lower(line.substr(0, colon))] = value;
      pos = next + 2;
    }
    size_t length = 0;
    bool bodiless = head || res.status < 200 || res.status == 204
                    || res.status == 304;
    if (!bodiless && res.has("content-length"))
      length = std::strtoull(res.get("content-length").c_str(), nullptr, 10);
    while (buf_.size() < end + 4 + length)
      if (!fill(deadline))
        return std::nullopt;
    res.body = buf_.substr(end + 4, length);
    buf_.erase(0, end + 4 + length);
    return res;
  }

  /// Bytes received after the last complete response.
  const std::string& pending() const {
    return buf_;
  }

  /// Waits (bounded) for the peer to close; false if it sent more bytes or
  /// stayed open.
  bool closed_by_peer() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{5};
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0)
        continue;
      char c;
      auto n = ::recv(fd_, &c, 1, 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET))
        return true;
      if (n > 0)
        return false;
    }
    return false;
  }

private:
  bool fill(std::chrono::steady_clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      return false;
    char tmp[4096];
    auto n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0)
      return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string buf_;
};

/// A request without a body; `extra` holds more header lines.
std::string get(const std::string& path, const std::string& method = "GET",
                const std::string& version = "HTTP/1.1",
                const std::string& extra = "") {
  return method + ' ' + path + ' ' + version + "\r\nHost: 127.0.0.1\r\n"
         + extra + "\r\n";
}

/// A server on a free loopback port, run by one thread.
struct fixture {
  fixture() {
    http_server_options opts;
    opts.host = "127.0.0.1";
    opts.port = 0;
    opts.max_connections = 64;
    opts.response_timeout = std::chrono::milliseconds(300);
    std::string error;
    server = http_server::listen(opts, handler, error);
    if (!server)
      CAF_FAIL("cannot listen: " << error);
    runner = std::thread([this] { server->run(false); });
  }

  ~fixture() {
    server->stop();
    runner.join();
  }

  /// A fresh connection answers a plain GET: the server still serves.
  void check_serving() {
    raw_client c{server->port()};
    c.send(get("/ok"));
    auto res = c.read();
    CAF_REQUIRE(res);
    CAF_CHECK_EQUAL(res->status, 200);
    CAF_CHECK_EQUAL(res->body, "hello GET");
  }

  /// Sends GET `path` on `c`: the answer is a 500 problem.
  void check_internal_error(raw_client& c, const std::string& path) {
    c.send(get(path));
    auto res = c.read();
    CAF_REQUIRE(res);
    CAF_CHECK_EQUAL(res->status, 500);
    CAF_CHECK_EQUAL(res->get("content-type"), "application/problem+json");
    CAF_CHECK_NOT_EQUAL(
      res->body.find(
        "\"type\":\"https://oncegate.dev/problems/internal-error\""),
      std::string::npos);
  }

  scripted_handler handler;
  std::unique_ptr<http_server> server;
  std::thread runner;
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(http_server_tests, fixture)

CAF_TEST(a cap that fits the descriptor limit is kept) {
  // 64 connections + the default reserve fit any usual limit.
  CAF_CHECK_EQUAL(server->max_connections(), 64u);
}

CAF_TEST(a handler that throws gets a 500 problem and the server keeps serving) {
  auto before = transport_counters().internal_errors;
  {
    raw_client c{server->port()};
    check_internal_error(c, "/throw");
  }
  CAF_CHECK_EQUAL(transport_counters().internal_errors, before + 1);
  check_serving();
}

CAF_TEST(a handler that throws after answering gets one 500 and nothing else) {
  auto before = transport_counters().internal_errors;
  {
    raw_client c{server->port()};
    check_internal_error(c, "/answer-then-throw");
    // The answer posted before the exception is dropped, not written after.
    CAF_CHECK(c.closed_by_peer());
    CAF_CHECK_EQUAL(c.pending(), "");
  }
  CAF_CHECK_EQUAL(transport_counters().internal_errors, before + 1);
  check_serving();
}

CAF_TEST(an answer that must not be sent gets a 500 problem and the server keeps serving) {
  auto before = transport_counters().internal_errors;
  for (auto path : {"/bad-status", "/interim", "/huge-header", "/crlf-header",
                    "/bad-name"}) {
    CAF_MESSAGE("path " << path);
    raw_client c{server->port()};
    check_internal_error(c, path);
    check_serving();
  }
  CAF_CHECK_EQUAL(transport_counters().internal_errors, before + 5);
}

CAF_TEST(a handler that never answers gets 503 at the response timeout) {
  raw_client c{server->port()};
  c.send(get("/never"));
  auto res = c.read();
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 503);
  // The late answer is dropped: nothing more arrives.
  handler.answer_parked();
  CAF_CHECK(!c.read());
  check_serving();
}

CAF_TEST(a handler that began an effect gets its own answer at the timeout) {
  raw_client c{server->port()};
  c.send(get("/effect-then-never"));
  auto res = c.read();
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 504);
  CAF_CHECK_EQUAL(res->body, "may have happened");
  handler.answer_parked();
  check_serving();
}

CAF_TEST(an effect cannot begin once the timeout answered) {
  response_deadline d;
  CAF_CHECK(!d.expire());
  http_response res;
  CAF_CHECK(!d.begin_effect(res));
  response_deadline e;
  res.status = 504;
  CAF_CHECK(e.begin_effect(res));
  auto got = e.expire();
  CAF_REQUIRE(got);
  CAF_CHECK_EQUAL(got->status, 504);
}

CAF_TEST(a 204 or 304 answer with a body is sent without the body) {
  for (auto path : {"/no-content", "/not-modified"}) {
    CAF_MESSAGE("path " << path);
    raw_client c{server->port()};
    // Pipelined: a body leaking into the stream would corrupt the second.
    c.send(get(path) + get("/ok"));
    auto res = c.read();
    CAF_REQUIRE(res);
    CAF_CHECK_EQUAL(res->status, std::string_view{path} == "/no-content"
                                   ? 204
                                   : 304);
    CAF_CHECK(!res->has("content-length"));
    CAF_CHECK(!res->has("transfer-encoding"));
    auto next = c.read();
    CAF_REQUIRE(next);
    CAF_CHECK_EQUAL(next->status, 200);
    CAF_CHECK_EQUAL(next->body, "hello GET");
  }
  check_serving();
}

CAF_TEST(the handler gets lower-case names in order and the whole body) {
  raw_client c{server->port()};
  c.send("POST /echo?a=1 HTTP/1.1\r\nHost: x\r\nX-Mixed-CASE: One\r\n"
         "x-mixed-case:  two \r\nTransfer-Encoding: chunked\r\n\r\n"
         "3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n"
         "POST /echo HTTP/1.1\r\nHost: y\r\nContent-Length: 4\r\n\r\n"
         "wxyz");
  auto res = c.read();
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->body, "POST /echo?a=1\nhost=x\nx-mixed-case=One\n"
                             "x-mixed-case=two\ntransfer-encoding=chunked\n"
                             "body=abcde");
  auto next = c.read();
  CAF_REQUIRE(next);
  CAF_CHECK_EQUAL(next->body, "POST /echo\nhost=y\ncontent-length=4\n"
                              "body=wxyz");
}

// A trailer is not part of the header (RFC 9110 6.5.1): an Idempotency-Key
// sent there reached the handler as if it were a header, and a proxy that
// drops trailers would have sent the retry without it.
CAF_TEST(trailer fields never reach the handler) {
  raw_client c{server->port()};
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
         "\r\n3\r\nabc\r\n0\r\nIdempotency-Key: tk1\r\nX-Late: 1\r\n\r\n"
         "POST /echo HTTP/1.1\r\nHost: y\r\nContent-Length: 2\r\n\r\nok");
  auto res = c.read();
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->body, "POST /echo\nhost=x\ntransfer-encoding=chunked\n"
                             "body=abc");
  auto next = c.read();
  CAF_REQUIRE(next);
  CAF_CHECK_EQUAL(next->body, "POST /echo\nhost=y\ncontent-length=2\n"
                              "body=ok");
}

CAF_TEST(the framing fields are set by the server and not by the handler) {
  raw_client c{server->port()};
  // Pipelined: a wrong length would corrupt the second answer.
  c.send(get("/own-framing") + get("/ok"));
  auto res = c.read();
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 200);
  CAF_CHECK_EQUAL(res->get("content-length"), "9"); // "hello GET"
  CAF_CHECK(!res->has("transfer-encoding"));
  CAF_CHECK(!res->has("connection"));
  auto next = c.read();
  CAF_REQUIRE(next);
  CAF_CHECK_EQUAL(next->body, "hello GET");
}

CAF_TEST(a HEAD answer has the GET headers and no body) {
  raw_client c{server->port()};
  c.send(get("/ok", "HEAD") + get("/ok"));
  auto head = c.read(true);
  CAF_REQUIRE(head);
  CAF_CHECK_EQUAL(head->status, 200);
  CAF_CHECK_EQUAL(head->get("content-length"), "10"); // "hello HEAD"
  // The next bytes must be the second response, not a body.
  auto next = c.read();
  CAF_REQUIRE(next);
  CAF_CHECK_EQUAL(next->status, 200);
  CAF_CHECK_EQUAL(next->body, "hello GET");
  CAF_CHECK_EQUAL(c.pending(), "");
}

CAF_TEST(an HTTP 1.0 client asking for keep-alive keeps its connection) {
  raw_client c{server->port()};
  c.send(get("/ok", "GET", "HTTP/1.0", "Connection: keep-alive\r\n"));
  auto res = c.read();
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 200);
  CAF_CHECK_EQUAL(lower(res->get("connection")), "keep-alive");
  c.send(get("/ok", "GET", "HTTP/1.0", "Connection: keep-alive\r\n"));
  res = c.read();
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 200);
  CAF_CHECK_EQUAL(res->body, "hello GET");
}

CAF_TEST(an HTTP 1.0 client not asking for keep-alive is answered and closed) {
  raw_client c{server->port()};
  c.send(get("/ok", "GET", "HTTP/1.0"));
  auto res = c.read();
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 200);
  CAF_CHECK_NOT_EQUAL(lower(res->get("connection")), "keep-alive");
  CAF_CHECK(c.closed_by_peer());
}

CAF_TEST_FIXTURE_SCOPE_END()

namespace {

/// Answers every request from a thread of its own, like the node's actors
/// do: the answer reaches the connection from outside the server.
class later_handler : public request_handler {
public:
  ~later_handler() override {
    for (auto& t : threads_)
      t.join();
  }

  void handle(http_request req, responder done) override {
    std::lock_guard<std::mutex> guard{mtx_};
    threads_.emplace_back([target = req.target, done = std::move(done)] {
      http_response res;
      res.body = target;
      done(std::move(res));
    });
  }

private:
  std::mutex mtx_;
  std::vector<std::thread> threads_;
};

} // namespace

CAF_TEST(several server threads keep the answers of each connection in order) {
  later_handler handler;
  http_server_options opts;
  opts.host = "127.0.0.1";
  opts.port = 0;
  opts.threads = 4;
  std::string error;
  auto server = http_server::listen(opts, handler, error);
  CAF_REQUIRE(server);
  std::thread runner([&] { server->run(false); });
  constexpr int connections = 8;
  constexpr int requests = 25;
  std::vector<std::unique_ptr<raw_client>> clients;
  for (int c = 0; c < connections; ++c) {
    clients.emplace_back(std::make_unique<raw_client>(server->port()));
    std::string batch;
    for (int r = 0; r < requests; ++r)
      batch += get("/c" + std::to_string(c) + "/r" + std::to_string(r));
    clients.back()->send(batch); // pipelined
  }
  int in_order = 0;
  for (int c = 0; c < connections; ++c)
    for (int r = 0; r < requests; ++r) {
      auto res = clients[c]->read();
      if (res && res->status == 200
          && res->body == "/c" + std::to_string(c) + "/r" + std::to_string(r))
        ++in_order;
    }
  CAF_CHECK_EQUAL(in_order, connections * requests);
  clients.clear();
  server->stop();
  runner.join();
}

namespace {

// `/stall` queues a job on the loop (as the node queues the actors a
// request wakes) which blocks until `release`, as a commit on a stalled
// disk would, and answers at once; anything else is 200.
class stalling_handler : public request_handler {
public:
  std::function<void(std::function<void()>)> defer;

  void handle(http_request req, responder done) override {
    if (req.path() == "/stall")
      defer([this] {
        std::unique_lock<std::mutex> guard{mtx_};
        stalled_ = true;
        cv_.notify_all();
        // Bounded: a test that never releases fails, it does not hang.
        cv_.wait_for(guard, std::chrono::seconds(30),
                     [this] { return released_; });
      });
    http_response res;
    res.set("Content-Type", "text/plain");
    res.body = "ok";
    done(std::move(res));
  }

  bool wait_stalled() {
    std::unique_lock<std::mutex> guard{mtx_};
    return cv_.wait_for(guard, std::chrono::seconds(30),
                        [this] { return stalled_; });
  }

  void release() {
    std::lock_guard<std::mutex> guard{mtx_};
    released_ = true;
    cv_.notify_all();
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stalled_ = false;
  bool released_ = false;
};

} // namespace

CAF_TEST(a queued job that stalls the one loop thread does not stop serving) {
  stalling_handler handler;
  http_server_options opts;
  opts.host = "127.0.0.1";
  opts.port = 0;
  opts.stall_rescue = std::chrono::milliseconds(20);
  opts.on_loop_start = [&](std::function<void(std::function<void()>)> d) {
    handler.defer = std::move(d);
  };
  std::string error;
  auto server = http_server::listen(opts, handler, error);
  CAF_REQUIRE(server);
  std::thread runner([&] { server->run(false); });
  raw_client first{server->port()};
  first.send(get("/stall"));
  auto res = first.read();
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 200);
  CAF_REQUIRE(handler.wait_stalled());
  // The loop's thread is stuck in the job: the watcher serves meanwhile,
  // new connections and the stalled request's own connection alike.
  for (int i = 0; i < 3; ++i) {
    raw_client other{server->port()};
    other.send(get("/ok"));
    auto ans = other.read();
    CAF_REQUIRE(ans);
    CAF_CHECK_EQUAL(ans->status, 200);
  }
  first.send(get("/ok"));
  res = first.read();
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 200);
  handler.release();
  // And the loop's own thread serves again after the job.
  raw_client after{server->port()};
  after.send(get("/ok"));
  res = after.read();
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(res->status, 200);
  server->stop();
  runner.join();
}

CAF_TEST(the connection cap fits the descriptor limit) {
  // Enough descriptors: the configured cap stays.
  CAF_CHECK_EQUAL(fitting_connections(1000, 64, 2000), 1000u);
  CAF_CHECK_EQUAL(fitting_connections(1000, 64, 1064), 1000u);
  // Too few: what is left after the reserve.
  CAF_CHECK_EQUAL(fitting_connections(1000, 64, 1063), 999u);
  CAF_CHECK_EQUAL(fitting_connections(1000, 64, 256), 192u);
  // Not even the reserve fits: half the descriptors, at least one.
  CAF_CHECK_EQUAL(fitting_connections(1000, 64, 64), 32u);
  CAF_CHECK_EQUAL(fitting_connections(1000, 64, 1), 1u);
  CAF_CHECK_EQUAL(fitting_connections(10, 64, 64), 10u);
}
