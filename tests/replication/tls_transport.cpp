#define CAF_SUITE replication.tls_transport
#include "caf/test/unit_test.hpp"

// The mutual-TLS Raft transport on a real libuv loop and loopback sockets:
// what libraft sees of it (streams, preamble), a real three-server libraft
// cluster over it, and every way a stranger or a misbehaving member is
// refused. Clients that need a blocking TLS handshake run on their own
// thread while the test thread turns the loop; every wait is the loop
// turning until a condition holds or a bound passes, never a fixed sleep.

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "replication/tls_transport.hpp"
#include "replication/tls_transport_impl.hpp"
#include "tests/common/fixture.hpp"
#include "tests/common/tls_offer.hpp"

using namespace oncegate;
using namespace oncegate::cluster;
using namespace std::chrono_literals;

namespace {

// -- certificates ---------------------------------------------------------------

// Made once per process with the product's script: the cluster CA with
// nodes 1-4, a foreign CA with its own node 2, and a self-signed node 2.
struct cert_files {
  test::temp_dir dir;
  std::string ca, foreign_ca, self_pem, self_key;

  cert_files() {
    auto script = std::string{ONCEGATE_SOURCE_DIR} + "/scripts/cluster-certs.sh";
    auto quiet = " >/dev/null 2>&1";
    auto d = dir.path().string();
    CAF_REQUIRE_EQUAL(std::system(("bash " + script + " " + d + " 1 2 3 4"
                                   + quiet)
                                    .c_str()),
                      0);
    CAF_REQUIRE_EQUAL(std::system(("bash " + script + " " + d + "/foreign 2"
                                   + quiet)
                                    .c_str()),
                      0);
    self_pem = dir.file("self.pem");
    self_key = dir.file("self.key");
    auto self = "openssl req -x509 -newkey ec -pkeyopt "
                "ec_paramgen_curve:prime256v1 -nodes -days 2 "
                "-subj /CN=node-2.oncegate "
                "-addext subjectAltName=DNS:node-2.oncegate "
                "-addext extendedKeyUsage=serverAuth,clientAuth -keyout "
                + self_key + " -out " + self_pem + quiet;
    CAF_REQUIRE_EQUAL(std::system(self.c_str()), 0);
    ca = dir.file("ca.pem");
    foreign_ca = dir.file("foreign/ca.pem");
  }

