#include "replication/tls_transport.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "common/logging.hpp"

// A raft_uv_transport over mutual TLS. Everything runs on the Raft loop:
// OpenSSL works on memory BIOs, libuv moves the bytes. Each connection
// hands libraft one end of a socketpair (a uv_pipe_t, as libraft's own
// transport hands it a uv_tcp_t) and pumps the other end to and from TLS.
//
//   outbound:  resolving -> connecting -> tls ----------------> bridged
//   inbound:                   (accept) -> tls -> preamble ---> bridged
//   any state -> closing (all handles closed) -> freed
//
// Outbound, the preamble (libraft's, see encode_preamble) is written right
// after the handshake, once the server proved the id we dialled. Inbound,
// it is read and checked against the client's certificate before libraft
// hears of the connection. A timer bounds everything before `bridged`.
//
// Back-pressure: each direction stops reading its source while the writes
// it queued on its destination exceed `high_water` and resumes below
// `low_water`, so a stalled side costs at most about high_water plus one
// read chunk (and the kernel's socket buffers) per direction.

namespace oncegate::cluster {

namespace {

// libraft 0.15, src/uv_tcp.h: UV__TCP_HANDSHAKE_PROTOCOL.
constexpr uint64_t preamble_protocol = 1;
// Protocol version, server id, size of the address buffer: three 64-bit
// little-endian words (src/uv_tcp_connect.c, uvTcpEncodeHandshake).
constexpr size_t preamble_size = 3 * sizeof(uint64_t);
// The address buffer of a legitimate peer is strlen(address) + 1 rounded
// up to 8; more than this is not a host:port.
constexpr size_t max_address_buffer = 512;

constexpr size_t read_chunk = 64 * 1024;
constexpr size_t high_water = 256 * 1024;
constexpr size_t low_water = 64 * 1024;
constexpr int listen_backlog = 128;

void put_le64(unsigned char* p, uint64_t x) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<unsigned char>(x >> (8 * i));
}

uint64_t get_le64(const unsigned char* p) {
  uint64_t x = 0;
  for (int i = 7; i >= 0; --i)
    x = (x << 8) | p[i];
  return x;
}

// What libraft's TCP transport writes after connecting: the connecting
// server's own id and address, the address NUL-terminated and zero-padded
// to a multiple of 8 bytes.
std::string encode_preamble(uint64_t id, const std::string& address) {
  auto len = (address.size() + 1 + 7) / 8 * 8;
  std::string out(preamble_size + len, '\0');
  auto p = reinterpret_cast<unsigned char*>(out.data());
  put_le64(p, preamble_protocol);
  put_le64(p + 8, id);
  put_le64(p + 16, len);
  std::memcpy(p + preamble_size, address.data(), address.size());
  return out;
}

std::string node_name(uint64_t id) {
  return "node-" + std::to_string(id) + ".oncegate";
}

bool names_node(X509* cert, uint64_t id) {
  auto name = node_name(id);
  return cert != nullptr
         && X509_check_host(cert, name.data(), name.size(),
                            X509_CHECK_FLAG_NO_WILDCARDS
                              | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT,
                            nullptr)
              == 1;
}

// Untrusted text made safe for a log line.
std::string printable(const char* data, size_t len, size_t limit = 128) {
  std::string out;
  for (size_t i = 0; i < len && i < limit; ++i) {
    auto c = static_cast<unsigned char>(data[i]);
    out += (c >= 0x20 && c < 0x7f && c != ' ') ? static_cast<char>(c) : '?';
  }
  if (len > limit)
    out += "...";
  return out;
}

// The DNS names of a certificate, for log lines.
std::string dns_names(X509* cert) {
  std::string out;
  auto names = static_cast<GENERAL_NAMES*>(
    X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr)
    return "(none)";
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    auto name = sk_GENERAL_NAME_value(names, i);
    if (name->type != GEN_DNS)
      continue;
    auto str = name->d.dNSName;
    if (!out.empty())
      out += ',';
    out += printable(reinterpret_cast<const char*>(ASN1_STRING_get0_data(str)),
                     static_cast<size_t>(ASN1_STRING_length(str)), 64);
  }
  GENERAL_NAMES_free(names);
  return out.empty() ? "(none)" : out;
}

// Drains OpenSSL's (thread-local) error queue into one line.
std::string openssl_error() {
  std::string out;
  while (auto e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty())
      out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown error" : out;
}

std::string tls_error(SSL* ssl) {
  auto vr = SSL_get_verify_result(ssl);
  if (vr != X509_V_OK) {
    ERR_clear_error();
    return std::string{"certificate: "} + X509_verify_cert_error_string(vr);
  }
  return openssl_error();
}

// Splits `host:port` or `[v6]:port`; the port must be 1..65535.
bool split_host_port(const std::string& address, std::string& host,
                     std::string& port) {
  std::string::size_type colon;
  if (!address.empty() && address[0] == '[') {
    auto close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size()
        || address[close + 1] != ':')
      return false;
    host = address.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = address.rfind(':');
    if (colon == std::string::npos)
      return false;
    host = address.substr(0, colon);
    if (host.find(':') != std::string::npos)
      return false; // IPv6 without brackets: ambiguous
  }
  port = address.substr(colon + 1);
  if (host.empty() || port.empty() || port.size() > 5
      || !std::all_of(port.begin(), port.end(),
                      [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  auto num = std::stoul(port);
  return num >= 1 && num <= 65535;
}

// A numeric IPv4 or IPv6 host; false for names.
bool numeric_address(const std::string& host, const std::string& port,
                     sockaddr_storage& out) {
  auto num = std::stoi(port);
  std::memset(&out, 0, sizeof(out));
  if (uv_ip4_addr(host.c_str(), num, reinterpret_cast<sockaddr_in*>(&out))
      == 0)
    return true;
  return uv_ip6_addr(host.c_str(), num, reinterpret_cast<sockaddr_in6*>(&out))
         == 0;
}

std::string sockaddr_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    auto in = reinterpret_cast<const sockaddr_in*>(sa);
    uv_ip4_name(in, buf, sizeof(buf));
    return std::string{buf} + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    auto in = reinterpret_cast<const sockaddr_in6*>(sa);
    uv_ip6_name(in, buf, sizeof(buf));
    return "[" + std::string{buf} + "]:" + std::to_string(ntohs(in->sin6_port));
  }
  return "?";
}

