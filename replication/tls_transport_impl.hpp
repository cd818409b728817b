// @private: the inside of the TLS Raft transport (tls_transport.hpp),
// shared by its implementation files and included by nothing else:
// the transport's and each connection's state and steps. The
// raft_uv_transport glue (listen, connect, accept, close, the options) is
// tls_transport.cpp; one connection's states (TLS handshake, libraft's
// preamble, bridging, refusals, closing) tls_connection.cpp; the bytes
// between the socket, OpenSSL and libraft's pipe (back-pressure)
// tls_pump.cpp. Which certificate names which node is tls_identity.*.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <sys/socket.h>

#include <openssl/ssl.h>

#include "replication/tls_transport.hpp"

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

namespace oncegate::cluster::detail {

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

// What libraft's TCP transport writes after connecting: the connecting
// server's own id and address, the address NUL-terminated and zero-padded
// to a multiple of 8 bytes.
std::string encode_preamble(uint64_t id, const std::string& address);

// Why a TLS handshake or read failed: the certificate check's verdict if
// it failed, else OpenSSL's error queue.
std::string tls_error(SSL* ssl);

// Splits `host:port` or `[v6]:port`; the port must be 1..65535.
bool split_host_port(const std::string& address, std::string& host,
                     std::string& port);

// A numeric IPv4 or IPv6 host; false for names.
bool numeric_address(const std::string& host, const std::string& port,
                     sockaddr_storage& out);

std::string sockaddr_text(const sockaddr* sa);

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

  // -- states (tls_connection.cpp) --------------------------------------------
  void init_handles();
  bool make_ssl();
  void start_connect(const sockaddr* addr);
  void advance();
  void do_handshake();
  void handshake_done();
  void read_preamble();
  std::string check_identity();
  void bridge();
  void on_timeout();
  void on_tcp_eof(ssize_t nread);
  void fail_outbound(const std::string& why);
  void refuse(verdict v, const std::string& why);
  void close(verdict v);
  void on_handle_closed();

  // -- bytes (tls_pump.cpp) ---------------------------------------------------
  void start_reading_tcp();
  bool start_reading_pipe();
  void pump_in();
  void on_pipe_data(ssize_t nread);
  bool flush_tls();
  void flush_tls_now();
  bool write_to(bool to_tcp, const char* data, size_t len);
  bool queue_write(std::unique_ptr<write_req> w);
  void on_written(write_req* w, int status);
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

void set_errmsg(raft_uv_transport* t, const std::string& msg);

} // namespace oncegate::cluster::detail