  std::string pem(uint64_t id) const {
    return dir.file("node-" + std::to_string(id) + ".pem");
  }
  std::string key(uint64_t id) const {
    return dir.file("node-" + std::to_string(id) + ".key");
  }
  std::string foreign_pem() const {
    return dir.file("foreign/node-2.pem");
  }
  std::string foreign_key() const {
    return dir.file("foreign/node-2.key");
  }
};

const cert_files& certs() {
  static auto files = std::make_unique<cert_files>();
  return *files;
}

// -- sockets ----------------------------------------------------------------------

// A TCP port that was free a moment ago (bound to port 0, then closed).
uint16_t free_port() {
  auto fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CAF_REQUIRE_EQUAL(::bind(fd, reinterpret_cast<sockaddr*>(&addr),
                           sizeof(addr)),
                    0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string local(uint16_t port) {
  return "127.0.0.1:" + std::to_string(port);
}

uint16_t port_of(const std::string& address) {
  return static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

// A blocking TCP connection to 127.0.0.1:port (completes in the kernel's
// backlog, whether or not the server accepts).
int tcp_connect(uint16_t port) {
  auto fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  CAF_REQUIRE_EQUAL(::connect(fd, reinterpret_cast<sockaddr*>(&addr),
                              sizeof(addr)),
                    0);
  timeval tv{10, 0}; // a client never waits forever for a verdict
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

// A listening socket on 127.0.0.1 that never accepts; its port.
int silent_listener(uint16_t& port) {
  auto fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CAF_REQUIRE_EQUAL(::bind(fd, reinterpret_cast<sockaddr*>(&addr),
                           sizeof(addr)),
                    0);
  CAF_REQUIRE_EQUAL(::listen(fd, 16), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  return fd;
}

// Whether the other side closed `fd` (reads what is left without waiting).
bool closed_by_peer(int fd) {
  char buf[4096];
  for (;;) {
    auto n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0)
      continue;
    if (n == 0)
      return true;
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
}

// libraft's preamble, written independently of the transport (libraft
// 0.15 src/uv_tcp_connect.c): protocol, id and the size of the address
// buffer as 64-bit little-endian words, then the address NUL-padded to 8.
std::string preamble(uint64_t id, const std::string& address,
                     uint64_t protocol = 1, uint64_t len_override = 0) {
  auto len = len_override ? len_override : (address.size() + 1 + 7) / 8 * 8;
  std::string out(24, '\0');
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>(protocol >> (8 * i));
    out[8 + i] = static_cast<char>(id >> (8 * i));
    out[16 + i] = static_cast<char>(len >> (8 * i));
  }
  auto body = address;
  body.resize(len_override ? std::min<uint64_t>(len, 64) : len, '\0');
  return out + body;
}

// A client with its own blocking TLS stack on its own thread: handshake
// (with `cert`/`key`, or none), send `payload`, then read until the server
// closes.
class tls_client {
public:
  tls_client(uint16_t port, std::string cert, std::string key,
             std::string payload) {
    thread_ = std::thread{[=] { run(port, cert, key, payload); }};
  }

  ~tls_client() {
    thread_.join();
  }

  bool done() const {
    return done_.load();
  }

  /// The server closed (or the handshake failed) before the client's
  /// 10-second read timeout.
  bool refused() const {
    return refused_.load();
  }

private:
  void run(uint16_t port, const std::string& cert, const std::string& key,
           const std::string& payload) {
    auto fd = tcp_connect(port);
    auto ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    if (!cert.empty()) {
      SSL_CTX_use_certificate_chain_file(ctx, cert.c_str());
      SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM);
    }
    auto ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    bool refused = true;
    if (SSL_connect(ssl) == 1) {
      if (!payload.empty())
        SSL_write(ssl, payload.data(), static_cast<int>(payload.size()));
      char buf[256];
      int n;
      errno = 0;
      while ((n = SSL_read(ssl, buf, sizeof(buf))) > 0)
        ; // nop
      auto err = SSL_get_error(ssl, n);
      // A read timeout shows as a syscall error with EAGAIN.
      refused = !(err == SSL_ERROR_SYSCALL
                  && (errno == EAGAIN || errno == EWOULDBLOCK));
    }
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    ::close(fd);
    ERR_clear_error();
    refused_ = refused;
    done_ = true;
  }

  std::thread thread_;
  std::atomic<bool> done_{false};
  std::atomic<bool> refused_{false};
};

// -- the loop ----------------------------------------------------------------------

// Stands in for libraft on one end of a transport's stream: reads all it
// gets and writes what it is told to.
struct raft_side {
  uv_stream_t* stream = nullptr;
  std::string received;
  bool eof = false;
  size_t writes_done = 0;
  int write_status = 0;

  explicit raft_side(uv_stream_t* s) : stream(s) {
    stream->data = this;
  }

  void start_reading() {
    uv_read_start(
      stream,
      [](uv_handle_t*, size_t, uv_buf_t* buf) {
        static thread_local char chunk[64 * 1024];
        *buf = uv_buf_init(chunk, sizeof(chunk));
      },
      [](uv_stream_t* s, ssize_t nread, const uv_buf_t* buf) {
        auto self = static_cast<raft_side*>(s->data);
        if (nread > 0)
          self->received.append(buf->base, static_cast<size_t>(nread));
        else if (nread < 0)
          self->eof = true;
      });
  }

  void stop_reading() {
    uv_read_stop(stream);
  }

  // Writes `data` (kept alive by the request until it completed).
  void write(std::shared_ptr<const std::string> data) {
    struct req {
      uv_write_t w;
      std::shared_ptr<const std::string> data;
      raft_side* self;
    };
    auto r = new req{{}, data, this};
    r->w.data = r;
    auto buf = uv_buf_init(const_cast<char*>(data->data()),
                           static_cast<unsigned>(data->size()));
    CAF_REQUIRE_EQUAL(uv_write(&r->w, stream, &buf, 1,
                               [](uv_write_t* w, int status) {
                                 std::unique_ptr<req> r{
                                   static_cast<req*>(w->data)};
                                 ++r->self->writes_done;
                                 if (status != 0)
                                   r->self->write_status = status;
                               }),
                      0);
  }

  // As libraft does: uv_close, then raft_free.
  void close() {
    uv_close(reinterpret_cast<uv_handle_t*>(stream),
             [](uv_handle_t* h) { raft_free(h); });
  }
};

struct loop_fixture {
  uv_loop_t loop;
  uv_timer_t ticker; // makes the loop turn at least every 5 ms while waiting

  loop_fixture() {
    std::signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&loop);
    uv_timer_init(&loop, &ticker);
    certs(); // made before any deadline starts
  }

  ~loop_fixture() {
    uv_close(reinterpret_cast<uv_handle_t*>(&ticker), nullptr);
    auto until = std::chrono::steady_clock::now() + 5s;
    while (uv_loop_alive(&loop) && std::chrono::steady_clock::now() < until)
      uv_run(&loop, UV_RUN_ONCE);
    auto rv = uv_loop_close(&loop);
    if (rv != 0)
      uv_print_all_handles(&loop, stderr);
    CAF_CHECK_EQUAL(rv, 0); // nothing left behind on the loop
  }

  // Turns the loop until `pred` holds or `bound` passed.
  bool run_until(const std::function<bool()>& pred,
                 std::chrono::milliseconds bound = 10s) {
    uv_timer_start(&ticker, [](uv_timer_t*) {}, 5, 5);
    auto until = std::chrono::steady_clock::now() + bound;
    while (!pred() && std::chrono::steady_clock::now() < until)
      uv_run(&loop, UV_RUN_ONCE);
    uv_timer_stop(&ticker);
    return pred();
  }
};

struct accepted_stream {
  uint64_t id;
  std::string address;
  uv_stream_t* stream;
};

// One transport as libraft would drive it: init, listen, connect, close.
struct endpoint {
  loop_fixture& fx;
  uint64_t id;
  std::string address;
  tls_transport_options opts;
  raft_uv_transport t;
  std::vector<accepted_stream> accepts;
  bool closed = false;
  bool started = false;

  endpoint(loop_fixture& f, uint64_t i, std::string addr,
           std::map<uint64_t, std::string> peers)
    : fx(f), id(i), address(std::move(addr)) {
    std::memset(&t, 0, sizeof(t));
    opts.ca_file = certs().ca;
    opts.cert_file = certs().pem(i);
    opts.key_file = certs().key(i);
    opts.peers = std::move(peers);
    // Tests about timeouts set their own; the rest must not depend on the
    // machine's speed (valgrind, shared cores).
    opts.handshake_timeout = 10s;
  }

  ~endpoint() {
    for (auto& a : accepts)
      if (a.stream != nullptr)
        uv_close(reinterpret_cast<uv_handle_t*>(a.stream),
                 [](uv_handle_t* h) { raft_free(h); });
    stop();
  }

  void start(bool listen = true) {
    std::string error;
    CAF_REQUIRE_EQUAL(tls_transport_init(&t, &fx.loop, opts, error), 0);
    t.data = this;
    started = true;
    CAF_REQUIRE_EQUAL(t.init(&t, id, address.c_str()), 0);
    if (listen)
      CAF_REQUIRE_EQUAL(t.listen(&t,
                                 [](raft_uv_transport* t, raft_id id,
                                    const char* address, uv_stream_t* s) {
                                   static_cast<endpoint*>(t->data)
                                     ->accepts.push_back({id, address, s});
                                 }),
                        0);
  }

  void stop() {
    if (!started)
      return;
    started = false;
    t.close(&t, [](raft_uv_transport* t) {
      static_cast<endpoint*>(t->data)->closed = true;
    });
    CAF_CHECK(fx.run_until([this] { return closed; }, 5s));
    if (closed)
      tls_transport_close(&t);
  }

  tls_transport_stats stats() {
    return tls_transport_stats_of(&t);
  }

  // Takes the first accepted stream over (the caller closes it).
  uv_stream_t* take_accepted() {
    auto s = accepts.at(0).stream;
    accepts.at(0).stream = nullptr;
    return s;
  }
};

struct connect_attempt {
  raft_uv_connect req;
  bool done = false;
  int status = -1;
  uv_stream_t* stream = nullptr;

  int start(endpoint& from, uint64_t id, const std::string& address) {
    req.data = this;
    return from.t.connect(&from.t, &req, id, address.c_str(),
                          [](raft_uv_connect* req, uv_stream_t* s, int st) {
                            auto self = static_cast<connect_attempt*>(req->data);
                            self->done = true;
                            self->status = st;
                            self->stream = s;
                          });
  }
};

// Bytes that differ at every position of a long stretch.
std::shared_ptr<const std::string> pattern(size_t n, uint32_t seed) {
  auto out = std::make_shared<std::string>(n, '\0');
  uint32_t x = seed | 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    (*out)[i] = static_cast<char>(x);
  }
  return out;
}

struct fixture : loop_fixture {
  std::string addr1 = local(free_port());
  std::string addr2 = local(free_port());
  std::string addr3 = local(free_port());
  std::map<uint64_t, std::string> members{{1, addr1}, {2, addr2}, {3, addr3}};
};

// -- a real libraft cluster ---------------------------------------------------------

struct raft_member {
  uint64_t id;
  std::string address;
  test::temp_dir dir;
  raft_uv_transport transport;
  raft_io io;
  struct raft r;
  raft_fsm fsm;
  uint64_t applied = 0;
  std::string last;
  bool closed = false;

  raft_member(uint64_t i, std::string addr) : id(i), address(std::move(addr)) {
    std::memset(&transport, 0, sizeof(transport));
    std::memset(&io, 0, sizeof(io));
    std::memset(&r, 0, sizeof(r));
    std::memset(&fsm, 0, sizeof(fsm));
    fsm.version = 1;
    fsm.data = this;
    fsm.apply = [](raft_fsm* f, const raft_buffer* buf, void** result) {
      auto self = static_cast<raft_member*>(f->data);
      ++self->applied;
      self->last.assign(static_cast<const char*>(buf->base), buf->len);
      *result = nullptr;
      return 0;
    };
    fsm.snapshot = [](raft_fsm*, raft_buffer* bufs[], unsigned* n) {
      *bufs = static_cast<raft_buffer*>(raft_malloc(sizeof(raft_buffer)));
      (*bufs)[0].len = 8;
      (*bufs)[0].base = raft_calloc(1, 8);
      *n = 1;
      return 0;
    };
    fsm.restore = [](raft_fsm*, raft_buffer* buf) {
      raft_free(buf->base);
      return 0;
    };
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(tls_transport_tests, fixture)

CAF_TEST(the TCP transport of libraft writes the preamble this test expects) {
  // The reference for every preamble below: what libraft 0.15 itself sends.
  uv_tcp_t server;
  uv_tcp_init(&loop, &server);
  sockaddr_in addr;
  uv_ip4_addr("127.0.0.1", 0, &addr);
  uv_tcp_bind(&server, reinterpret_cast<sockaddr*>(&addr), 0);
  struct capture {
    uv_tcp_t conn;
    std::string bytes;
    bool open = false;
  } cap;
  server.data = &cap;
  CAF_REQUIRE_EQUAL(uv_listen(reinterpret_cast<uv_stream_t*>(&server), 4,
                              [](uv_stream_t* s, int) {
    auto c = static_cast<capture*>(s->data);
    uv_tcp_init(s->loop, &c->conn);
    c->conn.data = c;
    c->open = true;
    uv_accept(s, reinterpret_cast<uv_stream_t*>(&c->conn));
    uv_read_start(reinterpret_cast<uv_stream_t*>(&c->conn),
                  [](uv_handle_t*, size_t, uv_buf_t* buf) {
                    static char chunk[1024];
                    *buf = uv_buf_init(chunk, sizeof(chunk));
                  },
                  [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
                    if (n > 0)
                      static_cast<capture*>(s->data)->bytes.append(
                        buf->base, static_cast<size_t>(n));
                  });
  }),
                    0);
  int len = sizeof(addr);
  uv_tcp_getsockname(&server, reinterpret_cast<sockaddr*>(&addr), &len);
  auto target = local(ntohs(addr.sin_port));
  raft_uv_transport tcp;
  std::memset(&tcp, 0, sizeof(tcp));
  CAF_REQUIRE_EQUAL(raft_uv_tcp_init(&tcp, &loop), 0);
  std::string own = "127.0.0.1:9001"; // 15 characters: 16 with the NUL
  CAF_REQUIRE_EQUAL(tcp.init(&tcp, 7, own.c_str()), 0);
  connect_attempt attempt;
  attempt.req.data = &attempt;
  CAF_REQUIRE_EQUAL(tcp.connect(&tcp, &attempt.req, 1, target.c_str(),
                                [](raft_uv_connect* req, uv_stream_t* s, int st) {
                                  auto self = static_cast<connect_attempt*>(
                                    req->data);
                                  self->done = true;
                                  self->status = st;
                                  self->stream = s;
                                }),
                    0);
  auto expected = preamble(7, own);
  CAF_CHECK(run_until([&] { return attempt.done && cap.bytes.size() >= expected.size(); }));
  CAF_CHECK_EQUAL(attempt.status, 0);
  // libraft leaves the padding uninitialised: compare up to the NUL.
  CAF_REQUIRE_EQUAL(cap.bytes.size(), expected.size());
  CAF_CHECK_EQUAL(cap.bytes.substr(0, 24 + own.size() + 1),
                  expected.substr(0, 24 + own.size() + 1));
  CAF_CHECK_EQUAL(expected.size(), 24u + 16u);
  if (attempt.stream != nullptr)
    uv_close(reinterpret_cast<uv_handle_t*>(attempt.stream),
             [](uv_handle_t* h) { raft_free(h); });
  bool closed = false;
  tcp.data = &closed;
  tcp.close(&tcp, [](raft_uv_transport* t) { *static_cast<bool*>(t->data) = true; });
  if (cap.open)
    uv_close(reinterpret_cast<uv_handle_t*>(&cap.conn), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&server), nullptr);
  CAF_CHECK(run_until([&] { return closed; }));
  raft_uv_tcp_close(&tcp);
}

CAF_TEST(a connecting transport sends the libraft preamble over TLS) {
  // A raw TLS server with node 2's certificate records what node 1 sends.
  uint16_t port = 0;
  auto lfd = silent_listener(port);
  std::string received;
  std::atomic<bool> got{false};
  auto own = addr1;
  auto expected = preamble(1, own);
  std::thread server{[&] {
    auto fd = ::accept(lfd, nullptr, nullptr);
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    auto ctx = SSL_CTX_new(TLS_server_method());
    SSL_CTX_use_certificate_chain_file(ctx, certs().pem(2).c_str());
    SSL_CTX_use_PrivateKey_file(ctx, certs().key(2).c_str(), SSL_FILETYPE_PEM);
    SSL_CTX_load_verify_locations(ctx, certs().ca.c_str(), nullptr);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                       nullptr);
    auto ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) == 1) {
      char buf[256];
      while (received.size() < expected.size()) {
        auto n = SSL_read(ssl, buf, sizeof(buf));
        if (n <= 0)
          break;
        received.append(buf, static_cast<size_t>(n));
      }
    }
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    ::close(fd);
    ERR_clear_error();
    got = true;
  }};
  members[2] = local(port);
  endpoint a{*this, 1, addr1, members};
  a.start(false);
  connect_attempt attempt;
  CAF_REQUIRE_EQUAL(attempt.start(a, 2, members[2]), 0);
  CAF_CHECK(run_until([&] { return attempt.done && got.load(); }));
  server.join();
  ::close(lfd);
  CAF_CHECK_EQUAL(attempt.status, 0);
  CAF_CHECK_EQUAL(received, expected); // byte-exact, padding zeroed
  if (attempt.stream != nullptr)
    raft_side{attempt.stream}.close();
}