int no_passphrase(char*, int, int, void*) {
  return 0; // encrypted keys are refused rather than prompted for
}

struct transport;

enum class conn_state { resolving, connecting, tls, preamble, bridged, closing };

// Why a connection ends.
enum class verdict {
  done,              // closed by either side after bridging
  canceled,          // the transport closes
  failed,            // outbound failure, or an I/O error
  refused_handshake, // inbound refusals, one counter each
  refused_identity,
  refused_preamble,
  refused_busy,
};

struct connection;

struct write_req {
  uv_write_t req;
  connection* conn;
  bool to_tcp;
  size_t len;
  std::unique_ptr<char[]> data;
};

// Outlives its connection if the connection gives up on it: a running
// getaddrinfo cannot be taken back.
struct resolver {
  uv_getaddrinfo_t req;
  connection* conn;
};

struct connection {
  transport* owner = nullptr;
  uint64_t serial = 0;
  bool outbound = false;
  conn_state state = conn_state::tls;

  // Outbound: the id and address dialled; inbound: those claimed.
  uint64_t peer_id = 0;
  std::string peer_address;
  std::string remote = "?";

  // Outbound, until the callback ran.
  raft_uv_connect* req = nullptr;
  raft_uv_connect_cb cb = nullptr;
  int status = 0;

  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_pipe_t pipe; // our end of the socketpair
  bool pipe_open = false;
  int open_handles = 0;
  uv_connect_t connect_req;
  resolver* resolving = nullptr;

  SSL* ssl = nullptr;
  BIO* rbio = nullptr; // owned by ssl
  BIO* wbio = nullptr; // owned by ssl
  bool tls_failed = false;
  bool counted_handshake = false;

  size_t tcp_queued = 0;  // bytes in our writes to the TCP socket
  size_t pipe_queued = 0; // bytes in our writes to libraft's pipe
  bool tcp_reading = false;
  bool pipe_reading = false;
  std::unique_ptr<char[]> tcp_buf;
  std::unique_ptr<char[]> pipe_buf;
  std::unique_ptr<char[]> plain_buf;

  unsigned char preamble[preamble_size];
  size_t preamble_got = 0;
  std::vector<char> address_buf;
  size_t address_got = 0;

  ~connection() {
    if (ssl != nullptr)
      SSL_free(ssl);
  }

  void init_handles();
  bool make_ssl();
  void start_reading_tcp();
  bool start_reading_pipe();
  void start_connect(const sockaddr* addr);
  void advance();
  void do_handshake();
  void handshake_done();
  void read_preamble();
  std::string check_identity();
  void bridge();
  void pump_in();
  void on_pipe_data(ssize_t nread);
  bool flush_tls();
  void flush_tls_now();
  bool write_to(bool to_tcp, const char* data, size_t len);
  void on_written(write_req* w, int status);
  void on_timeout();
  void on_tcp_eof(ssize_t nread);
  void fail_outbound(const std::string& why);
  void refuse(verdict v, const std::string& why);
  void close(verdict v);
  void on_handle_closed();
};

struct transport {
  raft_uv_transport* iface = nullptr;
  uv_loop_t* loop = nullptr;
  SSL_CTX* ctx = nullptr;
  std::map<uint64_t, std::string> peers;
  std::string bind_address;
  std::chrono::milliseconds handshake_timeout{2000};
  size_t max_handshakes = 64;

  uint64_t id = 0;
  std::string address;
  uv_tcp_t listener;
  bool listener_open = false;
  raft_uv_accept_cb accept_cb = nullptr;

  std::map<uint64_t, std::unique_ptr<connection>> conns;
  uint64_t next_serial = 1;
  std::atomic<uint64_t> handshaking{0};
  bool closing = false;
  raft_uv_transport_close_cb close_cb = nullptr;

  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> connected{0};
  std::atomic<uint64_t> connect_failed{0};
  std::atomic<uint64_t> refused_handshake{0};
  std::atomic<uint64_t> refused_identity{0};
  std::atomic<uint64_t> refused_preamble{0};
  std::atomic<uint64_t> refused_busy{0};
  std::atomic<uint64_t> pauses{0};
  std::atomic<uint64_t> buffered{0};

  ~transport() {
    if (ctx != nullptr)
      SSL_CTX_free(ctx);
  }

  connection* make_connection(bool outbound) {
    auto c = std::make_unique<connection>();
    c->owner = this;
    c->serial = next_serial++;
    c->outbound = outbound;
    auto ptr = c.get();
    conns.emplace(ptr->serial, std::move(c));
    return ptr;
  }

  void maybe_fire_close() {
    if (!closing || listener_open || !conns.empty() || close_cb == nullptr)
      return;
    auto cb = close_cb;
    close_cb = nullptr;
    cb(iface);
  }

  void on_listen(int status);
};

transport& self_of(raft_uv_transport* t) {
  return *static_cast<transport*>(t->impl);
}

