#define CAF_SUITE link.node_link
#include "caf/test/unit_test.hpp"

// The node link on a real libuv loop and loopback sockets: what libraft
// sees of it (streams over one link per node pair), a real three-server
// libraft cluster over it, requests and answers with their failures and
// bounds, and every way a stranger or a misbehaving member is refused.
// Clients that need a blocking TLS handshake run on their own thread while
// the test thread turns the loop; every wait is the loop turning until a
// condition holds or a bound passes, never a fixed sleep.

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
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

#include "link/frames.hpp"
#include "link/link_impl.hpp"
#include "link/node_link.hpp"
#include "tests/common/fixture.hpp"
#include "tests/common/sockets.hpp"
#include "tests/common/tls_offer.hpp"

using namespace oncegate;
using namespace oncegate::link;
using oncegate::test::free_port;
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

  /// Bytes the server sent (after the handshake), once done.
  std::string received() const {
    return received_;
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
        received_.append(buf, static_cast<size_t>(n));
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
  std::string received_;
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
  link::options opts;
  raft_uv_transport t;
  std::vector<accepted_stream> accepts;
  bool closed = false;
  bool started = false;

  endpoint(loop_fixture& f, uint64_t i, std::string addr,
           std::map<uint64_t, std::string> peers)
    : fx(f), id(i), address(std::move(addr)) {
    std::memset(&t, 0, sizeof(t));
    opts.tls = link::tls_files{certs().ca, certs().pem(i), certs().key(i)};
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
    CAF_REQUIRE_EQUAL(link::init(&t, &fx.loop, opts, error), 0);
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
      link::close(&t);
  }

  link::link_stats stats() {
    return link::stats_of(&t);
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

// Starts `n`'s libraft on `loop` over its transport (made already): a
// bootstrapped voter of `members`, with short timeouts.
void boot(raft_member& n, uv_loop_t* loop,
          const std::map<uint64_t, std::string>& members) {
  CAF_REQUIRE_EQUAL(raft_uv_init(&n.io, loop, n.dir.path().c_str(),
                                 &n.transport),
                    0);
  raft_uv_set_connect_retry_delay(&n.io, 50);
  CAF_REQUIRE_EQUAL(raft_init(&n.r, &n.io, &n.fsm, n.id, n.address.c_str()),
                    0);
  raft_set_election_timeout(&n.r, 300);
  raft_set_heartbeat_timeout(&n.r, 30);
  raft_configuration conf;
  raft_configuration_init(&conf);
  for (auto& [id, address] : members)
    CAF_REQUIRE_EQUAL(raft_configuration_add(&conf, id, address.c_str(),
                                             RAFT_VOTER),
                      0);
  CAF_REQUIRE_EQUAL(raft_bootstrap(&n.r, &conf), 0);
  raft_configuration_close(&conf);
  CAF_REQUIRE_EQUAL(raft_start(&n.r), 0);
}

// A 16-byte entry (libraft's are multiples of 8) applied by `leader`.
struct apply_req {
  struct raft_apply req;
  bool done = false;
  int status = -1;

  void start(raft_member& leader, const char (&text)[16]) {
    req.data = this;
    raft_buffer buf;
    buf.len = 16;
    buf.base = raft_malloc(buf.len);
    std::memcpy(buf.base, text, 16);
    CAF_REQUIRE_EQUAL(raft_apply(&leader.r, &req, &buf, 1,
                                 [](struct raft_apply* req, int st, void*) {
                                   auto a = static_cast<apply_req*>(req->data);
                                   a->done = true;
                                   a->status = st;
                                 }),
                      0);
  }
};

// Closes the libraft servers of `group` (their transports are freed with
// link::close by the caller).
template <class Members>
void close_all(loop_fixture& fx, Members& group) {
  for (auto& n : group) {
    n->r.data = n.get();
    raft_close(&n->r, [](struct raft* r) {
      auto n = static_cast<raft_member*>(r->data);
      raft_uv_close(&n->io);
      n->closed = true;
    });
  }
  CAF_CHECK(fx.run_until([&] {
    for (auto& n : group)
      if (!n->closed)
        return false;
    return true;
  }));
}

// A frame as the link writes it.
std::string frame(frame_type type, uint64_t id, const std::string& payload,
                  uint16_t group = 0) {
  frame_header h;
  h.length = static_cast<uint32_t>(payload.size());
  h.type = type;
  h.group = group;
  h.id = id;
  std::string out(header_size, '\0');
  encode_header(h, out.data());
  return out + payload;
}

std::string hello_frame(uint64_t id, const std::string& address,
                        uint16_t min = min_version,
                        uint16_t max = max_version, uint16_t groups = 1) {
  hello h;
  h.node_id = id;
  h.address = address;
  h.min_version = min;
  h.max_version = max;
  h.groups = groups;
  return frame(frame_type::hello, 0, encode_hello(h));
}

// The frames in `bytes` (whole ones), in order.
[[maybe_unused]]
std::vector<std::pair<frame_header, std::string>>
frames_in(const std::string& bytes) {
  std::vector<std::pair<frame_header, std::string>> out;
  size_t pos = 0;
  while (bytes.size() - pos >= header_size) {
    frame_header h;
    if (decode_header(bytes.data() + pos, 1u << 30, h) != header_error::none)
      break;
    if (bytes.size() - pos - header_size < h.length)
      break;
    out.emplace_back(h, bytes.substr(pos + header_size, h.length));
    pos += header_size + h.length;
  }
  return out;
}

// A lookup's answer as a server that found the record asked for.
answer found(const request& req) {
  answer ans;
  ans.kind = req.kind;
  ans.lookup.found = true;
  ans.lookup.rec.route = req.route;
  ans.lookup.rec.key = req.key;
  return ans;
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(node_link_tests, fixture)

CAF_TEST(the dialling node speaks first with a hello over TLS and nothing before) {
  // A raw TLS server with node 2's certificate records what node 1 sends
  // when it dials (the lower id dials as soon as it listens).
  uint16_t port = 0;
  auto lfd = silent_listener(port);
  std::string received;
  std::atomic<bool> got{false};
  members[2] = local(port);
  auto expected = hello_frame(1, addr1);
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
  endpoint a{*this, 1, addr1, members};
  a.start();
  CAF_CHECK(run_until([&] { return got.load(); }));
  server.join();
  ::close(lfd);
  CAF_CHECK_EQUAL(received, expected); // byte-exact
  auto fs = frames_in(received);
  CAF_REQUIRE_EQUAL(fs.size(), 1u);
  hello h;
  std::string why;
  CAF_CHECK(decode_hello(fs[0].second, h, why));
  CAF_CHECK_EQUAL(h.node_id, 1u);
  CAF_CHECK_EQUAL(h.address, addr1);
}

CAF_TEST(one link carries both nodes streams both ways including megabytes) {
  endpoint a{*this, 1, addr1, members};
  endpoint b{*this, 2, addr2, members};
  a.start();
  b.start();
  connect_attempt up;   // node 1's libraft to node 2
  connect_attempt down; // node 2's libraft to node 1: the same link
  CAF_REQUIRE_EQUAL(up.start(a, 2, addr2), 0);
  CAF_REQUIRE_EQUAL(down.start(b, 1, addr1), 0);
  CAF_REQUIRE(run_until([&] {
    return up.done && down.done && b.accepts.size() == 1
           && a.accepts.size() == 1;
  }));
  CAF_REQUIRE_EQUAL(up.status, 0);
  CAF_REQUIRE_EQUAL(down.status, 0);
  CAF_CHECK_EQUAL(b.accepts[0].id, 1u);
  CAF_CHECK_EQUAL(b.accepts[0].address, addr1);
  CAF_CHECK_EQUAL(a.accepts[0].id, 2u);
  CAF_CHECK_EQUAL(a.accepts[0].address, addr2);
  // One connection between the two nodes, two streams on it.
  CAF_CHECK_EQUAL(a.stats().connected, 1u);
  CAF_CHECK_EQUAL(a.stats().accepted, 0u);
  CAF_CHECK_EQUAL(b.stats().accepted, 1u);
  CAF_CHECK_EQUAL(b.stats().connected, 0u);
  CAF_CHECK_EQUAL(a.stats().links, 1u);
  CAF_CHECK_EQUAL(a.stats().streams, 2u);
  raft_side one{up.stream};
  raft_side two{b.take_accepted()};
  raft_side three{down.stream};
  raft_side four{a.take_accepted()};
  for (auto s : {&one, &two, &three, &four})
    s->start_reading();
  one.write(std::make_shared<std::string>("hello from 1"));
  two.write(std::make_shared<std::string>("hello from 2"));
  three.write(std::make_shared<std::string>("2 dialled 1"));
  CAF_CHECK(run_until([&] {
    return one.received.size() >= 12 && two.received.size() >= 12
           && four.received.size() >= 11;
  }));
  CAF_CHECK_EQUAL(two.received, "hello from 1");
  CAF_CHECK_EQUAL(one.received, "hello from 2");
  CAF_CHECK_EQUAL(four.received, "2 dialled 1");
  one.received.clear();
  two.received.clear();
  // Several megabytes each way at once, in writes larger than any buffer.
  auto upb = pattern(8 * 1024 * 1024, 1);
  auto downb = pattern(6 * 1024 * 1024, 2);
  for (size_t off = 0; off < upb->size(); off += 2 * 1024 * 1024)
    one.write(std::make_shared<std::string>(upb->substr(off, 2 * 1024 * 1024)));
  two.write(downb);
  uint64_t peak = 0;
  CAF_CHECK(run_until(
    [&] {
      peak = std::max({peak, a.stats().buffered_bytes,
                       b.stats().buffered_bytes});
      return two.received.size() >= upb->size()
             && one.received.size() >= downb->size();
    },
    60s));
  CAF_CHECK(two.received == *upb);
  CAF_CHECK(one.received == *downb);
  CAF_CHECK_EQUAL(one.write_status, 0);
  CAF_CHECK_EQUAL(two.write_status, 0);
  CAF_MESSAGE("peak bytes queued by one endpoint: " << peak);
  CAF_CHECK_LESS_OR_EQUAL(peak, 1024u * 1024u);
  // libraft closing its end closes that stream on both sides; the link and
  // the other stream stay.
  one.close();
  CAF_CHECK(run_until([&] { return two.eof; }));
  two.close();
  CAF_CHECK(run_until([&] { return a.stats().streams == 1; }));
  CAF_CHECK_EQUAL(a.stats().links, 1u);
  three.write(std::make_shared<std::string>("still here"));
  CAF_CHECK(run_until([&] { return four.received.size() >= 21; }));
  CAF_CHECK_EQUAL(four.received, "2 dialled 1still here");
  three.close();
  four.close();
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
  // stops reading TCP, TCP fills, and node 1 stops reading its streams.
  auto data = pattern(32 * 1024 * 1024, 3);
  one.write(data);
  uint64_t peak = 0;
  CAF_CHECK(run_until([&] {
    peak = std::max({peak, a.stats().buffered_bytes, b.stats().buffered_bytes});
    return a.stats().backpressure_pauses > 0
           && b.stats().backpressure_pauses > 0;
  }, 30s));
  CAF_CHECK_EQUAL(one.writes_done, 0u); // the rest waits in libraft's queue
  CAF_CHECK_GREATER(uv_stream_get_write_queue_size(one.stream), 0u);
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

CAF_TEST(three libraft servers elect a leader and apply an entry over links) {
  std::vector<std::unique_ptr<raft_member>> nodes;
  for (uint64_t id = 1; id <= 3; ++id)
    nodes.push_back(std::make_unique<raft_member>(id, members[id]));
  for (auto& n : nodes) {
    link::options opts;
    opts.tls = link::tls_files{certs().ca, certs().pem(n->id),
                               certs().key(n->id)};
    opts.peers = members;
    opts.handshake_timeout = 10s;
    std::string error;
    CAF_REQUIRE_EQUAL(link::init(&n->transport, &loop, opts, error), 0);
    boot(*n, &loop, members);
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
  apply_req apply;
  apply.start(*leader, "over the link!!");
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
    CAF_CHECK_EQUAL(n->last, std::string("over the link!!", 16));
    auto st = link::stats_of(&n->transport);
    CAF_MESSAGE("node " << n->id << ": links " << st.links << ", streams "
                        << st.streams);
    // One link to each other node, whichever way it was dialled.
    CAF_CHECK_EQUAL(st.links, 2u);
    CAF_CHECK_EQUAL(st.accepted + st.connected, 2u);
    CAF_CHECK_EQUAL(st.refused_handshake + st.refused_identity
                      + st.refused_hello + st.refused_busy
                      + st.refused_frame,
                    0u);
  }
  close_all(*this, nodes);
  for (auto& n : nodes)
    link::close(&n->transport);
}

CAF_TEST(two raft groups share one link per node pair and close apart) {
  // groups[g][i]: node i+1's server of group g, each with its own log.
  std::vector<std::unique_ptr<raft_member>> groups[2];
  for (auto& g : groups)
    for (uint64_t id = 1; id <= 3; ++id)
      g.push_back(std::make_unique<raft_member>(id, members[id]));
  for (size_t i = 0; i < 3; ++i) {
    auto& first = *groups[0][i];
    link::options opts;
    opts.tls = link::tls_files{certs().ca, certs().pem(first.id),
                               certs().key(first.id)};
    opts.peers = members;
    opts.handshake_timeout = 10s;
    opts.groups = 2;
    std::string error;
    CAF_REQUIRE_EQUAL(link::init(&first.transport, &loop, opts, error), 0);
    CAF_REQUIRE_EQUAL(link::init_group(&groups[1][i]->transport,
                                       &first.transport, 1, error),
                      0);
    // A group has one transport; there is no group 2.
    raft_uv_transport spare;
    std::memset(&spare, 0, sizeof(spare));
    CAF_CHECK_NOT_EQUAL(link::init_group(&spare, &first.transport, 1, error),
                        0);
    CAF_CHECK_NOT_EQUAL(link::init_group(&spare, &first.transport, 2, error),
                        0);
    boot(first, &loop, members);
    boot(*groups[1][i], &loop, members);
  }
  auto leader_of = [&](int g) -> raft_member* {
    for (auto& n : groups[g])
      if (raft_state(&n->r) == RAFT_LEADER)
        return n.get();
    return nullptr;
  };
  CAF_REQUIRE(run_until([&] { return leader_of(0) && leader_of(1); }, 20s));
  apply_req a0, a1;
  a0.start(*leader_of(0), "group zero says");
  a1.start(*leader_of(1), "group one says!");
  auto all_applied = [&](int g, uint64_t n) {
    for (auto& m : groups[g])
      if (m->applied < n)
        return false;
    return true;
  };
  CAF_REQUIRE(run_until(
    [&] { return a0.done && a1.done && all_applied(0, 1) && all_applied(1, 1); },
    20s));
  CAF_CHECK_EQUAL(a0.status, 0);
  CAF_CHECK_EQUAL(a1.status, 0);
  for (size_t i = 0; i < 3; ++i) {
    // Each group applied its own entry only.
    CAF_CHECK_EQUAL(groups[0][i]->applied, 1u);
    CAF_CHECK_EQUAL(groups[0][i]->last, std::string("group zero says", 16));
    CAF_CHECK_EQUAL(groups[1][i]->applied, 1u);
    CAF_CHECK_EQUAL(groups[1][i]->last, std::string("group one says!", 16));
    // One link to each other node carries both groups' streams.
    auto st = link::stats_of(&groups[0][i]->transport);
    CAF_CHECK_EQUAL(st.links, 2u);
    CAF_CHECK_EQUAL(st.accepted + st.connected, 2u);
    CAF_CHECK_GREATER_OR_EQUAL(st.streams, 4u);
    CAF_CHECK_EQUAL(st.refused_handshake + st.refused_identity
                      + st.refused_hello + st.refused_frame,
                    0u);
  }
  // A request is served with the group of the transport it was asked on.
  std::vector<uint16_t> served_groups;
  link::set_server(&groups[0][1]->transport,
                   [&](const served& from, request req) {
                     served_groups.push_back(from.group);
                     link::reply(&groups[0][1]->transport, from, found(req));
                   });
  request lookup;
  lookup.kind = op::lookup;
  lookup.route = "r";
  lookup.key = "k";
  std::vector<answer> got;
  link::ask(&groups[1][0]->transport, 2, lookup, 10s,
            [&](answer ans) { got.push_back(std::move(ans)); });
  link::ask(&groups[0][0]->transport, 2, lookup, 10s,
            [&](answer ans) { got.push_back(std::move(ans)); });
  CAF_REQUIRE(run_until([&] { return got.size() == 2; }));
  CAF_CHECK_EQUAL(got[0].error, errc::none);
  CAF_CHECK_EQUAL(got[1].error, errc::none);
  CAF_CHECK_EQUAL(served_groups, std::vector<uint16_t>({1, 0}));
  // Group 1 stops everywhere; group 0 goes on over the same links.
  close_all(*this, groups[1]);
  for (auto& n : groups[1])
    link::close(&n->transport);
  auto before = link::stats_of(&groups[0][0]->transport);
  CAF_CHECK_EQUAL(before.links, 2u);
  CAF_REQUIRE(run_until([&] { return leader_of(0) != nullptr; }, 20s));
  apply_req again;
  again.start(*leader_of(0), "after group one");
  CAF_CHECK(run_until([&] { return again.done && all_applied(0, 2); }, 20s));
  CAF_CHECK_EQUAL(again.status, 0);
  for (auto& n : groups[0]) {
    auto st = link::stats_of(&n->transport);
    CAF_CHECK_EQUAL(st.accepted + st.connected, 2u); // never re-dialled
    CAF_CHECK_EQUAL(st.refused_frame, 0u);
  }
  close_all(*this, groups[0]);
  for (auto& n : groups[0])
    link::close(&n->transport);
}

CAF_TEST(requests are answered on the link they were sent on) {
  endpoint a{*this, 1, addr1, members};
  endpoint b{*this, 2, addr2, members};
  b.opts.max_served = 2;
  a.start();
  b.start();
  // Node 2 answers lookups at once and holds transfers (never answered).
  std::vector<served> held;
  link::set_server(&b.t, [&](const served& from, request req) {
    CAF_CHECK_EQUAL(from.peer, 1u);
    if (req.kind == op::transfer) {
      held.push_back(from);
      return;
    }
    link::reply(&b.t, from, found(req));
  });
  CAF_REQUIRE(run_until([&] { return link::connected(&a.t, 2); }));
  std::vector<answer> got;
  auto ask_a = [&](request req, std::chrono::milliseconds timeout) {
    link::ask(&a.t, 2, std::move(req), timeout,
              [&](answer ans) { got.push_back(std::move(ans)); });
  };
  request lookup;
  lookup.kind = op::lookup;
  lookup.route = "orders";
  lookup.key = "k1";
  ask_a(lookup, 10s);
  CAF_REQUIRE(run_until([&] { return got.size() == 1; }));
  CAF_CHECK_EQUAL(got[0].error, errc::none);
  CAF_CHECK(got[0].lookup.found);
  CAF_CHECK_EQUAL(got[0].lookup.rec.key, "k1");
  // Unanswered: the timeout fails it (the outcome is unknown), and the
  // answer that comes later is counted and dropped.
  request transfer;
  transfer.kind = op::transfer;
  ask_a(transfer, 200ms);
  ask_a(transfer, 10s);
  CAF_REQUIRE(run_until([&] { return got.size() == 2; }));
  CAF_CHECK_EQUAL(got[1].error, errc::timeout);
  CAF_REQUIRE(run_until([&] { return held.size() == 2; }));
  // A third while two are in service (max_served): overloaded at once.
  ask_a(transfer, 10s);
  CAF_REQUIRE(run_until([&] { return got.size() == 3; }));
  CAF_CHECK_EQUAL(got[2].error, errc::overloaded);
  CAF_CHECK_EQUAL(b.stats().requests_overloaded, 1u);
  answer late;
  late.kind = op::transfer;
  late.value = 2;
  link::reply(&b.t, held[0], late);
  CAF_CHECK(run_until([&] { return a.stats().late_answers == 1; }));
  CAF_CHECK_EQUAL(got.size(), 3u);
  // No link to a node: failed at once, nothing sent.
  link::ask(&a.t, 3, lookup, 10s,
            [&](answer ans) { got.push_back(std::move(ans)); });
  CAF_REQUIRE_EQUAL(got.size(), 4u);
  CAF_CHECK_EQUAL(got[3].error, errc::not_leader);
  // The link closes with a request outstanding: it fails as unknown.
  b.stop();
  CAF_REQUIRE(run_until([&] { return got.size() == 5; }));
  CAF_CHECK_EQUAL(got[4].error, errc::leadership_lost);
  // Answered: the lookup and the overloaded transfer; sent: those and the
  // two held ones.
  CAF_CHECK_EQUAL(a.stats().answers_received, 2u);
  CAF_CHECK_EQUAL(a.stats().requests_sent, 4u);
}

CAF_TEST(the frames of one loop turn share a write and keep their order) {
  endpoint a{*this, 1, addr1, members};
  endpoint b{*this, 2, addr2, members};
  a.start();
  b.start();
  // Node 2 answers every lookup at once, with the key it was asked.
  link::set_server(&b.t, [&](const served& from, request req) {
    link::reply(&b.t, from, found(req));
  });
  CAF_REQUIRE(run_until([&] { return link::connected(&a.t, 2); }));
  auto sent_before = a.stats().frames_sent;
  auto writes_before = a.stats().frame_writes;
  auto answers_before = b.stats().frames_sent;
  auto answer_writes_before = b.stats().frame_writes;
  // 300 requests of ~1 KiB in one turn (~300 KiB): more than one write's
  // worth (64 KiB), so some leave before the turn ends, all in order.
  constexpr size_t n = 300;
  std::vector<std::string> got;
  for (size_t i = 0; i < n; ++i) {
    request lookup;
    lookup.kind = op::lookup;
    lookup.route = "orders";
    lookup.key = std::to_string(i) + std::string(1000, 'k');
    link::ask(&a.t, 2, std::move(lookup), 10s, [&](answer ans) {
      CAF_CHECK_EQUAL(ans.error, errc::none);
      got.push_back(ans.lookup.rec.key);
    });
  }
  CAF_REQUIRE(run_until([&] { return got.size() == n; }));
  for (size_t i = 0; i < n; ++i)
    CAF_CHECK_EQUAL(got[i], std::to_string(i) + std::string(1000, 'k'));
  auto frames = a.stats().frames_sent - sent_before;
  auto writes = a.stats().frame_writes - writes_before;
  CAF_CHECK_EQUAL(frames, n);
  // One write per 64 KiB and one for the rest of the turn.
  CAF_CHECK_LESS_OR_EQUAL(writes, 6u);
  CAF_CHECK_GREATER_OR_EQUAL(writes, 4u);
  // The answers came in bursts too: fewer writes than frames.
  CAF_CHECK_EQUAL(b.stats().frames_sent - answers_before, n);
  CAF_CHECK_LESS(b.stats().frame_writes - answer_writes_before, n / 2);
}

CAF_TEST(strangers and misbehaving members are refused before libraft) {
  // Node 3 accepts from nodes 1 and 2 (the lower ids dial).
  endpoint a{*this, 3, addr3, members};
  a.opts.handshake_timeout = 1500ms;
  a.start();
  auto port = port_of(addr3);
  uint64_t want_handshake = 0, want_identity = 0, want_hello = 0,
           want_frame = 0;
  auto verdict_is = [&] {
    auto st = a.stats();
    return st.refused_handshake == want_handshake
           && st.refused_identity == want_identity
           && st.refused_hello == want_hello
           && st.refused_frame == want_frame;
  };
  auto tls_case = [&](const char* what, std::string cert, std::string key,
                      std::string payload, uint64_t& counter,
                      bool answered = false) {
    CAF_MESSAGE(what);
    ++counter;
    tls_client client{port, std::move(cert), std::move(key),
                      std::move(payload)};
    CAF_CHECK(run_until([&] { return client.done() && verdict_is(); }));
    CAF_CHECK(client.refused());
    auto st = a.stats();
    CAF_CHECK_EQUAL(st.refused_handshake, want_handshake);
    CAF_CHECK_EQUAL(st.refused_identity, want_identity);
    CAF_CHECK_EQUAL(st.refused_hello, want_hello);
    CAF_CHECK_EQUAL(st.refused_frame, want_frame);
    // Nothing before a hello that checked: a stranger learns nothing.
    if (!answered)
      CAF_CHECK_EQUAL(client.received(), "");
    CAF_CHECK(a.accepts.empty());
  };
  {
    CAF_MESSAGE("plain TCP sending junk");
    ++want_handshake;
    auto fd = tcp_connect(port);
    std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + hello_frame(2, addr2);
    CAF_CHECK_EQUAL(::send(fd, junk.data(), junk.size(), 0),
                    static_cast<ssize_t>(junk.size()));
    CAF_CHECK(run_until([&] { return verdict_is() && closed_by_peer(fd); }));
    ::close(fd);
  }
  {
    CAF_MESSAGE("TCP, then silence: dropped at the handshake timeout");
    ++want_handshake;
    auto fd = tcp_connect(port);
    CAF_CHECK(run_until([&] { return verdict_is() && closed_by_peer(fd); }));
    ::close(fd);
  }
  auto h2 = hello_frame(2, addr2);
  tls_case("TLS without a client certificate", "", "", h2, want_handshake);
  tls_case("TLS with a self-signed certificate", certs().self_pem,
           certs().self_key, h2, want_handshake);
  tls_case("TLS with node 2's certificate of a foreign CA",
           certs().foreign_pem(), certs().foreign_key(), h2, want_handshake);
  tls_case("a valid certificate of node 4, which is not a member",
           certs().pem(4), certs().key(4), hello_frame(4, local(1234)),
           want_identity);
  tls_case("node 3's own certificate", certs().pem(3), certs().key(3),
           hello_frame(3, addr3), want_identity);
  tls_case("node 2's valid certificate claiming node 1", certs().pem(2),
           certs().key(2), hello_frame(1, addr1), want_identity);
  tls_case("node 2 claiming another address", certs().pem(2), certs().key(2),
           hello_frame(2, local(1)), want_identity);
  tls_case("no common version", certs().pem(2), certs().key(2),
           hello_frame(2, addr2, 7, 9), want_hello);
  tls_case("libraft's preamble of a build before the link", certs().pem(2),
           certs().key(2), preamble(2, addr2), want_hello);
  tls_case("a hello of a megabyte", certs().pem(2), certs().key(2),
           frame(frame_type::hello, 0, std::string(1 << 20, 'x')),
           want_hello);
  tls_case("a request before the hello", certs().pem(2), certs().key(2),
           frame(frame_type::request, 1, "x") + h2, want_hello);
  tls_case("TLS, then no hello: dropped at the timeout", certs().pem(2),
           certs().key(2), "", want_hello);
  // A member that said a valid hello gets node 3's hello back, then is cut
  // off at its first bad frame, without libraft hearing of it.
  std::string unknown_type = frame(frame_type::hello, 0, "");
  unknown_type[4] = 99;
  tls_case("a frame of an unknown type", certs().pem(2), certs().key(2),
           h2 + unknown_type, want_frame, true);
  tls_case("a frame over max_frame_bytes", certs().pem(2), certs().key(2),
           h2 + frame(frame_type::raft_data, 2, "").substr(0, 0)
             + std::string("\xff\xff\xff\x7f\x03\x00\x00\x00", 8)
             + std::string(8, '\0'),
           want_frame, true);
  tls_case("a request that does not decode", certs().pem(2), certs().key(2),
           h2 + frame(frame_type::request, 1, "\x63junk"), want_frame, true);
  tls_case("a stream of this node's parity", certs().pem(2), certs().key(2),
           h2 + frame(frame_type::raft_open, 2, ""), want_frame, true);
  tls_case("a second hello", certs().pem(2), certs().key(2), h2 + h2,
           want_frame, true);
  // Partitions: the count is the cluster's, and so is every frame's group.
  // The hello that says another count gets this node's hello (which says
  // its count), then the close.
  tls_case("a hello of a cluster with 8 partitions", certs().pem(2),
           certs().key(2), hello_frame(2, addr2, min_version, max_version, 8),
           want_hello, true);
  tls_case("a raft stream of a group the cluster does not have",
           certs().pem(2), certs().key(2),
           h2 + frame(frame_type::raft_open, 1, "", 1), want_frame, true);
  request lookup;
  lookup.kind = op::lookup;
  lookup.route = "r";
  lookup.key = "k";
  tls_case("a request of a group the cluster does not have", certs().pem(2),
           certs().key(2),
           h2 + frame(frame_type::request, 1, encode_request(lookup), 7),
           want_frame, true);
  CAF_CHECK_EQUAL(a.stats().refused_busy, 0u);
  CAF_CHECK(a.accepts.empty());
}

CAF_TEST(strangers addresses are closed at accept) {
  // The members live on 127.0.0.3 and 127.0.0.4; this test connects from
  // 127.0.0.1.
  auto p3 = free_port(), p4 = free_port();
  std::map<uint64_t, std::string> elsewhere{
    {3, "127.0.0.3:" + std::to_string(p3)},
    {4, "127.0.0.4:" + std::to_string(p4)}};
  endpoint a{*this, 3, elsewhere[3], elsewhere};
  a.start();
  auto fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(0x7f000003);
  addr.sin_port = htons(p3);
  CAF_REQUIRE_EQUAL(::connect(fd, reinterpret_cast<sockaddr*>(&addr),
                              sizeof(addr)),
                    0);
  CAF_CHECK(run_until([&] {
    return a.stats().refused_source == 1 && closed_by_peer(fd);
  }));
  ::close(fd);
  CAF_CHECK_EQUAL(a.stats().handshakes, 0u);
}

CAF_TEST(connections beyond max_handshakes are closed at once) {
  endpoint a{*this, 2, addr2, members};
  a.opts.max_handshakes = 4;
  a.opts.handshake_timeout = 30s; // the silent ones stay until they leave
  a.start();
  auto port = port_of(addr2);
  std::vector<int> fds;
  for (int i = 0; i < 6; ++i)
    fds.push_back(tcp_connect(port)); // in the backlog, in this order
  CAF_CHECK(run_until([&] { return a.stats().refused_busy == 2; }));
  CAF_CHECK(run_until([&] {
    return closed_by_peer(fds[4]) && closed_by_peer(fds[5]);
  }));
  for (int i = 0; i < 4; ++i)
    CAF_CHECK(!closed_by_peer(fds[i]));
  // While they are held, even a member's dial is turned away...
  endpoint b{*this, 1, addr1, members};
  b.start();
  CAF_CHECK(run_until([&] { return a.stats().refused_busy >= 3; }));
  CAF_CHECK(!link::connected(&b.t, 2));
  // ...and once they leave, its next dial gets in.
  for (int i = 0; i < 6; ++i)
    ::close(fds[i]);
  CAF_CHECK(run_until([&] { return link::connected(&b.t, 2); }));
  connect_attempt member;
  CAF_REQUIRE_EQUAL(member.start(b, 2, addr2), 0);
  CAF_CHECK(run_until([&] { return member.done && !a.accepts.empty(); }));
  CAF_CHECK_EQUAL(member.status, 0);
  CAF_CHECK_EQUAL(a.accepts.size(), 1u);
  CAF_CHECK_EQUAL(a.accepts[0].id, 1u);
  if (member.stream != nullptr)
    raft_side{member.stream}.close();
}

CAF_TEST(a link opens only if the server proves the id dialled) {
  // Node 3 answers at the address configured for node 2.
  members[2] = addr3;
  endpoint a{*this, 1, addr1, members};
  a.opts.handshake_timeout = 1500ms;
  endpoint c{*this, 3, addr3, members};
  c.start();
  a.start();
  connect_attempt wrong;
  CAF_REQUIRE_EQUAL(wrong.start(a, 2, addr3), 0);
  CAF_CHECK(run_until([&] { return wrong.done; }));
  CAF_CHECK_EQUAL(wrong.status, RAFT_NOCONNECTION);
  CAF_CHECK(wrong.stream == nullptr);
  CAF_CHECK(!link::connected(&a.t, 2));
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
  // A listener that never answers: no link within the handshake timeout.
  uint16_t silent_port = 0;
  auto lfd = silent_listener(silent_port);
  members[5] = local(silent_port);
  link::set_peers(&a.t, members);
  connect_attempt silent;
  CAF_REQUIRE_EQUAL(silent.start(a, 5, members[5]), 0);
  CAF_CHECK(run_until([&] { return silent.done; }));
  CAF_CHECK_EQUAL(silent.status, RAFT_NOCONNECTION);
  CAF_CHECK_GREATER_OR_EQUAL(a.stats().connect_failed, 2u);
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

CAF_TEST(a node that dials again replaces its old link) {
  endpoint b{*this, 2, addr2, members};
  b.start();
  {
    endpoint a{*this, 1, addr1, members};
    a.start();
    CAF_REQUIRE(run_until([&] { return b.stats().links == 1; }));
    // Node 1 goes away without a goodbye: its endpoint closes.
  }
  endpoint again{*this, 1, addr1, members};
  again.start();
  CAF_CHECK(run_until([&] {
    return b.stats().accepted == 2 && b.stats().links == 1
           && link::connected(&again.t, 2);
  }));
}

CAF_TEST(without TLS the link carries streams and requests in plain text) {
  endpoint a{*this, 1, addr1, members};
  endpoint b{*this, 2, addr2, members};
  a.opts.tls.reset();
  b.opts.tls.reset();
  a.start();
  b.start();
  link::set_server(&b.t, [&](const served& from, request req) {
    answer ans;
    ans.kind = req.kind;
    ans.value = 42;
    link::reply(&b.t, from, ans);
  });
  connect_attempt attempt;
  CAF_REQUIRE_EQUAL(attempt.start(a, 2, addr2), 0);
  CAF_REQUIRE(run_until([&] { return attempt.done && !b.accepts.empty(); }));
  CAF_REQUIRE_EQUAL(attempt.status, 0);
  raft_side one{attempt.stream};
  raft_side two{b.take_accepted()};
  two.start_reading();
  one.write(std::make_shared<std::string>("plain"));
  CAF_CHECK(run_until([&] { return two.received == "plain"; }));
  answer got;
  bool done = false;
  request doubt;
  doubt.kind = op::doubt;
  doubt.node = 1;
  link::ask(&a.t, 2, doubt, 10s, [&](answer ans) {
    got = std::move(ans);
    done = true;
  });
  CAF_CHECK(run_until([&] { return done; }));
  CAF_CHECK_EQUAL(got.error, errc::none);
  CAF_CHECK_EQUAL(got.value, 42u);
  one.close();
  two.close();
}

CAF_TEST(peers may be named by host name or IPv6 literal) {
  // Host names resolve on both sides the same way (listen and connect).
  auto p1 = free_port(), p2 = free_port();
  std::map<uint64_t, std::string> named{
    {1, "localhost:" + std::to_string(p1)},
    {2, "localhost:" + std::to_string(p2)}};
  {
    endpoint a{*this, 1, named[1], named};
    endpoint b{*this, 2, named[2], named};
    a.start();
    b.start();
    connect_attempt attempt;
    CAF_REQUIRE_EQUAL(attempt.start(a, 2, named[2]), 0);
    CAF_CHECK(run_until([&] { return attempt.done && !b.accepts.empty(); }));
    CAF_CHECK_EQUAL(attempt.status, 0);
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
  std::map<uint64_t, std::string> v6{
    {1, "[::1]:" + std::to_string(free_port())},
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

CAF_TEST(the link context offers only the Mozilla intermediate suites) {
  auto& c = certs();
  link::options opts;
  opts.tls = link::tls_files{c.ca, c.pem(1), c.key(1)};
  opts.peers = members;
  raft_uv_transport t;
  std::memset(&t, 0, sizeof(t));
  std::string error;
  CAF_REQUIRE_EQUAL(link::init(&t, &loop, opts, error), 0);
  auto ctx = static_cast<link::detail::group_port*>(t.impl)->owner->ctx;
  CAF_MESSAGE("offered: " << test::offered_suites(ctx));
  auto breaches = test::offer_violations(ctx);
  for (auto& x : breaches)
    CAF_MESSAGE("breach: " << x);
  CAF_CHECK(breaches.empty());
  link::close(&t);
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
    link::options opts;
    opts.tls = link::tls_files{x.ca, x.cert, x.key};
    opts.peers = members;
    raft_uv_transport t;
    std::memset(&t, 0, sizeof(t));
    std::string error;
    CAF_CHECK_EQUAL(link::init(&t, &loop, opts, error), RAFT_INVALID);
    CAF_MESSAGE("  error: " << error);
    for (auto& m : x.mentions)
      CAF_CHECK(error.find(m) != std::string::npos);
    CAF_CHECK(t.impl == nullptr);
  }
  for (auto [cert, key] : {std::pair{c.pem(1), c.key(1)},
                           std::pair{c.foreign_pem(), c.foreign_key()}}) {
    CAF_MESSAGE("while the CA is replaced, certificates of either CA: "
                << cert);
    link::options opts;
    opts.tls = link::tls_files{both, cert, key};
    opts.peers = members;
    raft_uv_transport t;
    std::memset(&t, 0, sizeof(t));
    std::string error;
    CAF_CHECK_EQUAL(link::init(&t, &loop, opts, error), 0);
    CAF_CHECK_EQUAL(error, "");
    if (t.impl != nullptr)
      link::close(&t);
  }
  {
    CAF_MESSAGE("a peer address that is not host:port");
    link::options opts;
    opts.tls = link::tls_files{c.ca, c.pem(1), c.key(1)};
    opts.peers = {{1, addr1}, {2, "no-port"}};
    raft_uv_transport t;
    std::memset(&t, 0, sizeof(t));
    std::string error;
    CAF_CHECK_EQUAL(link::init(&t, &loop, opts, error), RAFT_INVALID);
    CAF_CHECK(error.find("node 2") != std::string::npos);
  }
  {
    CAF_MESSAGE("a certificate that names another node than raft_init's id");
    link::options opts;
    opts.tls = link::tls_files{c.ca, c.pem(2), c.key(2)};
    opts.peers = members;
    raft_uv_transport t;
    std::memset(&t, 0, sizeof(t));
    std::string error;
    CAF_REQUIRE_EQUAL(link::init(&t, &loop, opts, error), 0);
    CAF_CHECK_EQUAL(t.init(&t, 1, addr1.c_str()), RAFT_INVALID);
    CAF_MESSAGE("  errmsg: " << t.errmsg);
    CAF_CHECK(std::string{t.errmsg}.find("node-1.oncegate") != std::string::npos);
    link::close(&t);
    CAF_CHECK(t.impl == nullptr);
  }
}

CAF_TEST_FIXTURE_SCOPE_END()