CAF_TEST(two transports carry bytes both ways including megabytes) {
  endpoint a{*this, 1, addr1, members};
  endpoint b{*this, 2, addr2, members};
  a.start();
  b.start();
  connect_attempt attempt;
  CAF_REQUIRE_EQUAL(attempt.start(a, 2, addr2), 0);
  CAF_REQUIRE(run_until([&] { return attempt.done && !b.accepts.empty(); }));
  CAF_REQUIRE_EQUAL(attempt.status, 0);
  CAF_CHECK_EQUAL(b.accepts[0].id, 1u);
  CAF_CHECK_EQUAL(b.accepts[0].address, addr1);
  raft_side one{attempt.stream};
  raft_side two{b.take_accepted()};
  one.start_reading();
  two.start_reading();
  one.write(std::make_shared<std::string>("hello from 1"));
  two.write(std::make_shared<std::string>("hello from 2"));
  CAF_CHECK(run_until([&] {
    return one.received.size() >= 12 && two.received.size() >= 12;
  }));
  CAF_CHECK_EQUAL(two.received, "hello from 1");
  CAF_CHECK_EQUAL(one.received, "hello from 2");
  one.received.clear();
  two.received.clear();
  // Several megabytes each way at once, in writes larger than any buffer.
  auto up = pattern(8 * 1024 * 1024, 1);
  auto down = pattern(6 * 1024 * 1024, 2);
  for (size_t off = 0; off < up->size(); off += 2 * 1024 * 1024)
    one.write(std::make_shared<std::string>(up->substr(off, 2 * 1024 * 1024)));
  two.write(down);
  uint64_t peak = 0;
  CAF_CHECK(run_until(
    [&] {
      peak = std::max({peak, a.stats().buffered_bytes, b.stats().buffered_bytes});
      return two.received.size() >= up->size()
             && one.received.size() >= down->size();
    },
    60s));
  CAF_CHECK(two.received == *up);
  CAF_CHECK(one.received == *down);
  CAF_CHECK_EQUAL(one.write_status, 0);
  CAF_CHECK_EQUAL(two.write_status, 0);
  CAF_MESSAGE("peak bytes queued by one transport: " << peak);
  CAF_CHECK_LESS_OR_EQUAL(peak, 1024u * 1024u);
  CAF_CHECK_EQUAL(a.stats().connected, 1u);
  CAF_CHECK_EQUAL(b.stats().accepted, 1u);
  // libraft closing its end closes the connection on both sides.
  one.close();
  CAF_CHECK(run_until([&] { return two.eof; }));
  two.close();
}