void set_errmsg(raft_uv_transport* t, const std::string& msg) {
  std::snprintf(t->errmsg, sizeof(t->errmsg), "%s", msg.c_str());
}

// -- connection ---------------------------------------------------------------

void on_handle_closed_cb(uv_handle_t* h) {
  static_cast<connection*>(h->data)->on_handle_closed();
}

void connection::init_handles() {
  uv_tcp_init(owner->loop, &tcp);
  tcp.data = this;
  uv_timer_init(owner->loop, &timer);
  timer.data = this;
  open_handles = 2;
  uv_timer_start(
    &timer, [](uv_timer_t* h) { static_cast<connection*>(h->data)->on_timeout(); },
    static_cast<uint64_t>(std::max<int64_t>(1, owner->handshake_timeout.count())),
    0);
}

bool connection::make_ssl() {
  ERR_clear_error();
  ssl = SSL_new(owner->ctx);
  rbio = BIO_new(BIO_s_mem());
  wbio = BIO_new(BIO_s_mem());
  if (ssl == nullptr || rbio == nullptr || wbio == nullptr) {
    BIO_free(rbio);
    BIO_free(wbio);
    rbio = wbio = nullptr;
    return false;
  }
  // An empty read BIO means "more to come", never end of stream.
  BIO_set_mem_eof_return(rbio, -1);
  SSL_set_bio(ssl, rbio, wbio);
  if (outbound)
    SSL_set_connect_state(ssl);
  else
    SSL_set_accept_state(ssl);
  return true;
}

void connection::start_reading_tcp() {
  if (tcp_reading)
    return;
  auto rv = uv_read_start(
    reinterpret_cast<uv_stream_t*>(&tcp),
    [](uv_handle_t* h, size_t, uv_buf_t* buf) {
      auto c = static_cast<connection*>(h->data);
      if (!c->tcp_buf)
        c->tcp_buf.reset(new char[read_chunk]);
      *buf = uv_buf_init(c->tcp_buf.get(), read_chunk);
    },
    [](uv_stream_t* s, ssize_t nread, const uv_buf_t*) {
      auto c = static_cast<connection*>(s->data);
      if (c->state == conn_state::closing || nread == 0)
        return;
      if (nread < 0) {
        c->on_tcp_eof(nread);
        return;
      }
      // A memory BIO takes everything; the bound is that we stop reading.
      if (BIO_write(c->rbio, c->tcp_buf.get(), static_cast<int>(nread))
          != nread) {
        c->tls_failed = true;
        c->close(verdict::failed);
        return;
      }
      c->advance();
    });
  if (rv != 0) {
    if (outbound)
      fail_outbound(std::string{"read: "} + uv_strerror(rv));
    else
      close(verdict::failed);
    return;
  }
  tcp_reading = true;
}

bool connection::start_reading_pipe() {
  pipe_reading = uv_read_start(
                   reinterpret_cast<uv_stream_t*>(&pipe),
                   [](uv_handle_t* h, size_t, uv_buf_t* buf) {
                     auto c = static_cast<connection*>(h->data);
                     if (!c->pipe_buf)
                       c->pipe_buf.reset(new char[read_chunk]);
                     *buf = uv_buf_init(c->pipe_buf.get(), read_chunk);
                   },
                   [](uv_stream_t* s, ssize_t nread, const uv_buf_t*) {
                     static_cast<connection*>(s->data)->on_pipe_data(nread);
                   })
                 == 0;
  return pipe_reading;
}

void connection::start_connect(const sockaddr* addr) {
  state = conn_state::connecting;
  remote = sockaddr_text(addr);
  connect_req.data = this;
  auto rv = uv_tcp_connect(&connect_req, &tcp, addr,
                           [](uv_connect_t* req, int status) {
    auto c = static_cast<connection*>(req->data);
    if (c->state == conn_state::closing)
      return;
    if (status != 0) {
      c->fail_outbound(std::string{"connect: "} + uv_strerror(status));
      return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (!c->make_ssl()) {
      c->fail_outbound("SSL_new: " + openssl_error());
      return;
    }
    c->state = conn_state::tls;
    c->start_reading_tcp();
    if (c->state == conn_state::tls)
      c->do_handshake(); // sends the ClientHello
  });
  if (rv != 0)
    fail_outbound(std::string{"connect: "} + uv_strerror(rv));
}

void connection::advance() {
  switch (state) {
    case conn_state::tls:
      do_handshake();
      break;
    case conn_state::preamble:
      read_preamble();
      break;
    case conn_state::bridged:
      pump_in();
      break;
    default:
      break;
  }
}

void connection::do_handshake() {
  ERR_clear_error();
  auto rv = SSL_do_handshake(ssl);
  if (rv == 1) {
    if (flush_tls())
      handshake_done();
    return;
  }
  auto err = SSL_get_error(ssl, rv);
  if (err == SSL_ERROR_WANT_READ) {
    flush_tls();
    return;
  }
  tls_failed = true;
  auto why = tls_error(ssl);
  flush_tls_now(); // the alert tells the peer why
  if (outbound)
    fail_outbound("TLS: " + why);
  else
    refuse(verdict::refused_handshake, "TLS: " + why);
}

void connection::handshake_done() {
  auto cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) {
    // Cannot happen with SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT.
    if (outbound)
      fail_outbound("no verified server certificate");
    else
      refuse(verdict::refused_handshake, "no verified client certificate");
    return;
  }
  if (!outbound) {
    state = conn_state::preamble;
    read_preamble();
    return;
  }
  if (!names_node(cert, peer_id)) {
    auto why = "server certificate names " + dns_names(cert) + ", not "
               + node_name(peer_id);
    log::cluster()->warn("tls.wrong_server conn={} id={} address={} remote={} "
                         "names={}",
                         serial, peer_id, peer_address, remote, dns_names(cert));
    fail_outbound(why);
    return;
  }
  auto pre = encode_preamble(owner->id, owner->address);
  ERR_clear_error();
  if (SSL_write(ssl, pre.data(), static_cast<int>(pre.size()))
      != static_cast<int>(pre.size())) {
    tls_failed = true;
    fail_outbound("TLS write: " + openssl_error());
    return;
  }
  if (flush_tls())
    bridge();
}

void connection::read_preamble() {
  for (;;) {
    char* dst;
    size_t want;
    if (preamble_got < preamble_size) {
      dst = reinterpret_cast<char*>(preamble) + preamble_got;
      want = preamble_size - preamble_got;
    } else {
      dst = address_buf.data() + address_got;
      want = address_buf.size() - address_got;
    }
    ERR_clear_error();
    auto rv = SSL_read(ssl, dst, static_cast<int>(want));
    if (rv <= 0) {
      auto err = SSL_get_error(ssl, rv);
      if (err == SSL_ERROR_WANT_READ) {
        flush_tls();
        return;
      }
      std::string why = "closed before the preamble";
      if (err != SSL_ERROR_ZERO_RETURN) {
        tls_failed = true;
        why = "TLS: " + tls_error(ssl);
      }
      refuse(verdict::refused_preamble, why);
      return;
    }
    auto n = static_cast<size_t>(rv);
    if (preamble_got < preamble_size) {
      preamble_got += n;
      if (preamble_got < preamble_size)
        continue;
      auto protocol = get_le64(preamble);
      peer_id = get_le64(preamble + 8);
      auto len = get_le64(preamble + 16);
      if (protocol != preamble_protocol) {
        refuse(verdict::refused_preamble,
               "unknown protocol version " + std::to_string(protocol));
        return;
      }
      if (len == 0 || len % 8 != 0 || len > max_address_buffer) {
        refuse(verdict::refused_preamble,
               "bad address length " + std::to_string(len));
        return;
      }
      address_buf.resize(len);
    } else {
      address_got += n;
      if (address_got == address_buf.size())
        break;
    }
  }
  auto nul = static_cast<const char*>(
    std::memchr(address_buf.data(), '\0', address_buf.size()));
  if (nul == nullptr || nul == address_buf.data()) {
    refuse(verdict::refused_preamble, "address not NUL-terminated or empty");
    return;
  }
  peer_address.assign(address_buf.data(),
                      static_cast<size_t>(nul - address_buf.data()));
  if (auto why = check_identity(); !why.empty()) {
    refuse(verdict::refused_identity, why);
    return;
  }
  bridge();
}

std::string connection::check_identity() {
  auto cert = SSL_get0_peer_certificate(ssl);
  if (peer_id == owner->id)
    return "claims this node's own id " + std::to_string(peer_id);
  auto i = owner->peers.find(peer_id);
  if (i == owner->peers.end())
    return "node " + std::to_string(peer_id) + " is not a member";
  if (!names_node(cert, peer_id))
    return "claims node " + std::to_string(peer_id)
           + " but its certificate names " + dns_names(cert);
  if (i->second != peer_address)
    return "claims address "
           + printable(peer_address.data(), peer_address.size())
           + " but node " + std::to_string(peer_id) + " is at " + i->second;
  return {};
}

void connection::bridge() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    auto why = std::string{"socketpair: "} + std::strerror(errno);
    if (outbound)
      fail_outbound(why);
    else
      refuse(verdict::refused_handshake, why);
    return;
  }
  // libraft owns this handle from the callback on: it uv_close()s it and
  // releases it with raft_free (RaftHeapFree), as it does its TCP handles.
  auto theirs = static_cast<uv_pipe_t*>(raft_malloc(sizeof(uv_pipe_t)));
  int rv = theirs == nullptr ? UV_ENOMEM : 0;
  if (rv == 0) {
    uv_pipe_init(owner->loop, theirs, 0);
    rv = uv_pipe_open(theirs, fds[0]);
    if (rv != 0) {
      ::close(fds[0]);
      uv_close(reinterpret_cast<uv_handle_t*>(theirs),
               [](uv_handle_t* h) { raft_free(h); });
    }
  } else {
    ::close(fds[0]);
  }
  if (rv == 0) {
    uv_pipe_init(owner->loop, &pipe, 0);
    pipe.data = this;
    pipe_open = true;
    ++open_handles;
    rv = uv_pipe_open(&pipe, fds[1]);
    if (rv != 0) {
      ::close(fds[1]);
      uv_close(reinterpret_cast<uv_handle_t*>(theirs),
               [](uv_handle_t* h) { raft_free(h); });
    }
  } else {
    ::close(fds[1]);
  }
  if (rv != 0) {
    auto why = std::string{"pipe: "} + uv_strerror(rv);
    if (outbound)
      fail_outbound(why);
    else
      refuse(verdict::refused_handshake, why);
    return;
  }
  uv_timer_stop(&timer);
  if (counted_handshake) {
    counted_handshake = false;
    --owner->handshaking;
  }
  state = conn_state::bridged;
  auto reading = start_reading_pipe();
  auto stream = reinterpret_cast<uv_stream_t*>(theirs);
  if (outbound) {
    ++owner->connected;
    log::cluster()->info("tls.connected conn={} id={} address={} remote={}",
                         serial, peer_id, peer_address, remote);
    auto r = req;
    auto callback = cb;
    req = nullptr;
    cb = nullptr;
    callback(r, stream, 0);
  } else {
    ++owner->accepted;
    log::cluster()->info("tls.accepted conn={} id={} address={} remote={}",
                         serial, peer_id, peer_address, remote);
    owner->accept_cb(owner->iface, peer_id, peer_address.c_str(), stream);
  }
  if (!reading) {
    close(verdict::failed);
    return;
  }
  // Bytes that arrived behind the preamble (or the handshake).
  pump_in();
}