CAF_TEST(a stalled reader holds the writer back with bounded buffers) {
  endpoint a{*this, 1, addr1, members};
  endpoint b{*this, 2, addr2, members};
  a.start();
  b.start();
  connect_attempt attempt;
  CAF_REQUIRE_EQUAL(attempt.start(a, 2, addr2), 0);
  CAF_REQUIRE(run_until([&] { return attempt.done && !b.accepts.empty(); }));
  CAF_REQUIRE_EQUAL(attempt.status, 0);
  raft_side one{attempt.stream};
  raft_side two{b.take_accepted()};
  // Node 2's libraft does not read: its socketpair fills, then node 2
  // stops reading TCP, TCP fills, and node 1 stops reading its pipe.
  auto data = pattern(32 * 1024 * 1024, 3);
  one.write(data);
  uint64_t peak = 0;
  CAF_CHECK(run_until([&] {
    peak = std::max({peak, a.stats().buffered_bytes, b.stats().buffered_bytes});
    return a.stats().backpressure_pauses > 0 && b.stats().backpressure_pauses > 0;
  }, 30s));
  CAF_CHECK_EQUAL(one.writes_done, 0u); // the rest waits in libraft's queue
  CAF_CHECK_GREATER(uv_stream_get_write_queue_size(one.stream), 0u);
  CAF_MESSAGE("stalled: peak queued " << peak << ", still in libraft's queue "
                                      << uv_stream_get_write_queue_size(
                                           one.stream));
  CAF_CHECK_LESS_OR_EQUAL(peak, 1024u * 1024u);
  two.start_reading();
  CAF_CHECK(run_until([&] {
    peak = std::max({peak, a.stats().buffered_bytes, b.stats().buffered_bytes});
    return two.received.size() >= data->size();
  }, 60s));
  CAF_CHECK(two.received == *data);
  CAF_CHECK_EQUAL(one.writes_done, 1u);
  CAF_CHECK_LESS_OR_EQUAL(peak, 1024u * 1024u);
  one.close();
  two.close();
}