// TLS -> libraft.
void connection::pump_in() {
  if (state != conn_state::bridged)
    return;
  if (!plain_buf)
    plain_buf.reset(new char[read_chunk]);
  size_t have = 0;
  bool more = true;
  while (more && pipe_queued + have < high_water) {
    ERR_clear_error();
    auto rv = SSL_read(ssl, plain_buf.get() + have,
                       static_cast<int>(read_chunk - have));
    if (rv > 0) {
      have += static_cast<size_t>(rv);
      if (have == read_chunk) {
        if (!write_to(false, plain_buf.get(), have))
          return;
        have = 0;
      }
      continue;
    }
    auto err = SSL_get_error(ssl, rv);
    if (err == SSL_ERROR_WANT_READ) {
      more = false;
      continue;
    }
    if (have > 0 && !write_to(false, plain_buf.get(), have))
      return;
    if (err != SSL_ERROR_ZERO_RETURN) {
      tls_failed = true;
      log::cluster()->info("tls.error conn={} id={} reason={}", serial,
                           peer_id, tls_error(ssl));
    }
    close(verdict::done);
    return;
  }
  if (have > 0 && !write_to(false, plain_buf.get(), have))
    return;
  if (!flush_tls()) // SSL_read may answer (a key update, say)
    return;
  if (pipe_queued < high_water) {
    start_reading_tcp();
  } else if (tcp_reading) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp));
    tcp_reading = false;
    ++owner->pauses;
  }
}

// libraft -> TLS.
void connection::on_pipe_data(ssize_t nread) {
  if (state != conn_state::bridged || nread == 0)
    return;
  if (nread < 0) { // libraft closed its end
    close(verdict::done);
    return;
  }
  ERR_clear_error();
  if (SSL_write(ssl, pipe_buf.get(), static_cast<int>(nread)) != nread) {
    tls_failed = true;
    log::cluster()->info("tls.error conn={} id={} reason={}", serial, peer_id,
                         openssl_error());
    close(verdict::failed);
    return;
  }
  if (!flush_tls())
    return;
  if (tcp_queued >= high_water && pipe_reading) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&pipe));
    pipe_reading = false;
    ++owner->pauses;
  }
}

// Queues what OpenSSL produced on the TCP socket.
bool connection::flush_tls() {
  while (auto pending = BIO_ctrl_pending(wbio)) {
    auto w = new write_req{};
    w->len = pending;
    w->data.reset(new char[pending]);
    auto got = BIO_read(wbio, w->data.get(), static_cast<int>(pending));
    if (got <= 0) {
      delete w;
      break;
    }
    w->len = static_cast<size_t>(got);
    w->conn = this;
    w->to_tcp = true;
    w->req.data = w;
    auto buf = uv_buf_init(w->data.get(), static_cast<unsigned>(w->len));
    auto rv = uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&tcp), &buf, 1,
                       [](uv_write_t* req, int status) {
      auto w = static_cast<write_req*>(req->data);
      w->conn->on_written(w, status);
    });
    if (rv != 0) {
      delete w;
      close(verdict::failed);
      return false;
    }
    tcp_queued += w->len;
    owner->buffered += w->len;
  }
  return true;
}

// Last words before closing (an alert, close_notify): best effort, since
// uv_close cancels queued writes.
void connection::flush_tls_now() {
  char buf[4096];
  int got;
  while ((got = BIO_read(wbio, buf, sizeof(buf))) > 0) {
    auto b = uv_buf_init(buf, static_cast<unsigned>(got));
    if (uv_try_write(reinterpret_cast<uv_stream_t*>(&tcp), &b, 1) != got)
      break;
  }
}

bool connection::write_to(bool to_tcp, const char* data, size_t len) {
  auto w = new write_req{};
  w->conn = this;
  w->to_tcp = to_tcp;
  w->len = len;
  w->data.reset(new char[len]);
  std::memcpy(w->data.get(), data, len);
  w->req.data = w;
  auto buf = uv_buf_init(w->data.get(), static_cast<unsigned>(len));
  auto stream = to_tcp ? reinterpret_cast<uv_stream_t*>(&tcp)
                       : reinterpret_cast<uv_stream_t*>(&pipe);
  auto rv = uv_write(&w->req, stream, &buf, 1, [](uv_write_t* req, int status) {
    auto w = static_cast<write_req*>(req->data);
    w->conn->on_written(w, status);
  });
  if (rv != 0) {
    delete w;
    close(verdict::failed);
    return false;
  }
  (to_tcp ? tcp_queued : pipe_queued) += len;
  owner->buffered += len;
  return true;
}

void connection::on_written(write_req* w, int status) {
  std::unique_ptr<write_req> guard{w};
  (w->to_tcp ? tcp_queued : pipe_queued) -= w->len;
  owner->buffered -= w->len;
  if (state == conn_state::closing)
    return;
  if (status != 0) {
    on_tcp_eof(status); // a failed write ends the connection like a read
    return;
  }
  if (state != conn_state::bridged)
    return;
  if (w->to_tcp) {
    if (tcp_queued < low_water && !pipe_reading && !start_reading_pipe())
      close(verdict::failed);
  } else if (pipe_queued < low_water && !tcp_reading) {
    pump_in();
  }
}

void connection::on_timeout() {
  if (state == conn_state::closing || state == conn_state::bridged)
    return;
  auto ms = std::to_string(owner->handshake_timeout.count()) + " ms";
  if (outbound)
    fail_outbound("no verified connection within " + ms);
  else if (state == conn_state::preamble)
    refuse(verdict::refused_preamble, "no preamble within " + ms);
  else
    refuse(verdict::refused_handshake, "no TLS handshake within " + ms);
}

void connection::on_tcp_eof(ssize_t nread) {
  std::string why = nread == UV_EOF ? "closed" : uv_strerror(static_cast<int>(nread));
  switch (state) {
    case conn_state::tls:
      if (outbound)
        fail_outbound("closed during the TLS handshake: " + why);
      else
        refuse(verdict::refused_handshake, "closed during the TLS handshake: " + why);
      break;
    case conn_state::preamble:
      refuse(verdict::refused_preamble, "closed before the preamble: " + why);
      break;
    default:
      close(verdict::done);
  }
}

void connection::fail_outbound(const std::string& why) {
  if (state == conn_state::closing)
    return;
  set_errmsg(owner->iface, "connect to " + std::to_string(peer_id) + " at "
                             + peer_address + ": " + why);
  log::cluster()->debug("tls.connect_failed conn={} id={} address={} reason={}",
                        serial, peer_id, peer_address, why);
  close(verdict::failed);
}

void connection::refuse(verdict v, const std::string& why) {
  if (state == conn_state::closing)
    return;
  const char* reason = "handshake";
  switch (v) {
    case verdict::refused_handshake:
      ++owner->refused_handshake;
      break;
    case verdict::refused_identity:
      ++owner->refused_identity;
      reason = "identity";
      break;
    case verdict::refused_preamble:
      ++owner->refused_preamble;
      reason = "preamble";
      break;
    case verdict::refused_busy:
      ++owner->refused_busy;
      reason = "busy";
      break;
    default:
      break;
  }
  // A peer that got through TLS is a member's key misbehaving: louder than
  // a stranger knocking.
  auto level = v == verdict::refused_identity || v == verdict::refused_preamble
                 ? spdlog::level::warn
                 : spdlog::level::info;
  log::cluster()->log(level, "tls.refused conn={} remote={} reason={} detail={}",
                      serial, remote, reason, why);
  close(v);
}

void connection::close(verdict v) {
  if (state == conn_state::closing)
    return;
  auto was = state;
  state = conn_state::closing;
  if (counted_handshake) {
    counted_handshake = false;
    --owner->handshaking;
  }
  if (req != nullptr) {
    status = v == verdict::canceled ? RAFT_CANCELED : RAFT_NOCONNECTION;
    if (v != verdict::canceled)
      ++owner->connect_failed;
  }
  if (ssl != nullptr && was != conn_state::resolving
      && was != conn_state::connecting) {
    if (was == conn_state::bridged && !tls_failed) {
      ERR_clear_error();
      SSL_shutdown(ssl); // close_notify
      ERR_clear_error();
    }
    flush_tls_now();
  }
  if (resolving != nullptr) {
    resolving->conn = nullptr;
    uv_cancel(reinterpret_cast<uv_req_t*>(&resolving->req));
    resolving = nullptr;
  }
  uv_timer_stop(&timer);
  uv_close(reinterpret_cast<uv_handle_t*>(&timer), on_handle_closed_cb);
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp), on_handle_closed_cb);
  if (pipe_open)
    uv_close(reinterpret_cast<uv_handle_t*>(&pipe), on_handle_closed_cb);
}

void connection::on_handle_closed() {
  if (--open_handles > 0)
    return;
  auto t = owner;
  auto r = req;
  auto callback = cb;
  auto st = status;
  auto key = serial;
  t->conns.erase(key); // deletes *this
  if (r != nullptr)
    callback(r, nullptr, st);
  t->maybe_fire_close();
}

// -- transport ----------------------------------------------------------------

void transport::on_listen(int status) {
  if (status != 0) {
    log::cluster()->warn("tls.accept_failed reason={}", uv_strerror(status));
    return;
  }
  if (closing)
    return;
  auto c = make_connection(false);
  c->init_handles();
  auto rv = uv_accept(reinterpret_cast<uv_stream_t*>(&listener),
                      reinterpret_cast<uv_stream_t*>(&c->tcp));
  if (rv != 0) {
    log::cluster()->warn("tls.accept_failed reason={}", uv_strerror(rv));
    c->close(verdict::failed);
    return;
  }
  sockaddr_storage peer;
  int len = sizeof(peer);
  if (uv_tcp_getpeername(&c->tcp, reinterpret_cast<sockaddr*>(&peer), &len)
      == 0)
    c->remote = sockaddr_text(reinterpret_cast<sockaddr*>(&peer));
  if (handshaking >= max_handshakes) {
    c->refuse(verdict::refused_busy,
              std::to_string(handshaking) + " handshakes in progress");
    return;
  }
  ++handshaking;
  c->counted_handshake = true;
  uv_tcp_nodelay(&c->tcp, 1);
  if (!c->make_ssl()) {
    c->refuse(verdict::refused_handshake, "SSL_new: " + openssl_error());
    return;
  }
  c->state = conn_state::tls;
  c->start_reading_tcp();
}

int iface_init(raft_uv_transport* t, raft_id id, const char* address) {
  auto& x = self_of(t);
  auto own = SSL_CTX_get0_certificate(x.ctx);
  if (!names_node(own, id)) {
    set_errmsg(t, "this node's certificate names " + dns_names(own) + ", not "
                    + node_name(id));
    return RAFT_INVALID;
  }
  x.id = id;
  x.address = address;
  uv_tcp_init(x.loop, &x.listener);
  x.listener.data = &x;
  x.listener_open = true;
  return 0;
}