CAF_TEST(three libraft servers elect a leader and apply an entry over TLS) {
  std::vector<std::unique_ptr<raft_member>> nodes;
  for (uint64_t id = 1; id <= 3; ++id)
    nodes.push_back(std::make_unique<raft_member>(id, members[id]));
  for (auto& n : nodes) {
    tls_transport_options opts;
    opts.ca_file = certs().ca;
    opts.cert_file = certs().pem(n->id);
    opts.key_file = certs().key(n->id);
    opts.peers = members;
    opts.handshake_timeout = 10s;
    std::string error;
    CAF_REQUIRE_EQUAL(tls_transport_init(&n->transport, &loop, opts, error), 0);
    CAF_REQUIRE_EQUAL(raft_uv_init(&n->io, &loop, n->dir.path().c_str(),
                                   &n->transport),
                      0);
    raft_uv_set_connect_retry_delay(&n->io, 50);
    CAF_REQUIRE_EQUAL(raft_init(&n->r, &n->io, &n->fsm, n->id,
                                n->address.c_str()),
                      0);
    raft_set_election_timeout(&n->r, 300);
    raft_set_heartbeat_timeout(&n->r, 30);
    raft_configuration conf;
    raft_configuration_init(&conf);
    for (auto& [id, address] : members)
      CAF_REQUIRE_EQUAL(raft_configuration_add(&conf, id, address.c_str(),
                                               RAFT_VOTER),
                        0);
    CAF_REQUIRE_EQUAL(raft_bootstrap(&n->r, &conf), 0);
    raft_configuration_close(&conf);
    CAF_REQUIRE_EQUAL(raft_start(&n->r), 0);
  }
  raft_member* leader = nullptr;
  CAF_REQUIRE(run_until(
    [&] {
      for (auto& n : nodes)
        if (raft_state(&n->r) == RAFT_LEADER)
          leader = n.get();
      return leader != nullptr;
    },
    20s));
  CAF_MESSAGE("leader: node " << leader->id);
  struct apply_req {
    struct raft_apply req;
    bool done = false;
    int status = -1;
  } apply;
  apply.req.data = &apply;
  raft_buffer buf;
  buf.len = 16; // entries are multiples of 8 bytes
  buf.base = raft_malloc(buf.len);
  std::memcpy(buf.base, "over tls entry!", 16);
  CAF_REQUIRE_EQUAL(raft_apply(&leader->r, &apply.req, &buf, 1,
                               [](struct raft_apply* req, int st, void*) {
                                 auto a = static_cast<apply_req*>(req->data);
                                 a->done = true;
                                 a->status = st;
                               }),
                    0);
  CAF_CHECK(run_until(
    [&] {
      for (auto& n : nodes)
        if (n->applied < 1)
          return false;
      return apply.done;
    },
    20s));
  CAF_CHECK_EQUAL(apply.status, 0);
  for (auto& n : nodes) {
    CAF_CHECK_EQUAL(n->applied, 1u);
    CAF_CHECK_EQUAL(n->last, std::string("over tls entry!", 16));
    auto st = tls_transport_stats_of(&n->transport);
    CAF_MESSAGE("node " << n->id << ": accepted " << st.accepted
                        << ", connected " << st.connected);
    CAF_CHECK_GREATER_OR_EQUAL(st.accepted, 1u);
    CAF_CHECK_GREATER_OR_EQUAL(st.connected, 1u);
    CAF_CHECK_EQUAL(st.refused_handshake + st.refused_identity
                      + st.refused_preamble + st.refused_busy,
                    0u);
  }
  for (auto& n : nodes) {
    n->r.data = n.get();
    raft_close(&n->r, [](struct raft* r) {
      auto n = static_cast<raft_member*>(r->data);
      raft_uv_close(&n->io);
      tls_transport_close(&n->transport);
      n->closed = true;
    });
  }
  CAF_CHECK(run_until([&] {
    for (auto& n : nodes)
      if (!n->closed)
        return false;
    return true;
  }));
}