int iface_listen(raft_uv_transport* t, raft_uv_accept_cb cb) {
  auto& x = self_of(t);
  x.accept_cb = cb;
  const auto& where = x.bind_address.empty() ? x.address : x.bind_address;
  std::string host, port;
  if (!split_host_port(where, host, port)) {
    set_errmsg(t, "listen address " + where + " is not host:port");
    return RAFT_INVALID;
  }
  sockaddr_storage addr;
  if (!numeric_address(host, port, addr)) {
    // At start-up, on libraft's call from raft_start: a blocking lookup.
    uv_getaddrinfo_t req;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    auto rv = uv_getaddrinfo(x.loop, &req, nullptr, host.c_str(), port.c_str(),
                             &hints);
    if (rv != 0 || req.addrinfo == nullptr) {
      set_errmsg(t, "listen address " + where + ": " + uv_strerror(rv));
      uv_freeaddrinfo(req.addrinfo);
      return RAFT_IOERR;
    }
    std::memcpy(&addr, req.addrinfo->ai_addr, req.addrinfo->ai_addrlen);
    uv_freeaddrinfo(req.addrinfo);
  }
  auto rv = uv_tcp_bind(&x.listener, reinterpret_cast<sockaddr*>(&addr), 0);
  if (rv == 0)
    rv = uv_listen(reinterpret_cast<uv_stream_t*>(&x.listener), listen_backlog,
                   [](uv_stream_t* s, int status) {
                     static_cast<transport*>(s->data)->on_listen(status);
                   });
  if (rv != 0) {
    set_errmsg(t, "listen on " + where + ": " + uv_strerror(rv));
    return RAFT_IOERR;
  }
  log::cluster()->info("tls.listening id={} address={}", x.id, where);
  return 0;
}

int iface_connect(raft_uv_transport* t, raft_uv_connect* req, raft_id id,
                  const char* address, raft_uv_connect_cb cb) {
  auto& x = self_of(t);
  if (x.closing)
    return RAFT_CANCELED;
  auto i = x.peers.find(id);
  if (i == x.peers.end()) {
    set_errmsg(t, "node " + std::to_string(id) + " is not a member");
    return RAFT_NOCONNECTION;
  }
  if (i->second != address) {
    set_errmsg(t, "node " + std::to_string(id) + " is at " + i->second
                    + ", not " + address);
    return RAFT_NOCONNECTION;
  }
  std::string host, port;
  if (!split_host_port(i->second, host, port)) {
    set_errmsg(t, "address " + i->second + " is not host:port");
    return RAFT_NOCONNECTION;
  }
  auto c = x.make_connection(true);
  c->req = req;
  c->cb = cb;
  req->cb = cb;
  c->peer_id = id;
  c->peer_address = i->second;
  c->init_handles();
  sockaddr_storage addr;
  if (numeric_address(host, port, addr)) {
    c->start_connect(reinterpret_cast<sockaddr*>(&addr));
    return 0;
  }
  c->state = conn_state::resolving;
  auto r = new resolver{};
  r->conn = c;
  c->resolving = r;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  auto rv = uv_getaddrinfo(
    x.loop, &r->req,
    [](uv_getaddrinfo_t* req, int status, addrinfo* res) {
      std::unique_ptr<resolver> r{reinterpret_cast<resolver*>(req)};
      auto c = r->conn;
      if (c == nullptr) { // gave up on it
        uv_freeaddrinfo(res);
        return;
      }
      c->resolving = nullptr;
      if (status != 0 || res == nullptr) {
        uv_freeaddrinfo(res);
        c->fail_outbound(std::string{"resolve: "} + uv_strerror(status));
        return;
      }
      sockaddr_storage addr;
      std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
      uv_freeaddrinfo(res);
      c->start_connect(reinterpret_cast<sockaddr*>(&addr));
    },
    host.c_str(), port.c_str(), &hints);
  if (rv != 0) {
    c->resolving = nullptr;
    delete r;
    c->fail_outbound(std::string{"resolve: "} + uv_strerror(rv));
  }
  return 0;
}

void iface_close(raft_uv_transport* t, raft_uv_transport_close_cb cb) {
  auto& x = self_of(t);
  x.closing = true;
  x.close_cb = cb;
  if (x.listener_open && !uv_is_closing(reinterpret_cast<uv_handle_t*>(&x.listener)))
    uv_close(reinterpret_cast<uv_handle_t*>(&x.listener), [](uv_handle_t* h) {
      auto x = static_cast<transport*>(h->data);
      x->listener_open = false;
      x->maybe_fire_close();
    });
  for (auto& [serial, c] : x.conns)
    c->close(c->req != nullptr ? verdict::canceled : verdict::done);
  x.maybe_fire_close();
}

// Fails with `error` set unless `path` names a readable regular file.
bool readable(const char* what, const std::string& path, std::string& error) {
  if (path.empty()) {
    error = std::string{what} + " is not set";
    return false;
  }
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    error = std::string{what} + " " + path + ": "
            + (ec ? ec.message() : "no such file");
    return false;
  }
  if (!std::filesystem::is_regular_file(st)) {
    error = std::string{what} + " " + path + ": not a regular file";
    return false;
  }
  auto f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    error = std::string{what} + " " + path + ": " + std::strerror(errno);
    return false;
  }
  std::fclose(f);
  return true;
}

} // namespace