CAF_TEST(strangers and misbehaving members are refused before libraft) {
  endpoint a{*this, 1, addr1, members};
  // Long enough for a real handshake on a loaded machine, short enough for
  // the cases that wait for it.
  a.opts.handshake_timeout = 1500ms;
  a.start();
  auto port = port_of(addr1);
  uint64_t expected_handshake = 0, expected_identity = 0, expected_preamble = 0;
  auto verdict_is = [&] {
    auto st = a.stats();
    return st.refused_handshake == expected_handshake
           && st.refused_identity == expected_identity
           && st.refused_preamble == expected_preamble;
  };
  auto tls_case = [&](const char* what, std::string cert, std::string key,
                      std::string payload, uint64_t& counter) {
    CAF_MESSAGE(what);
    ++counter;
    tls_client client{port, std::move(cert), std::move(key),
                      std::move(payload)};
    CAF_CHECK(run_until([&] { return client.done() && verdict_is(); }));
    CAF_CHECK(client.refused());
    auto st = a.stats();
    CAF_CHECK_EQUAL(st.refused_handshake, expected_handshake);
    CAF_CHECK_EQUAL(st.refused_identity, expected_identity);
    CAF_CHECK_EQUAL(st.refused_preamble, expected_preamble);
    CAF_CHECK(a.accepts.empty());
  };
  {
    CAF_MESSAGE("plain TCP sending junk");
    ++expected_handshake;
    auto fd = tcp_connect(port);
    std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + preamble(2, addr2);
    CAF_CHECK_EQUAL(::send(fd, junk.data(), junk.size(), 0),
                    static_cast<ssize_t>(junk.size()));
    CAF_CHECK(run_until([&] { return verdict_is() && closed_by_peer(fd); }));
    ::close(fd);
  }
  {
    CAF_MESSAGE("TCP, then silence: dropped at the handshake timeout");
    ++expected_handshake;
    auto fd = tcp_connect(port);
    CAF_CHECK(run_until([&] { return verdict_is() && closed_by_peer(fd); }));
    ::close(fd);
  }
  auto pre2 = preamble(2, addr2);
  tls_case("TLS without a client certificate", "", "", pre2,
           expected_handshake);
  tls_case("TLS with a self-signed certificate", certs().self_pem,
           certs().self_key, pre2, expected_handshake);
  tls_case("TLS with node 2's certificate of a foreign CA",
           certs().foreign_pem(), certs().foreign_key(), pre2,
           expected_handshake);
  tls_case("node 2's valid certificate claiming id 3", certs().pem(2),
           certs().key(2), preamble(3, addr3), expected_identity);
  tls_case("a valid certificate of node 4, which is not a member",
           certs().pem(4), certs().key(4), preamble(4, local(1234)),
           expected_identity);
  tls_case("node 1's own certificate claiming node 1", certs().pem(1),
           certs().key(1), preamble(1, addr1), expected_identity);
  tls_case("node 2 claiming another address", certs().pem(2), certs().key(2),
           preamble(2, local(1)), expected_identity);
  tls_case("an unknown protocol version", certs().pem(2), certs().key(2),
           preamble(2, addr2, 2), expected_preamble);
  tls_case("an oversized address length", certs().pem(2), certs().key(2),
           preamble(2, addr2, 1, 1 << 20), expected_preamble);
  tls_case("TLS, then no preamble: dropped at the timeout", certs().pem(2),
           certs().key(2), "", expected_preamble);
  CAF_CHECK_EQUAL(a.stats().accepted, 0u);
  CAF_CHECK_EQUAL(a.stats().refused_busy, 0u);
}

CAF_TEST(connections beyond max_handshakes are closed at once) {
  endpoint a{*this, 1, addr1, members};
  a.opts.max_handshakes = 4;
  a.opts.handshake_timeout = 30s; // the silent ones stay until they leave
  a.start();
  endpoint b{*this, 2, addr2, members};
  b.start(false);
  auto port = port_of(addr1);
  std::vector<int> fds;
  for (int i = 0; i < 6; ++i)
    fds.push_back(tcp_connect(port)); // in the backlog, in this order
  CAF_CHECK(run_until([&] { return a.stats().refused_busy == 2; }));
  // The two beyond the limit are closed; the first four are still held.
  CAF_CHECK(run_until([&] { return closed_by_peer(fds[4]) && closed_by_peer(fds[5]); }));
  for (int i = 0; i < 4; ++i)
    CAF_CHECK(!closed_by_peer(fds[i]));
  // While they are held, even a member is turned away...
  connect_attempt busy;
  CAF_REQUIRE_EQUAL(busy.start(b, 1, addr1), 0);
  CAF_CHECK(run_until([&] { return busy.done; }));
  CAF_CHECK_NOT_EQUAL(busy.status, 0);
  CAF_CHECK_EQUAL(a.stats().refused_busy, 3u);
  // ...and once they leave, it gets in.
  for (int i = 0; i < 6; ++i)
    ::close(fds[i]);
  CAF_CHECK(run_until([&] { return a.stats().refused_handshake == 4; }));
  connect_attempt member;
  CAF_REQUIRE_EQUAL(member.start(b, 1, addr1), 0);
  CAF_CHECK(run_until([&] { return member.done && !a.accepts.empty(); }));
  CAF_CHECK_EQUAL(member.status, 0);
  CAF_CHECK_EQUAL(a.accepts.size(), 1u);
  CAF_CHECK_EQUAL(a.accepts[0].id, 2u);
  if (member.stream != nullptr)
    raft_side{member.stream}.close();
}

CAF_TEST(a connection fails unless the server proves the id dialled) {
  // Node 3 answers at the address configured for node 2.
  members[2] = addr3;
  endpoint a{*this, 1, addr1, members};
  a.opts.handshake_timeout = 1500ms;
  a.start(false);
  endpoint c{*this, 3, addr3, members};
  c.start();
  connect_attempt wrong;
  CAF_REQUIRE_EQUAL(wrong.start(a, 2, addr3), 0);
  CAF_CHECK(run_until([&] { return wrong.done; }));
  CAF_CHECK_EQUAL(wrong.status, RAFT_NOCONNECTION);
  CAF_CHECK(wrong.stream == nullptr);
  CAF_CHECK(run_until([&] {
    auto st = c.stats();
    return st.refused_preamble + st.refused_handshake == 1;
  }));
  CAF_CHECK(c.accepts.empty());
  // The real node 3 at its address is fine.
  connect_attempt right;
  CAF_REQUIRE_EQUAL(right.start(a, 3, addr3), 0);
  CAF_CHECK(run_until([&] { return right.done && !c.accepts.empty(); }));
  CAF_CHECK_EQUAL(right.status, 0);
  if (right.stream != nullptr)
    raft_side{right.stream}.close();
  // Not members, or not at the member's address: refused on the spot.
  connect_attempt never;
  CAF_CHECK_NOT_EQUAL(never.start(a, 9, addr3), 0);
  CAF_CHECK_NOT_EQUAL(never.start(a, 3, addr2), 0);
  CAF_CHECK(!never.done);
  // Nobody listening.
  members[4] = local(free_port());
  tls_transport_set_peers(&a.t, members);
  connect_attempt refused;
  CAF_REQUIRE_EQUAL(refused.start(a, 4, members[4]), 0);
  CAF_CHECK(run_until([&] { return refused.done; }));
  CAF_CHECK_EQUAL(refused.status, RAFT_NOCONNECTION);
  // A listener that never answers: the handshake timeout ends it.
  uint16_t silent_port = 0;
  auto lfd = silent_listener(silent_port);
  members[5] = local(silent_port);
  tls_transport_set_peers(&a.t, members);
  connect_attempt silent;
  CAF_REQUIRE_EQUAL(silent.start(a, 5, members[5]), 0);
  CAF_CHECK(run_until([&] { return silent.done; }));
  CAF_CHECK_EQUAL(silent.status, RAFT_NOCONNECTION);
  CAF_CHECK_EQUAL(a.stats().connect_failed, 3u);
  ::close(lfd);
}

CAF_TEST(closing cancels pending connects without waiting for silent peers) {
  uint16_t silent_port = 0;
  auto lfd = silent_listener(silent_port);
  members[2] = local(silent_port);
  endpoint a{*this, 1, addr1, members};
  a.opts.handshake_timeout = 60s;
  a.start();
  auto held = tcp_connect(port_of(addr1)); // a silent inbound handshake
  connect_attempt pending;
  CAF_REQUIRE_EQUAL(pending.start(a, 2, members[2]), 0);
  CAF_CHECK(run_until([&] { return a.stats().handshakes == 1; }));
  CAF_CHECK(!pending.done);
  auto started = std::chrono::steady_clock::now();
  a.stop();
  CAF_CHECK(a.closed);
  CAF_CHECK(pending.done);
  CAF_CHECK_EQUAL(pending.status, RAFT_CANCELED);
  CAF_CHECK(std::chrono::steady_clock::now() - started < 1s);
  CAF_CHECK(run_until([&] { return closed_by_peer(held); }));
  ::close(held);
  ::close(lfd);
}

CAF_TEST(peers may be named by host name or IPv6 literal) {
  // Host names resolve on both sides the same way (listen and connect).
  auto p1 = free_port(), p2 = free_port();
  std::map<uint64_t, std::string> named{
    {1, "localhost:" + std::to_string(p1)}, {2, "localhost:" + std::to_string(p2)}};
  {
    endpoint a{*this, 1, named[1], named};
    endpoint b{*this, 2, named[2], named};
    a.start();
    b.start();
    connect_attempt attempt;
    CAF_REQUIRE_EQUAL(attempt.start(a, 2, named[2]), 0);
    CAF_CHECK(run_until([&] { return attempt.done && !b.accepts.empty(); }));
    CAF_CHECK_EQUAL(attempt.status, 0);
    CAF_CHECK_EQUAL(b.accepts.size(), 1u);
    if (!b.accepts.empty())
      CAF_CHECK_EQUAL(b.accepts[0].address, named[1]);
    if (attempt.stream != nullptr)
      raft_side{attempt.stream}.close();
  }
  auto probe = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 any6{};
  any6.sin6_family = AF_INET6;
  any6.sin6_addr = in6addr_loopback;
  auto has_v6 = probe >= 0
                && ::bind(probe, reinterpret_cast<sockaddr*>(&any6),
                          sizeof(any6))
                     == 0;
  if (probe >= 0)
    ::close(probe);
  if (!has_v6) {
    CAF_MESSAGE("no IPv6 loopback: IPv6 part skipped");
    return;
  }
  std::map<uint64_t, std::string> v6{{1, "[::1]:" + std::to_string(free_port())},
                                     {2, "[::1]:" + std::to_string(free_port())}};
  endpoint a{*this, 1, v6[1], v6};
  endpoint b{*this, 2, v6[2], v6};
  a.start();
  b.start();
  connect_attempt attempt;
  CAF_REQUIRE_EQUAL(attempt.start(a, 2, v6[2]), 0);
  CAF_CHECK(run_until([&] { return attempt.done && !b.accepts.empty(); }));
  CAF_CHECK_EQUAL(attempt.status, 0);
  if (attempt.stream != nullptr)
    raft_side{attempt.stream}.close();
}

CAF_TEST(the transport context offers only the Mozilla intermediate suites) {
  // One context serves both ends of every connection (the listener and the
  // dialler): what it offers is what either end offers or accepts.
  auto& c = certs();
  tls_transport_options opts;
  opts.ca_file = c.ca;
  opts.cert_file = c.pem(1);
  opts.key_file = c.key(1);
  opts.peers = members;
  raft_uv_transport t;
  std::memset(&t, 0, sizeof(t));
  std::string error;
  CAF_REQUIRE_EQUAL(tls_transport_init(&t, &loop, opts, error), 0);
  auto ctx = static_cast<oncegate::cluster::detail::transport*>(t.impl)->ctx;
  CAF_MESSAGE("offered: " << test::offered_suites(ctx));
  auto breaches = test::offer_violations(ctx);
  for (auto& x : breaches)
    CAF_MESSAGE("breach: " << x);
  CAF_CHECK(breaches.empty());
  tls_transport_close(&t);
}