int tls_transport_init(raft_uv_transport* t, uv_loop_t* loop,
                       const tls_transport_options& opts, std::string& error) {
  if (!readable("ca_file", opts.ca_file, error)
      || !readable("cert_file", opts.cert_file, error)
      || !readable("key_file", opts.key_file, error))
    return RAFT_INVALID;
  if (opts.max_handshakes == 0 || opts.handshake_timeout.count() <= 0) {
    error = "max_handshakes and handshake_timeout must be positive";
    return RAFT_INVALID;
  }
  for (auto& [id, address] : opts.peers) {
    std::string host, port;
    if (id == 0 || !split_host_port(address, host, port)) {
      error = "peers: node " + std::to_string(id) + " at '" + address
              + "': not a positive id and host:port";
      return RAFT_INVALID;
    }
  }
  if (std::string host, port;
      !opts.bind_address.empty()
      && !split_host_port(opts.bind_address, host, port)) {
    error = "bind_address " + opts.bind_address + " is not host:port";
    return RAFT_INVALID;
  }
  auto x = std::make_unique<transport>();
  ERR_clear_error();
  x->ctx = SSL_CTX_new(TLS_method());
  if (x->ctx == nullptr) {
    error = "SSL_CTX_new: " + openssl_error();
    return RAFT_NOMEM;
  }
  auto ctx = x->ctx;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION
                             | SSL_OP_NO_TICKET);
  // Every connection is a full handshake: no session state to reason about.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx, 0);
  static const unsigned char sid_ctx[] = "oncegate-raft";
  SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof(sid_ctx) - 1);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
  if (SSL_CTX_load_verify_locations(ctx, opts.ca_file.c_str(), nullptr) != 1) {
    error = "ca_file " + opts.ca_file + ": no CA certificate loaded: "
            + openssl_error();
    return RAFT_INVALID;
  }
  if (SSL_CTX_use_certificate_chain_file(ctx, opts.cert_file.c_str()) != 1) {
    error = "cert_file " + opts.cert_file + ": no certificate loaded: "
            + openssl_error();
    return RAFT_INVALID;
  }
  auto leaf = SSL_CTX_get0_certificate(ctx);
  {
    auto bio = BIO_new_file(opts.key_file.c_str(), "r");
    EVP_PKEY* key = bio != nullptr
                      ? PEM_read_bio_PrivateKey(bio, nullptr, no_passphrase,
                                                nullptr)
                      : nullptr;
    BIO_free(bio);
    if (key == nullptr) {
      error = "key_file " + opts.key_file
              + ": no private key loaded (encrypted keys are not supported): "
              + openssl_error();
      return RAFT_INVALID;
    }
    auto matches = X509_check_private_key(leaf, key) == 1;
    ERR_clear_error();
    auto used = matches && SSL_CTX_use_PrivateKey(ctx, key) == 1;
    EVP_PKEY_free(key);
    if (!matches) {
      error = "key_file " + opts.key_file + " does not match cert_file "
              + opts.cert_file;
      return RAFT_INVALID;
    }
    if (!used) {
      error = "key_file " + opts.key_file + ": " + openssl_error();
      return RAFT_INVALID;
    }
  }
  // Our own certificate must pass what peers will check, in both roles:
  // better a clear error at start than refusals everywhere later.
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx, &chain);
  for (auto purpose : {X509_PURPOSE_SSL_SERVER, X509_PURPOSE_SSL_CLIENT}) {
    auto sc = X509_STORE_CTX_new();
    auto ok = sc != nullptr
              && X509_STORE_CTX_init(sc, SSL_CTX_get_cert_store(ctx), leaf,
                                     chain)
                   == 1
              && X509_STORE_CTX_set_purpose(sc, purpose) == 1
              && X509_verify_cert(sc) == 1;
    auto err = sc != nullptr ? X509_STORE_CTX_get_error(sc) : X509_V_OK;
    X509_STORE_CTX_free(sc);
    if (!ok) {
      error = "cert_file " + opts.cert_file + " does not verify against ca_file "
              + opts.ca_file + " as a TLS "
              + (purpose == X509_PURPOSE_SSL_SERVER ? "server" : "client")
              + ": " + X509_verify_cert_error_string(err);
      ERR_clear_error();
      return RAFT_INVALID;
    }
  }
  x->loop = loop;
  x->peers = opts.peers;
  x->bind_address = opts.bind_address;
  x->handshake_timeout = opts.handshake_timeout;
  x->max_handshakes = opts.max_handshakes;
  auto data = t->data;
  std::memset(t, 0, sizeof(*t));
  t->data = data;
  x->iface = t;
  t->impl = x.release();
  t->init = iface_init;
  t->listen = iface_listen;
  t->connect = iface_connect;
  t->close = iface_close;
  return 0;
}

void tls_transport_set_peers(raft_uv_transport* t,
                             std::map<uint64_t, std::string> peers) {
  self_of(t).peers = std::move(peers);
}

void tls_transport_close(raft_uv_transport* t) {
  if (t->impl == nullptr)
    return;
  auto x = static_cast<transport*>(t->impl);
  if (x->listener_open || !x->conns.empty()) {
    // libuv still points into it: leaking beats a use after free.
    log::cluster()->error("tls.close_while_open connections={}",
                          x->conns.size());
    return;
  }
  delete x;
  t->impl = nullptr;
}

tls_transport_stats tls_transport_stats_of(raft_uv_transport* t) {
  tls_transport_stats res;
  if (t->impl == nullptr)
    return res;
  auto& x = self_of(t);
  res.accepted = x.accepted.load();
  res.connected = x.connected.load();
  res.connect_failed = x.connect_failed.load();
  res.refused_handshake = x.refused_handshake.load();
  res.refused_identity = x.refused_identity.load();
  res.refused_preamble = x.refused_preamble.load();
  res.refused_busy = x.refused_busy.load();
  res.backpressure_pauses = x.pauses.load();
  res.buffered_bytes = x.buffered.load();
  res.handshakes = x.handshaking.load();
  return res;
}

} // namespace oncegate::cluster