CAF_TEST(bad certificate files are reported with the file and the reason) {
  auto& c = certs();
  auto garbage = c.dir.file("garbage.pem");
  CAF_REQUIRE_EQUAL(std::system(("echo 'not a certificate' > " + garbage).c_str()),
                    0);
  auto missing = c.dir.file("missing.pem");
  // CA files of several certificates: a node certificate among them, more
  // than tls::max_cluster_cas, and the two CAs of a CA change (good).
  auto with_leaf = c.dir.file("ca-and-leaf.pem");
  auto five = c.dir.file("five-cas.pem");
  auto both = c.dir.file("both-cas.pem");
  CAF_REQUIRE_EQUAL(std::system(("cat " + c.ca + " " + c.pem(1) + " > "
                                 + with_leaf + " && for i in 1 2 3 4 5; do "
                                 "cat " + c.ca + "; done > " + five + " && cat "
                                 + c.ca + " " + c.foreign_ca + " > " + both)
                                  .c_str()),
                    0);
  struct bad_case {
    const char* what;
    std::string ca, cert, key;
    std::vector<std::string> mentions;
  };
  std::vector<bad_case> cases{
    {"CA file missing", missing, c.pem(1), c.key(1), {"ca_file", missing}},
    {"CA file without certificates", garbage, c.pem(1), c.key(1),
     {"ca_file", garbage}},
    {"certificate missing", c.ca, missing, c.key(1), {"cert_file", missing}},
    {"certificate file is a directory", c.ca, c.dir.path().string(), c.key(1),
     {"cert_file", "not a regular file"}},
    {"certificate unreadable as PEM", c.ca, garbage, c.key(1),
     {"cert_file", garbage}},
    {"key missing", c.ca, c.pem(1), missing, {"key_file", missing}},
    {"key unreadable as PEM", c.ca, c.pem(1), garbage, {"key_file", garbage}},
    {"key of another certificate", c.ca, c.pem(1), c.key(2),
     {"key_file", c.key(2), "does not match", c.pem(1)}},
    {"certificate of a foreign CA", c.ca, c.foreign_pem(), c.foreign_key(),
     {"cert_file", c.foreign_pem(), "does not verify against", c.ca}},
    {"self-signed certificate", c.ca, c.self_pem, c.self_key,
     {"cert_file", c.self_pem, "does not verify"}},
    {"CA file with a node certificate", with_leaf, c.pem(1), c.key(1),
     {"ca_file", with_leaf, "no CA"}},
    {"CA file with five certificates", five, c.pem(1), c.key(1),
     {"ca_file", five, "more than 4"}},
  };
  for (auto& x : cases) {
    CAF_MESSAGE(x.what);
    tls_transport_options opts;
    opts.ca_file = x.ca;
    opts.cert_file = x.cert;
    opts.key_file = x.key;
    opts.peers = members;
    raft_uv_transport t;
    std::memset(&t, 0, sizeof(t));
    std::string error;
    CAF_CHECK_EQUAL(tls_transport_init(&t, &loop, opts, error), RAFT_INVALID);
    CAF_MESSAGE("  error: " << error);
    for (auto& m : x.mentions)
      CAF_CHECK(error.find(m) != std::string::npos);
    CAF_CHECK(t.impl == nullptr);
  }
  for (auto [cert, key] : {std::pair{c.pem(1), c.key(1)},
                           std::pair{c.foreign_pem(), c.foreign_key()}}) {
    CAF_MESSAGE("while the CA is replaced, certificates of either CA: "
                << cert);
    tls_transport_options opts;
    opts.ca_file = both;
    opts.cert_file = cert;
    opts.key_file = key;
    opts.peers = members;
    raft_uv_transport t;
    std::memset(&t, 0, sizeof(t));
    std::string error;
    CAF_CHECK_EQUAL(tls_transport_init(&t, &loop, opts, error), 0);
    CAF_CHECK_EQUAL(error, "");
    if (t.impl != nullptr)
      tls_transport_close(&t);
  }
  {
    CAF_MESSAGE("a peer address that is not host:port");
    tls_transport_options opts;
    opts.ca_file = c.ca;
    opts.cert_file = c.pem(1);
    opts.key_file = c.key(1);
    opts.peers = {{1, addr1}, {2, "no-port"}};
    raft_uv_transport t;
    std::memset(&t, 0, sizeof(t));
    std::string error;
    CAF_CHECK_EQUAL(tls_transport_init(&t, &loop, opts, error), RAFT_INVALID);
    CAF_CHECK(error.find("node 2") != std::string::npos);
  }
  {
    CAF_MESSAGE("a certificate that names another node than raft_init's id");
    tls_transport_options opts;
    opts.ca_file = c.ca;
    opts.cert_file = c.pem(2);
    opts.key_file = c.key(2);
    opts.peers = members;
    raft_uv_transport t;
    std::memset(&t, 0, sizeof(t));
    std::string error;
    CAF_REQUIRE_EQUAL(tls_transport_init(&t, &loop, opts, error), 0);
    CAF_CHECK_EQUAL(t.init(&t, 1, addr1.c_str()), RAFT_INVALID);
    CAF_MESSAGE("  errmsg: " << t.errmsg);
    CAF_CHECK(std::string{t.errmsg}.find("node-1.oncegate") != std::string::npos);
    tls_transport_close(&t);
    CAF_CHECK(t.impl == nullptr);
  }
}

CAF_TEST_FIXTURE_SCOPE_END()
